"""The gang named at admission, over real HTTP against the API emulator: the admission policy (not run by the
emulator; held to the planner on a real API server by tests/testbed/test_gang_naming.py) named each pod template's
PodGroup when Trainer made the JobSet, and nothing is held. kai_fn makes the PodGroups and writes neither the JobSet
nor the TrainJob; KAI binds no pod before they exist. Refused or told to wait, it makes none, and the pods wait
unbound with no GPU held."""
from __future__ import annotations

import pytest

from tests.builders import named_jobset_for
from tests.ce import ping, resource, send
from tests.conftest import JOBSET, KAI_PG, TRAINER, sample_object, seed

pytestmark = pytest.mark.usefixtures("forgetful")

NS, NAME = "team-a", "llama-finetune"
UID = "6f1c2b9e-3d4a-4e5f-8a7b-9c0d1e2f3a4b"
PG = f"pg-{NAME}-{UID}"


def seed_named(api, *, trainjob=None, jobset=True, names: dict[str, str] | None = None, queue=True):
    """llama-finetune as submitted, with its JobSet as Trainer made it and the policy named it."""
    tj = trainjob or sample_object("trainjob-llama-finetune")
    runtime = sample_object("clustertrainingruntime-torch-kai")
    objects = ([sample_object("queue-team-a")] if queue else []) + [runtime, tj]
    if jobset:
        js = named_jobset_for(tj, runtime)
        for rj in js["spec"]["replicatedJobs"]:
            if rj["name"] in (names or {}):
                rj["template"]["spec"]["template"]["metadata"]["annotations"]["pod-group-name"] = names[rj["name"]]
        objects.append(js)
    seed(api, *objects)
    return api.get(TRAINER, "TrainJob", NS, NAME)


def writes(api):
    return [(c.verb, c.resource) for c in api.writes()]


def warnings(api, reason):
    return [e for e in api.list("v1", "Event", NS) if e.get("reason") == reason]


def podgroups(api):
    return [p["metadata"]["name"] for p in api.list(KAI_PG, "PodGroup", NS)]


@pytest.mark.parametrize("trigger", ["the TrainJob's add", "the named JobSet's add"])
def test_a_named_jobset_gets_its_podgroup_and_nothing_else_is_written(api, function, trigger):
    tj = seed_named(api)
    api.reset_calls()
    event = resource(tj) if trigger == "the TrainJob's add" else resource(api.get(JOBSET, "JobSet", NS, NAME))
    answer = send(function.url, event)
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    assert writes(api) == [("create", "podgroups"), ("create", "events")]
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    assert pg["metadata"]["name"] == PG and pg["spec"]["minMember"] == 4 and pg["spec"]["queue"] == "team-a"
    js = api.get(JOBSET, "JobSet", NS, NAME)
    assert js["spec"]["suspend"] is False and "kai-fn/podgroup" not in (js["metadata"].get("annotations") or {})


def test_every_later_event_of_a_made_gang_costs_nothing_new(api, function):
    tj = seed_named(api)
    send(function.url, resource(tj))
    api.reset_calls()
    js = api.get(JOBSET, "JobSet", NS, NAME)
    answers = [send(function.url, resource(obj, "update")) for obj in (tj, js)]
    assert [a.headers.get("X-Kai-Fn-Outcome") for a in answers] == ["skipped", "skipped"]
    assert api.writes() == []


def test_another_process_finds_the_gang_made_and_writes_nothing(api, functions):
    tj = seed_named(api)
    first, second = functions(), functions()
    send(first.url, resource(tj))
    api.reset_calls()
    answer = send(second.url, resource(tj, "update"))
    assert answer.headers.get("X-Kai-Fn-Outcome") == "skipped" and api.writes() == []


def test_a_jobset_naming_other_podgroups_gets_none_and_a_warning(api, function):
    tj = seed_named(api, names={"node": "pg-someone-else"})
    answer = send(function.url, resource(tj))
    assert answer.status == 200 and podgroups(api) == []
    (warning,) = warnings(api, "JobSetMismatch")
    assert "pg-someone-else" in warning["message"] and warning["type"] == "Warning"
    assert not [w for w in writes(api) if w[1] in ("jobsets", "trainjobs")]


@pytest.mark.parametrize("setting,annotations", [({}, {"kai-fn/hold": "true"}), ({"KAI_FN_RESUME": "false"}, {})],
                         ids=["kai-fn-hold", "resume-off"])
def test_told_to_wait_no_podgroup_is_made_until_it_may_start(api, functions, setting, annotations):
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"].setdefault("annotations", {}).update(annotations)
    seed_named(api, trainjob=tj)
    fn = functions(**setting)
    answer = send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, NAME)))
    assert answer.headers.get("X-Kai-Fn-Outcome") == "waiting" and podgroups(api) == []
    assert not [w for w in writes(api) if w[1] != "events"]


def test_a_queue_that_does_not_exist_refuses_the_gang_and_makes_no_podgroup(api, function):
    tj = seed_named(api, queue=False)
    answer = send(function.url, resource(tj))
    assert answer.status == 200 and podgroups(api) == []
    (warning,) = warnings(api, "QueueNotFound")
    assert "team-a" in warning["message"]


def test_the_resync_makes_the_gang_of_a_named_jobset_whose_events_were_lost(api, function):
    seed_named(api)
    answer = send(function.url, ping())
    assert answer.status == 200 and podgroups(api) == [PG]
    assert not [w for w in writes(api) if w[1] in ("jobsets", "trainjobs")]


# -- segments: what admission can name, and what it cannot --------------------------------------------------------

RACKS = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "racks"},
         "spec": {"levels": [{"nodeLabel": "rack"}]}}
ASKED = {"kai.scheduler/topology": "racks", "kai.scheduler/segment-size": "2",
         "kai.scheduler/segment-topology-required-placement": "rack"}


def seed_segmented(api, *, on_template: bool):
    """llama-finetune (4 nodes) in segments of 2: asked on the runtime's trainer pod template (Trainer copies it onto
    the JobSet, where the policy names the segments) or on the TrainJob itself (it does not)."""
    tj = sample_object("trainjob-llama-finetune")
    runtime = sample_object("clustertrainingruntime-torch-kai")
    if on_template:
        pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        pod.setdefault("metadata", {}).setdefault("annotations", {}).update(ASKED)
    else:
        tj["metadata"].setdefault("annotations", {}).update(ASKED)
    seed(api, sample_object("queue-team-a"), RACKS, runtime, tj, named_jobset_for(tj, runtime))
    return api.get(TRAINER, "TrainJob", NS, NAME)


def test_segments_asked_on_the_runtimes_template_are_named_at_admission_and_the_gang_made_in_them(api, function):
    tj = seed_segmented(api, on_template=True)
    answer = send(function.url, resource(tj))
    assert answer.headers.get("X-Kai-Fn-Outcome") == "done"
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    assert [g["name"] for g in pg["spec"]["subGroups"]] == ["node", "node-0", "node-1"]
    assert not [w for w in writes(api) if w[1] in ("jobsets", "trainjobs")]


def test_segments_asked_on_the_trainjob_alone_cannot_reach_its_pods_and_get_no_gang(api, function):
    tj = seed_segmented(api, on_template=False)
    answer = send(function.url, resource(tj))
    assert answer.status == 200 and podgroups(api) == []
    (warning,) = warnings(api, "JobSetMismatch")
    assert "spec.runtimePatches" in warning["message"] and "kai-fn/segment-size" in warning["message"]


def test_a_gang_in_segments_waits_for_its_named_jobset(api, function):
    tj = seed_segmented(api, on_template=True)
    api.delete(JOBSET, "JobSet", NS, NAME)  # Trainer has not made it yet
    answer = send(function.url, resource(tj))
    assert answer.headers.get("X-Kai-Fn-Outcome") == "waiting" and podgroups(api) == []
