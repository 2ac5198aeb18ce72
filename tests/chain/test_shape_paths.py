"""Which shapes take which path, measured on the real chain (issue 37, item 4): one TrainJob of every shape, side by
side in one namespace, each on a simnodes pool of its own — Trainer v2.3.0's nine runtimes as shipped (the scenario
of test_trainer_runtimes.py without its contention), the chain's synthetic shapes (kai_fn/local/shapes.py, MPI's
launcher apart and as a node: its place reserved by a placeholder), and a gang in segments asked on the runtime's
trainer pod template and on the TrainJob's own annotations. A pod and a JobSet watch, started before the first
TrainJob, and the audit log when the testbed keeps one (tests/chain/paths.py) record, for each:

- its JobSet never suspended and never labelled ``kai-fn/held`` (no user here suspends one);
- its JobSet named at its create (``kai-fn/named`` on its first version), and every pod naming its PodGroup in its
  first version;
- no pod bound before its PodGroup existed;
- kai_fn's writes of its JobSet: none;
- the PodGroups kai_fn made: exactly those admission named, or none, with the Warning that says why.

``EXPECTED`` is docs/how-it-decides.md's table ("Which shapes take which path", held to it by
tests/deploy/test_docs_agree.py); the figures of that table are this module's, printed in the terminal summary.
"""
from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client

from kai_fn.core import keys
from kai_fn.local.chain import TRAINER, Chain
from kai_fn.local.podwatch import PodWatch
from kai_fn.local.runtimes import as_user, delete_volumes, key_of, official, scenario
from kai_fn.local.shapes import SHAPES, submit, trainer_pods, watch_fare
from tests.chain.conftest import REPORT, Chains, Pool
from tests.chain.gangs import JOBSET, pods, trainjob_warnings
from tests.chain.paths import JobSetWatch, Path_, audit_log, path_of, writes_in
from tests.chain.test_scenario_10_segments import BLOCK, HOST, RACK, TOPOLOGY_API, asking, racks

# Each shape's path: "named" (admission names its gang at the JobSet's create, kai_fn makes the PodGroups, it binds
# whole), or "refused" (named, but kai_fn makes no PodGroup: its pods wait unbound, a Warning says why).
EXPECTED = {
    "torch-distributed": "named",
    "torch-distributed-with-cache": "named",
    "deepspeed-distributed": "named",
    "mlx-distributed": "named",
    "jax-distributed": "named",
    "xgboost-distributed": "named",
    "torchtune-llama3.2-1b": "named",
    "torchtune-llama3.2-3b": "named",
    "torchtune-qwen2.5-1.5b": "named",
    "flat-torch": "named",
    "torch-initializers": "named",
    "mpi-launcher-apart": "named",
    "mpi-launcher-as-node": "named",
    "jax": "named",
    "replicas": "named",
    "segments-on-the-runtime": "named",
    "segments-on-the-trainjob": "refused",
}
DEADLINE_S = 120.0
SEGMENTED = dataclasses.replace(SHAPES[0], name="segments-on-the-runtime", num_nodes=4, nodes="4x8", trainer_pods=4)


def segments_of(topology: str) -> dict[str, str]:
    """Segments of 2 pods each within a rack: the 4 nodes of a pool are one rack."""
    return asking(topology, **{keys.KAI_SEGMENT_SIZE: "2"})


@pytest.fixture(scope="module")
def shipped() -> dict[str, dict]:
    return official()


@pytest.fixture(scope="module")
def paths(chains: Chains, shipped: dict[str, dict]) -> Iterator[dict[str, tuple[Path_, bool]]]:
    chain = chains.use("kai")
    objs = client.CustomObjectsApi(chain.api)
    chain.apply([as_user(rt) for rt in shipped.values()])
    topology = f"paths-{uuid.uuid4().hex[:6]}"
    objs.create_cluster_custom_object(*TOPOLOGY_API, {
        "apiVersion": keys.KAI_TOPOLOGY_API, "kind": keys.TOPOLOGY_KIND, "metadata": {"name": topology},
        "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK, "alias": "rack"}, {"nodeLabel": HOST}]}})
    ns = chain.namespace("paths")
    pools = [Pool(chain, f"pa-{key_of(name)}") for name in shipped] + [
        Pool(chain, f"ps-{name}"[:24]) for name in EXPECTED if name not in shipped]
    log = audit_log()
    offset = log.stat().st_size if log else 0
    runs: dict[str, Callable[[], tuple[str, bool]]] = {
        **{name: lambda rt=rt: official_run(chain, rt, ns) for name, rt in shipped.items()},
        **{shape.name: lambda shape=shape: shape_run(chain, ns, shape) for shape in SHAPES},
        SEGMENTED.name: lambda: segmented_run(chain, ns, topology),
        "segments-on-the-trainjob": lambda: refused_run(chain, ns, topology)}
    try:
        with PodWatch(chain.api, ns, check_groups=True) as watch, JobSetWatch(chain.api, ns) as jobsets:
            with ThreadPoolExecutor(len(runs)) as workers:
                list(workers.map(lambda p: p.delete(), pools))  # a previous run's leftovers
                done = {name: workers.submit(run) for name, run in runs.items()}
                ran = {name: f.result() for name, f in done.items()}
            time.sleep(2)  # writes that trail the binding land in the audit log
            found = writes_in(log, offset, ns) if log else None
            result = {name: (path_of(chain.api, ns, trainjob, jobsets, watch, found), bound)
                      for name, (trainjob, bound) in ran.items()}
        REPORT.append(f"paths ({'audit log' if log else 'no audit log: managedFields and the pod watch'}; watch "
                      f"errors: pods {watch.errors}, JobSets {jobsets.errors}):")
        REPORT.extend(f"  {line}" for line in table(result))
        REPORT.extend(f"  {name}: {trainjob_warnings(chain, ns, trainjob, 'JobSetMismatch')}"
                      for name, (trainjob, _) in ran.items() if EXPECTED[name] == "refused")
        yield result
    finally:
        gone = client.V1DeleteOptions(propagation_policy="Background")
        objs.delete_collection_namespaced_custom_object(*TRAINER, ns, "trainjobs", body=gone)
        objs.delete_collection_namespaced_custom_object(*JOBSET, ns, "jobsets", body=gone)
        client.BatchV1Api(chain.api).delete_collection_namespaced_job(ns, body=gone)
        client.CoreV1Api(chain.api).delete_namespace(ns)
        with ThreadPoolExecutor(len(pools)) as workers:
            list(workers.map(lambda p: p.delete(), pools))
        delete_volumes(chain, ns)
        objs.delete_cluster_custom_object(*TOPOLOGY_API, topology)
        for name in shipped:
            objs.delete_cluster_custom_object(*TRAINER, "clustertrainingruntimes", name)


def official_run(chain: Chain, rt: dict, ns: str) -> tuple[str, bool]:
    run = scenario(chain, rt, ns, f"pa-{key_of(rt['metadata']['name'])}", "kai-fn", contention=False,
                   deadline_s=DEADLINE_S)
    return f"{key_of(run.runtime)}-a", bool(run.first and run.first.bound)


def shape_run(chain: Chain, ns: str, shape, runtime: dict | None = None) -> tuple[str, bool]:
    nodes = Pool(chain, f"ps-{shape.name}"[:24])
    nodes.ensure(shape.nodes)
    client.CustomObjectsApi(chain.api).create_namespaced_custom_object(
        *TRAINER, ns, "trainingruntimes", runtime or shape.runtime(ns, nodes.name))
    fare = watch_fare(chain, ns, shape.name, shape, submit(chain, ns, shape.name, shape, shape.name), DEADLINE_S)
    return shape.name, fare.outcome == "bound"


def segmented_run(chain: Chain, ns: str, topology: str) -> tuple[str, bool]:
    """Segments asked on the runtime's trainer pod template, which Trainer copies onto the JobSet."""
    pool = f"ps-{SEGMENTED.name}"[:24]
    Pool(chain, pool).ensure(SEGMENTED.nodes)
    racks(chain, pool, [1])
    rt = SEGMENTED.runtime(ns, pool)
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {
        "annotations": segments_of(topology)}
    return shape_run(chain, ns, SEGMENTED, rt)


def refused_run(chain: Chain, ns: str, topology: str) -> tuple[str, bool]:
    """Segments asked on the TrainJob's own annotations, which Trainer does not copy onto the JobSet: the pods wait
    (checked for 3 s once kai_fn has said why) on nodes that would take them."""
    name = "segments-on-the-trainjob"
    shape = dataclasses.replace(SEGMENTED, name=name)
    pool = f"ps-{name}"[:24]
    Pool(chain, pool).ensure(shape.nodes)
    racks(chain, pool, [1])
    client.CustomObjectsApi(chain.api).create_namespaced_custom_object(
        *TRAINER, ns, "trainingruntimes", shape.runtime(ns, pool, name="segments-on-the-trainjob"))
    chain.trainjob(ns, name, name, num_nodes=4, annotations=segments_of(topology))
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end and not (len(pods(chain, ns, name)) == 4
                                          and trainjob_warnings(chain, ns, name, "JobSetMismatch")):
        time.sleep(0.5)
    time.sleep(3)
    core = client.CoreV1Api(chain.api)
    return name, bool(trainer_pods(core, ns, name, shape)) and all(p.spec.node_name for p in
                                                                    trainer_pods(core, ns, name, shape))


def table(result: dict[str, tuple[Path_, bool]]) -> list[str]:
    rows = ["| shape | path | JobSet suspended or held | pods naming their PodGroup at creation | bound before their "
            "PodGroup | PodGroup before the first pod | kai_fn's JobSet writes | admission wrote | the function made |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, (p, bound) in result.items():
        took = ("named, bound whole" if bound else "named, not bound") if p.made else "named, no PodGroup"
        first = "–" if p.podgroup_first is None else "yes" if p.podgroup_first else "no"
        rows.append(f"| {name} | {took} | {'yes' if p.suspended or p.held else 'no'} | "
                    f"{p.pods - len(p.unnamed)} of {p.pods} | {len(p.bound_early)} of {p.bound_pods} | {first} | "
                    f"{p.jobset_writes} | {p.admission_wrote()} | {p.function_made()} |")
    return rows


def test_every_shape_the_chain_knows_is_measured(shipped):
    """Trainer's runtimes as its module ships them, every synthetic shape, and the two ways to ask for segments."""
    assert sorted([*shipped, *(s.name for s in SHAPES), SEGMENTED.name, "segments-on-the-trainjob"]) == sorted(EXPECTED)


@pytest.mark.parametrize("name", EXPECTED)
def test_every_shape_takes_its_path_with_no_hold_and_no_jobset_write(name, paths):
    path, bound = paths[name]
    assert path.jobset, f"{name}: Trainer made no JobSet"
    assert (path.suspended, path.held) == (False, False), f"{name}: its JobSet was suspended or held"
    assert path.named_at_create, f"{name}: its JobSet was not named at its create"
    assert path.pods > 0 and path.unnamed == [], f"{name}: pods that named no PodGroup when made: {path.unnamed}"
    assert path.bound_early == [], f"{name}: bound before their PodGroup existed: {path.bound_early}"
    assert path.audited_bindings in (None, path.bound_pods), \
        f"{name}: {path.bound_pods} pods bound, {path.audited_bindings} bindings in the audit log"
    assert path.jobset_writes == 0, f"{name}: kai_fn wrote its JobSet {path.jobset_writes} times"
    if EXPECTED[name] == "named":
        assert path.made == path.named, f"{name}: made {path.made}, admission named {path.named}"
        assert bound, f"{name}: not bound whole"
    else:
        assert (path.made, bound) == (set(), False), f"{name}: made {path.made}, bound {bound}"
        assert "JobSetMismatch" in path.warnings, f"{name}: {path.warnings}"
