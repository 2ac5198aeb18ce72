"""Segments: the trainer's pods in fixed-size SubGroups, each within one topology domain, asked with KAI's own
annotations (kai_fn/core/segments.py); the PodGroup shaped as KAI's PyTorchJob grouper shapes it."""
from __future__ import annotations

import jsonpatch
import pytest

from kai_fn.core import keys, segments
from kai_fn.core.patch import jobset_patch
from kai_fn.core.plan import plan
from tests import crds
from tests.builders import UID, jobset_for, rjob, runtime, trainjob, typed

PG = f"pg-job-{UID}"
RACK = "topology/rack"
TOPOLOGY = segments.TopologyResource.model_validate({"spec": {"levels": [
    {"nodeLabel": "topology/block", "alias": "block"}, {"nodeLabel": RACK, "alias": "rack"},
    {"nodeLabel": "kubernetes.io/hostname"}]}})


def ask(size="4", required=RACK, preferred=None, topology="racks", **more):
    notes = {keys.KAI_TOPOLOGY: topology, keys.KAI_SEGMENT_SIZE: size, keys.KAI_SEGMENT_REQUIRED: required,
             keys.KAI_SEGMENT_PREFERRED: preferred, **more}
    return {k: v for k, v in notes.items() if v is not None}


def launcher(ancestor="trainer"):
    return {**rjob("launcher", ancestor=ancestor), "dependsOn": [{"name": "node", "status": "Ready"}]}


INITIALIZER = rjob("dataset-initializer", ancestor="dataset-initializer")
TORCH = runtime(rjob(), ml_policy={"numNodes": 1, "torch": {}})
MPI_APART = runtime(rjob(), launcher(), ml_policy={"numNodes": 1, "mpi": {"runLauncherAsNode": False}})
MPI_AS_NODE = runtime(rjob(), launcher(), ml_policy={"numNodes": 1, "mpi": {"runLauncherAsNode": True}})
WITH_INITIALIZER = runtime(INITIALIZER, rjob(depends_on=["dataset-initializer"]), ml_policy={"numNodes": 1, "torch": {}})
TWO_REPLICAS = runtime({**rjob(), "replicas": 2}, ml_policy={"numNodes": 1, "torch": {}})


def with_template_annotations(job, notes):
    pod = job["template"]["spec"]["template"]
    return {**job, "template": {**job["template"], "spec": {**job["template"]["spec"], "template": {
        **pod, "metadata": {"annotations": notes}}}}}


LAUNCHER_ASKS = runtime(rjob(), with_template_annotations(launcher(), ask()),
                        ml_policy={"numNodes": 1, "mpi": {"runLauncherAsNode": False}})


def make(rt=TORCH, num_nodes=8, annotations=None, topologies=None, **kw):
    job = trainjob(num_nodes=num_nodes, annotations=ask() if annotations is None else annotations)
    return plan(*typed(job, rt), topologies={"racks": TOPOLOGY} if topologies is None else topologies, **kw)


def leaves(result):
    return {s["name"]: s.get("minMember") for s in result.podgroup["spec"]["subGroups"] if "parent" in s}


SHAPES = [  # (runtime, numNodes, size) -> (other leaves of the main wave, minMember of each segment)
    pytest.param(TORCH, 8, "4", {}, (4, 4), id="eight-in-fours-divides"),
    pytest.param(TORCH, 10, "4", {}, (4, 4, 2), id="ten-in-fours-last-smaller"),
    pytest.param(TORCH, 8, "8", {}, (8,), id="one-segment-of-all"),
    pytest.param(TORCH, 3, "1", {}, (1, 1, 1), id="segments-of-one"),
    pytest.param(MPI_APART, 8, "4", {"launcher": 1}, (4, 4), id="mpi-launcher-apart-in-a-leaf-of-its-own"),
    pytest.param(MPI_AS_NODE, 9, "4", {"launcher": 1}, (4, 4), id="mpi-launcher-as-node-nodes-one-fewer"),
    pytest.param(WITH_INITIALIZER, 6, "4", {}, (4, 2), id="initializers-stay-in-their-own-wave"),
    pytest.param(TWO_REPLICAS, 3, "4", {}, (4, 2), id="replicas-two-counts-every-pod"),
]


@pytest.mark.parametrize("rt, num_nodes, size, others, minima", SHAPES)
def test_the_main_wave_gets_a_subgroup_per_segment_under_the_trainers_parent(rt, num_nodes, size, others, minima):
    result = make(rt, num_nodes, ask(size=size))
    assert result.problems == () and result.actionable
    spec = result.podgroup["spec"]
    crds.validate(result.podgroup)
    names = tuple(f"node-{i}" for i in range(len(minima)))
    assert spec["subGroups"] == (
        [{"name": name, "minMember": count} for name, count in others.items()]
        + [{"name": "node", "minSubGroup": len(minima)}]
        + [{"name": n, "parent": "node", "minMember": m, "topologyConstraint": {"topology": "racks",
                                                                                 "requiredTopologyLevel": RACK}}
           for n, m in zip(names, minima)])
    assert spec["minMember"] == sum(minima) + sum(others.values())  # as KAI's grouper: the whole wave, for people
    assert "subGroups" not in str(result.stage_podgroups)  # an initializer's wave stays flat
    assert result.segments is not None and result.segments.minima == minima


def test_the_segmented_template_carries_what_the_pod_policy_reads_and_other_leaves_their_subgroup():
    result = make(MPI_APART, 8)
    templates = {t.replicated_job: t for t in result.pod_templates}
    assert templates["node"].labels == {keys.KAI_QUEUE_LABEL: "rt-queue", keys.SEGMENT_SIZE_LABEL: "4"}
    assert templates["node"].annotations == {keys.KAI_POD_GROUP_ANNOTATION: PG, keys.KAI_SKIP_PODGROUPER: "true",
                                             keys.SEGMENT_PARENT_ANNOTATION: "node", keys.SEGMENT_JOB_PODS_ANNOTATION: "8"}
    assert templates["launcher"].labels == {keys.KAI_QUEUE_LABEL: "rt-queue", keys.KAI_SUBGROUP_LABEL: "launcher"}
    (placeholder,) = result.placeholders
    assert placeholder["metadata"]["labels"][keys.KAI_SUBGROUP_LABEL] == "launcher"


def test_without_segments_nothing_names_a_subgroup():
    result = make(MPI_APART, 8, annotations={})
    assert "subGroups" not in result.podgroup["spec"] and result.segments is None
    assert all(keys.KAI_SUBGROUP_LABEL not in t.labels and keys.SEGMENT_SIZE_LABEL not in t.labels
               for t in result.pod_templates)
    assert keys.KAI_SUBGROUP_LABEL not in result.placeholders[0]["metadata"]["labels"]


def test_the_jobset_patch_writes_the_segment_keys_on_the_trainers_pod_template():
    job, rt = trainjob(num_nodes=8, annotations=ask()), TORCH
    result = plan(*typed(job, rt), topologies={"racks": TOPOLOGY})
    jobset = jobset_for(job, rt)
    patched = jsonpatch.apply_patch(jobset, jobset_patch(result, jobset, {keys.MARKER_PODGROUP: PG}))
    meta = patched["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
    assert meta["labels"][keys.SEGMENT_SIZE_LABEL] == "4"
    assert meta["annotations"][keys.SEGMENT_PARENT_ANNOTATION] == "node"
    assert meta["annotations"][keys.SEGMENT_JOB_PODS_ANNOTATION] == "8"


INDEXES = [  # (numNodes, replicas, size, completion index, job index) -> SubGroup
    (8, 1, 4, 0, 0, "node-0"), (8, 1, 4, 3, 0, "node-0"), (8, 1, 4, 4, 0, "node-1"), (10, 1, 4, 9, 0, "node-2"),
    (3, 2, 4, 0, 1, "node-0"), (3, 2, 4, 1, 1, "node-1"), (3, 2, 4, 2, 1, "node-1"), (4, 2, 4, 3, 1, "node-1"),
]


@pytest.mark.parametrize("num_nodes, replicas, size, completion, job_index, subgroup", INDEXES)
def test_a_pods_segment_follows_its_completion_index_and_its_jobs_index(num_nodes, replicas, size, completion,
                                                                          job_index, subgroup):
    rt = runtime({**rjob(), "replicas": replicas}, ml_policy={"numNodes": 1, "torch": {}})
    segs = make(rt, num_nodes, ask(size=str(size))).segments
    assert segs is not None and segs.of(completion, job_index) == subgroup
    assert subgroup in segs.names


def test_the_trainers_pod_template_wins_over_the_trainjob_and_runtime_patches_count():
    patch = {"manager": "me", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"metadata": {"annotations": ask(size="2")}}}}}]}}}}
    job = trainjob(num_nodes=8, annotations=ask(size="4", required="block"), runtimePatches=[patch])
    segs = plan(*typed(job, TORCH), topologies={"racks": TOPOLOGY}).segments
    assert segs is not None and (segs.size, segs.required_level) == (2, RACK)


def test_whole_gang_and_segment_constraints_make_two_levels():
    result = make(annotations=ask(**{keys.KAI_TOPOLOGY_REQUIRED: "block"}))
    assert result.podgroup["spec"]["topologyConstraint"] == {"topology": "racks", "requiredTopologyLevel": "block"}
    assert leaves(result) == {"node-0": 4, "node-1": 4}


def test_a_topology_named_for_segments_alone_puts_no_levelless_constraint_at_the_root():
    """KAI never places a gang whose constraint names a Topology and no level (seen on the chain: scenario 10)."""
    assert "topologyConstraint" not in make().podgroup["spec"]


def test_preferred_level_alone_is_a_segment_constraint():
    segs = make(annotations=ask(required=None, preferred="rack")).segments
    assert segs is not None and segs.constraint == {"topology": "racks", "preferredTopologyLevel": "rack"}


def test_the_summary_names_segments_sizes_and_level():
    segs = make(num_nodes=10).segments
    assert segs is not None
    assert segs.summary() == f"node: 3 segments of 4, 4, 2 pods, each within {RACK} (required) of Topology racks"


SIZE = f"TrainJob metadata.annotations[{keys.KAI_SEGMENT_SIZE}]"
PROBLEMS = [  # (runtime, TrainJob annotations, topologies, plan kwargs) -> (field, words of the message)
    pytest.param(TORCH, ask(size="four"), None, {}, SIZE, "'four' is not a positive integer", id="not-a-number"),
    pytest.param(TORCH, ask(size="0"), None, {}, SIZE, "not a positive integer", id="zero"),
    pytest.param(TORCH, ask(size="-2"), None, {}, SIZE, "not a positive integer", id="negative"),
    pytest.param(TORCH, ask(size="2.5"), None, {}, SIZE, "not a positive integer", id="fraction"),
    pytest.param(TORCH, ask(size="9"), None, {}, SIZE, "larger than the 8 pods of replicatedJob 'node'",
                 id="larger-than-the-nodes"),
    pytest.param(TORCH, ask(topology=None), None, {}, f"TrainJob metadata.annotations[{keys.KAI_TOPOLOGY}]",
                 "must name the Topology", id="no-topology"),
    pytest.param(TORCH, ask(required=None), None, {}, SIZE, keys.KAI_SEGMENT_REQUIRED, id="no-level"),
    pytest.param(TORCH, {keys.KAI_SEGMENT_REQUIRED: RACK}, None, {},
                 f"TrainJob metadata.annotations[{keys.KAI_SEGMENT_REQUIRED}]", "needs kai.scheduler/segment-size",
                 id="level-without-size"),
    pytest.param(TORCH, ask(required="row"), None, {}, f"TrainJob metadata.annotations[{keys.KAI_SEGMENT_REQUIRED}]",
                 "Topology 'racks' has no level 'row'", id="level-the-topology-lacks"),
    pytest.param(TORCH, ask(**{keys.KAI_TOPOLOGY_REQUIRED: "zone"}), None, {},
                 f"TrainJob metadata.annotations[{keys.KAI_TOPOLOGY_REQUIRED}]", "has no level 'zone'",
                 id="whole-gang-level-the-topology-lacks"),
    pytest.param(TORCH, ask(), {"racks": None}, {}, f"TrainJob metadata.annotations[{keys.KAI_TOPOLOGY}]",
                 "Topology 'racks' (kai.scheduler/v1alpha1) does not exist", id="topology-missing"),
    pytest.param(TORCH, ask(), None, {"flavor": "scheduler-plugins"}, SIZE, "Coscheduling's PodGroup has none",
                 id="scheduler-plugins-cannot"),
    pytest.param(runtime(rjob("worker", ancestor=None)), ask(size="1"), None, {}, SIZE,
                 "has no trainer replicatedJob", id="runtime-without-a-trainer"),
    pytest.param(runtime({**rjob(), "template": {**rjob()["template"], "spec": {
        **rjob()["template"]["spec"], "completionMode": "NonIndexed"}}}, ml_policy={"numNodes": 1, "torch": {}}),
        ask(), None, {}, "ClusterTrainingRuntime rt replicatedJob 'node' spec.completionMode", "no completion index",
        id="non-indexed-jobs"),
    pytest.param(runtime(rjob(), {**rjob("node-1", ancestor=None), "dependsOn": [{"name": "node", "status": "Ready"}]},
                         ml_policy={"numNodes": 1, "torch": {}}), ask(), None, {}, "replicatedJob 'node-1'",
                 "has the name of a segment of 'node'", id="a-replicated-job-named-like-a-segment"),
    pytest.param(LAUNCHER_ASKS,
                 {}, None, {}, f"replicatedJob 'launcher' pod template metadata.annotations[{keys.KAI_SEGMENT_SIZE}]",
                 "the trainer's replicatedJob (node) only", id="segments-asked-on-the-launcher"),
]


@pytest.mark.parametrize("rt, annotations, topologies, kw, field, words", PROBLEMS)
def test_a_bad_request_blocks_the_plan_naming_the_field(rt, annotations, topologies, kw, field, words):
    result = make(rt, 8, annotations, topologies, **kw)
    assert result.blocked and result.podgroup is None and not result.pod_templates and not result.placeholders
    assert any(p.field == field and words in p.message for p in result.problems), result.problems


def test_a_whole_gang_topology_without_a_level_blocks_when_there_are_no_segments():
    result = make(annotations={keys.KAI_TOPOLOGY: "racks"})
    assert result.blocked
    (problem,) = result.problems
    assert problem.field == f"TrainJob metadata.annotations[{keys.KAI_TOPOLOGY}]" and "no level" in problem.message


def test_an_alias_names_a_level_as_well_as_its_node_label():
    assert make(annotations=ask(required="rack", **{keys.KAI_TOPOLOGY_REQUIRED: "block"})).problems == ()


def test_levels_go_unchecked_where_the_topology_was_not_read():
    """``plan`` offline, or a shell that read no Topology: KAI has the last word on the levels."""
    assert make(annotations=ask(required="row"), topologies={}).problems == ()


def test_topologies_asked_are_those_of_the_trainjob_and_the_pod_templates():
    rt = runtime(rjob(), with_template_annotations(launcher(), {keys.KAI_TOPOLOGY: "nvl"}))
    assert segments.topologies_asked(*typed(trainjob(annotations=ask()), rt)) == ("racks", "nvl")
    assert segments.topologies_asked(*typed(trainjob(), TORCH)) == ()


def test_a_topology_read_is_none_when_absent_and_levelless_when_unreadable():
    assert segments.topology_resource(None) is None
    assert segments.topology_resource({"spec": {"levels": "rack"}}).level_names == ()
    assert TOPOLOGY.level_names == ("topology/block", "block", RACK, "rack", "kubernetes.io/hostname")
