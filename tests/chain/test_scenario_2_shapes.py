"""Scenario 2, every runtime shape Trainer has, on the real KAI: flat torch, torch with dataset and model initializers
(``dependsOn: Complete``), MPI with its launcher apart and as a node (``dependsOn: node, Ready``), JAX, and a
replicatedJob with ``replicas`` > 1 (kai_fn/local/shapes.py). kai_fn makes one PodGroup per start wave
(kai_fn/core/stages.py), and for each shape:

- a first TrainJob binds whole, its initializers first;
- a second one, on a pool with one node left, never has a trainer pod bound while its gang cannot all fit (its
  initializers may run: they are a gang of their own), and KAI says why on its PodGroup;
- once the first is deleted, the second binds whole.

Then the staleness that KAI v0.17.0 gets wrong: initializers that run longer than KAI's grace period
(the chain's scheduler runs with ``--default-staleness-grace-period`` shortened, testbed/kai) and trainer pods that
finish at different times: no pod is evicted, every one ends Succeeded, none fails. KAI still marks such a gang
stale (annotation and ``StaleJob`` Events) with ``stalenessGracePeriod: -1s``; it only never evicts it.
"""
from __future__ import annotations

import time

import pytest
from kubernetes import client

from kai_fn.local.chain import TRAINER
from kai_fn.local.shapes import (COMPLETE_AFTER, INITIALIZERS, JOBSET_LABEL, SHAPES, Shape, initializer, node,
                                 submit, trainer_pods, watch_fare)
from tests.chain.conftest import REPORT, Pool, wait_for
from tests.chain.gangs import gang_name, kai_reasons, table

DEADLINE_S = 90.0


def podgroups(chain, ns: str) -> list[dict]:
    return client.CustomObjectsApi(chain.api).list_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", ns, "podgroups")["items"]


def main_podgroup(chain, ns: str, trainjob: str) -> dict | None:
    """The TrainJob's main gang, as kai_fn made it."""
    name = gang_name(chain, ns, trainjob)
    return next((pg for pg in podgroups(chain, ns) if pg["metadata"]["name"] == name), None)


def pool_of(spec: str, extra: int) -> str:
    count, gpus = spec.split("x")
    return f"{int(count) + extra}x{gpus}"


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_every_shape_binds_whole_and_a_second_gang_waits_whole(shape: Shape, chain, pool, namespaces):
    nodes = pool(f"sh-{shape.name}"[:24])
    nodes.ensure(pool_of(shape.nodes, 1))  # room for one gang, and one node more
    ns = namespaces(shape.name[:20])
    client.CustomObjectsApi(chain.api).create_namespaced_custom_object(
        *TRAINER, ns, "trainingruntimes", shape.runtime(ns, nodes.name))
    core = client.CoreV1Api(chain.api)
    seen = lambda: table(chain, ns)  # noqa: E731

    first = watch_fare(chain, ns, "first", shape, submit(chain, ns, "first", shape, shape.name), DEADLINE_S)
    assert first.outcome == "bound", f"{shape.name}: {first}\n{seen()}"
    made = {pg["metadata"]["name"] for pg in podgroups(chain, ns)}
    assert len(made) == shape.stages, f"{shape.name}: one PodGroup per start wave, no other (KAI's podgrouper skips): {made}"

    submit(chain, ns, "second", shape, shape.name)
    wait_for("KAI says why the second gang waits",
             lambda: (pg := main_podgroup(chain, ns, "second")) and kai_reasons(pg), deadline_s=DEADLINE_S, explain=seen)
    watched = time.monotonic()
    while time.monotonic() - watched < 3:  # KAI keeps deciding; not one trainer pod may bind meanwhile
        placed = [p.metadata.name for p in trainer_pods(core, ns, "second", shape) if p.spec.node_name]
        assert placed == [], f"{shape.name}: part of a gang that cannot all fit was bound: {placed}\n{seen()}"
        time.sleep(0.3)

    client.CustomObjectsApi(chain.api).delete_namespaced_custom_object(*TRAINER, ns, "trainjobs", "first")
    second = watch_fare(chain, ns, "second", shape, time.monotonic(), DEADLINE_S)
    assert second.outcome == "bound", f"{shape.name}: {second}\n{seen()}"
    REPORT.append(f"shapes ({shape.name}): bound in {first.seconds:.1f} s from creation; the waiting gang "
                  f"{second.seconds:.1f} s after the first was deleted")


def long_stages(grace: int) -> Shape:
    """Initializers that outrun KAI's staleness grace period, the second one done at once (so their gang is below
    its minMember meanwhile), then trainer pods that finish ``grace + 13`` s apart."""
    return Shape("long-stages", (initializer("dataset-initializer", runs_for=f"{grace + 10}s"),
                                 initializer("model-initializer", runs_for="1s"),
                                 node(depends_on=INITIALIZERS, finishes_after=f"2s,{grace + 15}s")),
                 {"numNodes": 1, "torch": {}}, 2, "2x8", stages=2)


def kai_events(core: client.CoreV1Api, ns: str, reason: str) -> list[client.CoreV1Event]:
    return [e for e in core.list_namespaced_event(ns).items if e.reason == reason]


@pytest.mark.parametrize("grace_setting, evicted", [("-1s", False), ("", True)],
                         ids=["kai_fns-grace-never-evicts", "kais-default-evicts-what-should-run"])
def test_long_initializers_and_trainers_finishing_apart(chains, grace_setting, evicted):
    """With kai_fn's ``stalenessGracePeriod: -1s`` nothing is evicted; left to KAI's default, KAI v0.17.0 evicts a
    gang that is merely finishing (the check below can fail, and does, without the setting). Its own function
    settings, so its own namespace and pool of that chain (the ``namespaces`` and ``pool`` fixtures hold the
    default one)."""
    chain = chains.use("kai", KAI_FN_STALENESS_GRACE_PERIOD=grace_setting)
    nodes = Pool(chain, f"stale{len(grace_setting)}")
    nodes.delete()
    ns = chain.namespace("stale")
    try:
        _long_stages_on(chain, nodes, ns, evicted)
    finally:
        client.CoreV1Api(chain.api).delete_namespace(ns)
        nodes.delete()


def _long_stages_on(chain, nodes, ns: str, evicted: bool) -> None:
    grace = chain_grace_seconds(chain)
    shape = long_stages(grace)
    nodes.ensure(shape.nodes)
    client.CustomObjectsApi(chain.api).create_namespaced_custom_object(
        *TRAINER, ns, "trainingruntimes", shape.runtime(ns, nodes.name))
    submit(chain, ns, "tj", shape, shape.name)
    core = client.CoreV1Api(chain.api)
    seen = lambda: table(chain, ns)  # noqa: E731
    if evicted:
        wait_for("KAI evicts the initializers' gang once its grace period is over",
                 lambda: kai_events(core, ns, "Evict"), deadline_s=3 * grace + 30, explain=seen)
        return

    def finished() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(ns, label_selector=f"{JOBSET_LABEL}=tj").items
        return pods if len(pods) == 4 and all(p.status.phase == "Succeeded" for p in pods) else None

    pods = wait_for("every initializer and trainer pod ends Succeeded", finished, deadline_s=4 * grace + 60,
                    explain=seen)
    assert all((p.metadata.annotations or {}).get(COMPLETE_AFTER) for p in pods)
    jobs = client.BatchV1Api(chain.api).list_namespaced_job(ns, label_selector=f"{JOBSET_LABEL}=tj").items
    assert [(j.metadata.name, j.status.failed) for j in jobs if j.status.failed] == [], "a pod failed or was evicted"
    assert [f"{e.involved_object.name}: {e.message}" for e in kai_events(core, ns, "Evict")] == []
    stale = sum(e.count or 1 for e in kai_events(core, ns, "StaleJob"))
    REPORT.append(f"staleness: an initializer ran {grace + 10} s and trainer pods finished {grace + 13} s apart (KAI's "
                  f"grace here {grace} s): 4 pods, each made once, none evicted; KAI still said StaleJob {stale} times")


def chain_grace_seconds(chain) -> int:
    """KAI's default staleness grace period on the chain (testbed/kai/start.sh)."""
    log = (chain.kubeconfig.parent / "kai-scheduler.log").read_text(errors="replace").splitlines()[0]
    for part in log.split():
        if part.startswith("--default-staleness-grace-period="):
            return int(part.split("=", 1)[1].rstrip("s"))
    return 60
