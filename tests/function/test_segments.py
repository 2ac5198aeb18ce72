"""Segments through the function: the Topology a TrainJob names is read before its gang is made; a gang in segments
gets its SubGroups and its trainer's template what the pod policy reads; a request KAI could never place, or a
runtime that cannot have segments, gets a Warning naming the field and its JobSet stays held, nothing else written.
``explain`` and ``status`` then show the segments of the PodGroup."""
from __future__ import annotations

import json

import pytest

from kai_fn.commands import cli
from kai_fn.core import keys
from tests.ce import resource, send
from tests.conftest import JOBSET, KAI_PG, sample_object, seed
from tests.function.test_function import NAME, NS, PG, assert_still_held, events_of, llama_jobset, seed_llama
from tests.function.test_gang_status import place

pytestmark = pytest.mark.usefixtures("forgetful")

SEGMENTS = {keys.KAI_TOPOLOGY: "racks", keys.KAI_SEGMENT_SIZE: "2", keys.KAI_SEGMENT_REQUIRED: "rack"}


def topology(*levels: str) -> dict:
    return {"apiVersion": keys.KAI_TOPOLOGY_API, "kind": "Topology", "metadata": {"name": "racks"},
            "spec": {"levels": [{"nodeLabel": level} for level in levels]}}


def submit(api, url, notes=SEGMENTS, *objects) -> int:
    seed(api, sample_object("queue-default-parent"), *objects)
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"]["annotations"] = dict(notes)
    return send(url, resource(seed_llama(api, trainjob=tj))).status


def test_a_gang_in_segments_gets_its_subgroups_and_the_trainers_template_the_segment_keys(api, function):
    assert submit(api, function.url, SEGMENTS, topology("block", "rack")) == 200
    pg = api.get(KAI_PG, "PodGroup", NS, PG)
    assert [(s["name"], s.get("minMember"), s.get("minSubGroup")) for s in pg["spec"]["subGroups"]] == [
        ("node", None, 2), ("node-0", 2, None), ("node-1", 2, None)]
    js = api.get(JOBSET, "JobSet", NS, NAME)
    meta = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
    assert meta["labels"][keys.SEGMENT_SIZE_LABEL] == "2" and js["spec"]["suspend"] is False
    assert meta["annotations"][keys.SEGMENT_PARENT_ANNOTATION] == "node"
    (created,) = events_of(api, "GangCreated")
    assert "in segments (node: 2 segments of 2, 2 pods, each within rack (required) of Topology racks)" in \
        created["message"]


REFUSED = [  # (TrainJob annotations, the Topologies there are, settings) -> words of the Warning
    pytest.param(SEGMENTS, [topology("block", "host")], {},
                 f"TrainJob metadata.annotations[{keys.KAI_SEGMENT_REQUIRED}]: Topology 'racks' has no level 'rack'",
                 id="level-the-topology-lacks"),
    pytest.param(SEGMENTS, [], {}, "Topology 'racks' (kai.scheduler/v1alpha1) does not exist", id="no-such-topology"),
    pytest.param({**SEGMENTS, keys.KAI_SEGMENT_SIZE: "5"}, [topology("rack")], {},
                 "5 is larger than the 4 pods of replicatedJob 'node'", id="larger-than-the-nodes"),
    pytest.param({**SEGMENTS, keys.KAI_SEGMENT_SIZE: "two"}, [topology("rack")], {}, "'two' is not a positive integer",
                 id="not-a-number"),
    pytest.param(SEGMENTS, [topology("rack")], {"KAI_PODGROUP_FLAVOR": "scheduler-plugins"},
                 "segments are KAI SubGroups; Coscheduling's PodGroup has none", id="runtime-that-cannot-have-them"),
]


@pytest.mark.parametrize("notes, topologies, settings, words", REFUSED)
def test_a_request_kai_could_never_place_warns_and_keeps_the_jobset_held(api, functions, notes, topologies, settings,
                                                                         words):
    fn = functions(**settings)
    assert submit(api, fn.url, notes, *topologies) == 200
    assert [c.resource for c in api.writes()] == ["events"]
    (warning,) = events_of(api, "PlanBlocked")
    assert words in warning["message"]
    assert_still_held(llama_jobset(api))


def test_explain_and_status_show_the_segments_of_the_podgroup(api, function, capsys):
    assert submit(api, function.url, SEGMENTS, topology("rack")) == 200
    place(api, 2, 2, subgroup="node-0")
    code = cli.main(["explain", f"{NS}/{NAME}", "--kubeconfig", api.kubeconfig, "-o", "json"])
    kai = json.loads(capsys.readouterr().out)["kai"]
    assert code == 0
    assert kai["segments"] == "node: 2 segments of 2, 2 pods, each within rack (required) of Topology racks"
    assert kai["gang"] == "node-0 2/2, node-1 0/2 pods bound"
    cli.main(["status", "-n", NS, "--kubeconfig", api.kubeconfig, "-o", "json"])
    (line,) = json.loads(capsys.readouterr().out)
    assert "in segments: node: 2 segments of 2, 2 pods" in line["reason"]


def test_mpi_in_segments_holds_the_launchers_place_in_its_own_subgroup(api, function):
    """deepspeed's shape, 3 nodes (the launcher one of them): the nodes in one segment of 2, the launcher's leaf
    beside it, its placeholder and its pod template in that leaf."""
    from tests.function import test_reservation as mpi
    seed(api, topology("rack"))
    tj = mpi.seed_mpi(api)
    tj["metadata"]["annotations"] = dict(SEGMENTS)
    tj = api.put(tj)
    assert send(function.url, resource(tj)).status == 200
    pg = api.get(KAI_PG, "PodGroup", mpi.NS, mpi.PG)
    assert [(s["name"], s.get("minMember")) for s in pg["spec"]["subGroups"]] == [
        ("launcher", 1), ("node", None), ("node-0", 2)]
    (held,) = mpi.placeholders(api)
    assert held["metadata"]["labels"][keys.KAI_SUBGROUP_LABEL] == "launcher"
    js = api.get(JOBSET, "JobSet", mpi.NS, mpi.NAME)
    templates = {rj["name"]: rj["template"]["spec"]["template"]["metadata"] for rj in js["spec"]["replicatedJobs"]}
    assert templates["launcher"]["labels"][keys.KAI_SUBGROUP_LABEL] == "launcher"
    assert templates["node"]["labels"][keys.SEGMENT_SIZE_LABEL] == "2"
