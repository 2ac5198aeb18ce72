"""Trainer v2.3.0's own runtimes, verbatim, through kai_fn on the real KAI (issue 24, item 3; issue 21's torchtune).

Every ClusterTrainingRuntime of Trainer's ``manifests/base/runtimes``, read from the Go module cache
(kai_fn/local/runtimes.py says what a user changes: ``schedulerName`` on the runtime; the queue label, numNodes, a
GPU request and the pool's nodeSelector on the TrainJob). For each runtime, on a simnodes pool of its own:

- a first TrainJob binds whole: every GPU pod bound, the initializers Succeeded before any GPU pod existed, its
  PodGroups exactly kai_fn's plan (:func:`kai_fn.core.plan.plan` of the live TrainJob and runtime), one per start
  wave, and the torchtune runtimes' volume claims bound by the PersistentVolume binder to the volumes made for them
  (their initializers mount the claim: kwok runs them and completes them by its stage keyed on the replicatedJob
  name, testbed/kwok, so pods with a bound claim run on kwok's nodes like any other);
- the contention case: with the pool full of the first and room for part of a second (one node more when the gang
  has more than one GPU pod), the second holds no GPU until KAI has said why it waits and 3 s more, and binds whole
  once the first is deleted.

The nine scenarios run side by side (one namespace, a pool each) in one module fixture; each test reads its result.
The MPI runtimes (deepspeed, mlx: ``runLauncherAsNode``, the launcher ``dependsOn: node, Ready``) are one gang: the
launcher joins its nodes' PodGroup, its place held by a placeholder pod until JobSet makes it (docs/reservation.md),
so their node wave never binds without room for the launcher.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client

from kai_fn.local.chain import TRAINER
from kai_fn.local.runtimes import Run, as_user, delete_volumes, key_of, official, scenario
from tests.chain.conftest import REPORT, Chains, Pool
from tests.chain.gangs import JOBSET, table

# Read off the runtimes by hand, not by kai_fn's code: initializers, GPU pods that must run at once (numNodes 2,
# torchtune 1; MPI's launcher is a node), start waves (kai_fn's PodGroups).
EXPECTED = {
    "torch-distributed": (0, 2, 1),
    "torch-distributed-with-cache": (1, 2, 2),
    "deepspeed-distributed": (0, 2, 1),
    "mlx-distributed": (0, 2, 1),
    "jax-distributed": (0, 2, 1),
    "xgboost-distributed": (0, 2, 1),
    "torchtune-llama3.2-1b": (2, 1, 2),
    "torchtune-llama3.2-3b": (2, 1, 2),
    "torchtune-qwen2.5-1.5b": (2, 1, 2),
}
CONTENDED = list(EXPECTED)


@pytest.fixture(scope="module")
def shipped() -> dict[str, dict]:
    return official()


@pytest.fixture(scope="module")
def runs(chains: Chains, shipped: dict[str, dict]) -> Iterator[dict[str, Run]]:
    chain = chains.use("kai")
    objs = client.CustomObjectsApi(chain.api)
    chain.apply([as_user(rt) for rt in shipped.values()])
    ns = chain.namespace("runtimes")
    pools = {name: Pool(chain, f"rt-{key_of(name)}") for name in shipped}
    began = time.monotonic()
    try:
        with ThreadPoolExecutor(len(shipped)) as workers:
            list(workers.map(lambda p: p.delete(), pools.values()))  # a previous run's leftovers
            done = {name: workers.submit(scenario, chain, rt, ns, pools[name].name, "kai-fn")
                    for name, rt in shipped.items()}
            results = {name: f.result() for name, f in done.items()}
        wall = time.monotonic() - began
        for run in (r for r in results.values() if r.error):
            run.error += f"\n{table(chain, ns)}"
        REPORT.append(f"Trainer's runtimes: {len(results)} scenarios side by side in {wall:.1f} s")
        REPORT.extend(f"  {line}" for line in markdown(results.values()))
        yield results
    finally:
        # The workloads go first, each kind at once (the namespace controller takes about 10 s to come to them): a
        # Job left makes again each pod that the pools' deletion deletes, and KAI binds it again.
        batch, gone = client.BatchV1Api(chain.api), client.V1DeleteOptions(propagation_policy="Background")
        objs.delete_collection_namespaced_custom_object(*TRAINER, ns, "trainjobs", body=gone)
        objs.delete_collection_namespaced_custom_object(*JOBSET, ns, "jobsets", body=gone)
        batch.delete_collection_namespaced_job(ns, body=gone)
        client.CoreV1Api(chain.api).delete_namespace(ns)
        jobs = lambda: batch.list_namespaced_job(ns).items  # noqa: E731
        end = time.monotonic() + 60
        while jobs() and time.monotonic() < end:
            time.sleep(0.5)
        with ThreadPoolExecutor(len(pools)) as workers:
            list(workers.map(lambda p: p.delete(), pools.values()))
        delete_volumes(chain, ns)
        for name in shipped:
            objs.delete_cluster_custom_object(*TRAINER, "clustertrainingruntimes", name)


def markdown(runs) -> list[str]:
    rows = ["| runtime | bound whole | PodGroups | GPU pods bound while waiting | KAI's reason after | then bound whole "
            "| scenario |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        first = f"yes, {r.first.seconds:.1f} s" if r.first and r.first.bound else "no"
        held = f"{r.waiting.held_at_most} of {r.want}" if r.waiting else "-"
        then = f"yes, {r.second.seconds:.1f} s" if r.second and r.second.bound else "no" if r.second else "-"
        said = f"{r.said_s:.1f} s" if r.said_s is not None else "never" if r.waiting else "-"
        rows.append(f"| {r.runtime} | {first} | {len(r.podgroups)} | {held} | {said} | {then} | {r.seconds:.1f} s |")
    return rows


def test_every_official_runtime_is_covered(shipped):
    assert sorted(shipped) == sorted(EXPECTED), "Trainer's module ships other runtimes than this test knows"


@pytest.mark.parametrize("name", EXPECTED)
def test_official_runtime_binds_whole_as_planned(name, runs):
    run = runs[name]
    initializers, gpu_pods, waves = EXPECTED[name]
    assert run.error == "", f"{name}: {run.error}"
    assert run.want == gpu_pods
    assert run.first is not None and run.first.bound, f"{name}: {run.first}"
    assert run.first.pods == gpu_pods
    assert run.first.initializers == "", f"{name}: {run.first.initializers}"
    assert len(run.podgroups) == waves, f"{name}: one PodGroup per start wave: {run.podgroups}"
    assert run.podgroups == run.planned, f"{name}: the PodGroups made are not kai_fn's plan"
    want_claims = {f"initializer-{key_of(name)}-a": "yes"} if initializers == 2 else {}
    assert run.claims == want_claims, f"{name}: the first TrainJob's volume claims, bound by the binder"


@pytest.mark.parametrize("name", CONTENDED)
def test_official_runtime_waits_whole_under_contention(name, runs):
    run = runs[name]
    assert run.error == "", f"{name}: {run.error}"
    assert run.first is not None and run.first.bound, f"{name}: the first never bound: {run.first}"
    assert run.waiting is not None and not run.waiting.bound
    assert run.said_s is not None, f"{name}: KAI never said why the second waits (its PodGroup's conditions)"
    assert run.waiting.held_at_most == 0, \
        f"{name}: {run.waiting.held_at_most} of {run.want} GPU pods of the second bound while it could not all fit"
    assert run.second is not None and run.second.bound, f"{name}: after the first was deleted: {run.second}"
