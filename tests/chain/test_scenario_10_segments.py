"""Scenario 10, segments on KAI's own topology code: kwok nodes labelled block / rack / host, a KAI Topology of those
three levels, TrainJobs of 8 pods (one 8-GPU node each) asking for segments of 4 within a rack (docs/topology.md).
Each pod's rack is read from its node.

- fragmented: every rack has 3 free nodes (a pod bound to the fourth by name holds it): the gang in segments waits
  whole, no pod bound, KAI's reason on the TrainJob; the same TrainJob without segments binds across racks meanwhile
  (the control); once two racks free, the first binds, each segment within one rack;
- multi-level: the whole gang within one block, each segment within one rack: it binds in the one block that has
  two free racks, though a free rack in the other block would have taken a segment;
- KAI's podgrouper, the same TrainJob in a namespace kai_fn does not take: its PodGroup has no segments (KAI wires
  them for PyTorchJob and LeaderWorkerSet only) and a Topology with no level at its root, and the gang never binds."""
from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from kai_fn.core import keys
from kai_fn.local.chain import TRAINER, Chain
from tests.chain.conftest import REPORT, wait_for
from tests.chain.gangs import bound, pods, table, trainjob_warnings

BLOCK, RACK, HOST = "topology.kai-fn.testbed/block", "topology.kai-fn.testbed/rack", "kubernetes.io/hostname"
TOPOLOGY_API = ("kai.scheduler", "v1alpha1", "topologies")
GPU_NODE = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "8"}


@pytest.fixture
def topology(chain: Chain) -> Iterator[str]:
    name = f"seg-{uuid.uuid4().hex[:6]}"
    objs = client.CustomObjectsApi(chain.api)
    objs.create_cluster_custom_object(*TOPOLOGY_API, {
        "apiVersion": keys.KAI_TOPOLOGY_API, "kind": keys.TOPOLOGY_KIND, "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": BLOCK, "alias": "block"}, {"nodeLabel": RACK, "alias": "rack"},
                            {"nodeLabel": HOST}]}})
    yield name
    objs.delete_cluster_custom_object(*TOPOLOGY_API, name)


def racks(chain: Chain, pool: str, blocks: list[int]) -> list[list[str]]:
    """Labels the pool's nodes 4 to a rack, ``blocks[b]`` racks in block ``b``; returns each rack's nodes."""
    core = client.CoreV1Api(chain.api)
    out: list[list[str]] = []
    n = 0
    for b, count in enumerate(blocks):
        for _ in range(count):
            rack = f"{pool}-r{len(out)}"
            nodes = [f"{pool}-{n + i}" for i in range(4)]
            for node in nodes:
                core.patch_node(node, {"metadata": {"labels": {BLOCK: f"{pool}-b{b}", RACK: rack, HOST: node}}})
            out.append(nodes)
            n += 4
    return out


def hold(chain: Chain, ns: str, node: str) -> None:
    """A pod bound to ``node`` by name, holding its 8 GPUs (kwok runs it; KAI counts it)."""
    client.CoreV1Api(chain.api).create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"hold-{node}"},
        "spec": {"nodeName": node, "containers": [{"name": "hold", "image": "testbed/none", "resources": {
            "requests": GPU_NODE, "limits": {"nvidia.com/gpu": "8"}}}]}})


def release(chain: Chain, ns: str, node: str) -> None:
    client.CoreV1Api(chain.api).delete_namespaced_pod(f"hold-{node}", ns, grace_period_seconds=0)
    wait_for(f"hold-{node} gone", lambda: not [p for p in client.CoreV1Api(chain.api).list_namespaced_pod(ns).items
                                               if p.metadata.name == f"hold-{node}"])


def placed(chain: Chain, ns: str, name: str) -> dict[int, dict[str, str]] | None:
    """Completion index -> the labels of its pod's node, once every pod of the 8 is bound."""
    ps = pods(chain, ns, name)
    if len(ps) != 8 or len(bound(ps)) != 8:
        return None
    core = client.CoreV1Api(chain.api)
    return {int(p.metadata.labels[keys.JOB_COMPLETION_INDEX_LABEL]): core.read_node(p.spec.node_name).metadata.labels
            for p in ps}


def segment_racks(where: dict[int, dict[str, str]]) -> list[set[str]]:
    """The racks of each segment of 4 (indexes 0-3, 4-7)."""
    return [{where[i][RACK] for i in range(s, s + 4)} for s in (0, 4)]


def asking(topology: str, **more: str) -> dict[str, str]:
    return {keys.KAI_TOPOLOGY: topology, keys.KAI_SEGMENT_SIZE: "4", keys.KAI_SEGMENT_REQUIRED: "rack", **more}


def test_fragmented_the_gang_waits_whole_the_control_binds_across_racks_then_segments_bind_in_racks(
        chain, pool, namespaces, topology):
    nodes = pool("seg-frag")
    nodes.ensure("12x8")
    rack_nodes = racks(chain, nodes.name, [3])
    ns = namespaces("seg-frag")
    chain.runtime(ns, pool=nodes.name)
    for rack in rack_nodes:
        hold(chain, ns, rack[3])
    seen = lambda: table(chain, ns)  # noqa: E731

    chain.trainjob(ns, "segmented", num_nodes=8, node_annotations=asking(topology))
    warned = wait_for("KAI's reason on the TrainJob", lambda: trainjob_warnings(chain, ns, "segmented",
                                                                                 "GangUnschedulable"), explain=seen)
    assert len(pods(chain, ns, "segmented")) == 8 and bound(pods(chain, ns, "segmented")) == []

    chain.trainjob(ns, "control", num_nodes=8)
    control = wait_for("the control binds whole", lambda: placed(chain, ns, "control"), explain=seen)
    assert {labels[RACK] for labels in control.values()} == {f"{nodes.name}-r{i}" for i in range(3)}
    assert max(len(r) for r in segment_racks(control)) > 1, "without segments, some group of 4 spans racks"
    assert bound(pods(chain, ns, "segmented")) == [], "the segmented gang held no node while the control bound"

    client.CustomObjectsApi(chain.api).delete_namespaced_custom_object(*TRAINER, ns, "trainjobs", "control",
                                                                       propagation_policy="Foreground")
    wait_for("the control's pods gone", lambda: not pods(chain, ns, "control"), explain=seen)
    assert bound(pods(chain, ns, "segmented")) == [], "three free nodes a rack still fit no segment"
    for rack in rack_nodes[:2]:
        release(chain, ns, rack[3])
    where = wait_for("the segmented gang binds once two racks free", lambda: placed(chain, ns, "segmented"),
                     explain=seen)
    assert [len(r) for r in segment_racks(where)] == [1, 1]
    REPORT.append(f"segments, fragmented: waited whole with KAI's reason ({warned[0][:100]}...), bound one segment "
                  f"per rack {sorted(r.pop() for r in segment_racks(where))} once two racks freed; the control bound "
                  f"across {len({labels[RACK] for labels in control.values()})} racks")


def test_the_whole_gang_within_one_block_and_each_segment_within_one_rack(chain, pool, namespaces, topology):
    nodes = pool("seg-block")
    nodes.ensure("16x8")
    rack_nodes = racks(chain, nodes.name, [2, 2])
    ns = namespaces("seg-block")
    chain.runtime(ns, pool=nodes.name)
    hold(chain, ns, rack_nodes[1][3])  # block 0: one free rack and one of 3 nodes; block 1: two free racks
    seen = lambda: table(chain, ns)  # noqa: E731

    chain.trainjob(ns, "multilevel", num_nodes=8, annotations={keys.KAI_TOPOLOGY: topology,
                                                               keys.KAI_TOPOLOGY_REQUIRED: "block"},
                   node_annotations=asking(topology))
    where = wait_for("the gang binds", lambda: placed(chain, ns, "multilevel"), explain=seen)
    assert {labels[BLOCK] for labels in where.values()} == {f"{nodes.name}-b1"}
    assert [len(r) for r in segment_racks(where)] == [1, 1]
    REPORT.append(f"segments, multi-level: the gang in block {nodes.name}-b1, segments in racks "
                  f"{sorted(r.pop() for r in segment_racks(where))}")


def test_kais_podgrouper_makes_no_segments_for_a_trainjob_and_never_places_it(chain, pool, namespaces, topology):
    """KAI's podgrouper on the same TrainJob: one SubGroup for the trainer's replica, no segment, and at the root the
    Topology with no level (its default grouper takes ``kai.scheduler/topology`` from the TrainJob, its top owner),
    which KAI's scheduler never places: the gang waits on free nodes (kai_fn refuses to write such a constraint)."""
    nodes = pool("seg-pgr")
    nodes.ensure("8x8")
    racks(chain, nodes.name, [2])
    ns = namespaces("seg-pgr", enabled=False)
    chain.runtime(ns, pool=nodes.name)
    seen = lambda: table(chain, ns)  # noqa: E731
    objs = client.CustomObjectsApi(chain.api)

    chain.trainjob(ns, "podgrouper", num_nodes=8, annotations=asking(topology))
    group = wait_for("KAI says why the podgrouper's gang waits", lambda: next(
        (g for g in objs.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", ns, "podgroups")["items"]
         if kai_says(g)), None), explain=seen)
    assert len(pods(chain, ns, "podgrouper")) == 8 and bound(pods(chain, ns, "podgrouper")) == []
    names = [s["name"] for s in group["spec"].get("subGroups") or []]
    assert names == ["node", "node-replica-0"]
    assert group["spec"]["topologyConstraint"] == {"topology": topology}
    REPORT.append(f"segments, KAI's podgrouper: subGroups {names}, root constraint {group['spec']['topologyConstraint']}"
                  f"; 0 of 8 bound on 8 free nodes, KAI: {kai_says(group)}")


def kai_says(group: dict) -> str:
    return "; ".join(c.get("message", "") for c in (group.get("status") or {}).get("schedulingConditions") or [])
