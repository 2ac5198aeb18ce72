"""KAI's missing schedule timeout, kept by kai_fn on each resync ping, through the real function server."""
from __future__ import annotations

import datetime

import pytest

from kai_fn.core import keys
from tests.ce import ping, resource, send
from tests.conftest import KAI_PG, TRAINER, sample_object, seed

NS, NAME = "team-a", "llama-finetune"
UID = "6f1c2b9e-3d4a-4e5f-8a7b-9c0d1e2f3a4b"
PG = f"pg-{NAME}-{UID}"
OVERLIMIT = [{"type": "UnschedulableOnNodePool", "lastTransitionTime": "2026-12-03T06:00:00Z",
              "reasons": [{"reason": "OverLimit", "message": "team-a queue: gpu over its limit"}]}]


def ago(seconds: int) -> str:
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def released_llama(api, url, runtime_timeout=None, **notes):
    """The sample released by kai_fn, then made to look as if it was released ``released_ago`` seconds back."""
    rt = sample_object("clustertrainingruntime-torch-kai")
    if runtime_timeout is not None:
        rt["spec"]["podGroupPolicy"] = {"kai": {"scheduleTimeoutSeconds": runtime_timeout}}
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"]["annotations"] = notes
    seed(api, sample_object("queue-team-a"), rt, tj, sample_object("jobset-llama-finetune"))
    assert send(url, resource(api.get(TRAINER, "TrainJob", NS, NAME))).status == 200
    return api.get(TRAINER, "TrainJob", NS, NAME)


def backdate(api, seconds: int, **notes):
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    tj["metadata"]["annotations"][keys.RELEASED_AT_ANNOTATION] = ago(seconds)
    tj["metadata"]["annotations"].update(notes)
    api.put(tj)


def kai_says(api, conditions=OVERLIMIT):
    pg = api.get(KAI_PG, "PodGroup", NS, PG)
    pg["status"] = {"schedulingConditions": conditions}
    api.put(pg)


def pod(i, node=None):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{NAME}-node-0-{i}", "namespace": NS,
                         "labels": {keys.JOBSET_NAME_LABEL: NAME}, "annotations": {keys.KAI_POD_GROUP_ANNOTATION: PG}},
            "spec": {"containers": [{"name": "node", "image": "pytorch"}], **({"nodeName": node} if node else {})}}


def calls(api):
    """The resync's calls but its heartbeat (one PATCH of its Lease each run: tests/function/test_heartbeat.py)."""
    return [(c.verb, c.resource) for c in api.calls if c.resource != "leases"]


def writes(api):
    return [c for c in api.writes() if c.resource != "leases"]


def events_of(api, reason):
    return [e for e in api.list("v1", "Event", NS) if e["reason"] == reason]


def notes(api):
    return api.get(TRAINER, "TrainJob", NS, NAME)["metadata"]["annotations"]


def test_the_release_records_when_the_wait_began_in_its_one_patch(api, function):
    tj = released_llama(api, function.url, runtime_timeout=120)
    patches = [c for c in api.calls if c.verb == "patch" and c.resource == "trainjobs"]
    assert len(patches) == 1 and patches[0].body["spec"] == {"suspend": False}
    assert set(patches[0].body["metadata"]["annotations"]) == {keys.MARKER_PODGROUP, keys.RELEASED_AT_ANNOTATION}
    assert tj["metadata"]["annotations"][keys.RELEASED_AT_ANNOTATION] <= ago(0)
    pg = api.get(KAI_PG, "PodGroup", NS, PG)
    assert pg["metadata"]["annotations"][keys.SCHEDULE_TIMEOUT_ANNOTATION] == "120"


@pytest.mark.parametrize("runtime_timeout, setting, expected", [
    ({}, {}, "60"),  # podGroupPolicy.kai without a value: the seed's default
    (None, {}, None),  # label-only and no setting: no timeout
    (None, {"KAI_FN_SCHEDULE_TIMEOUT_SECONDS": "300"}, "300"),
    (30, {"KAI_FN_SCHEDULE_TIMEOUT_SECONDS": "300"}, "30"),  # the runtime's policy wins over the setting
], ids=["policy-default", "label-only-none", "label-only-setting", "policy-over-setting"])
def test_where_the_timeout_comes_from(api, functions, runtime_timeout, setting, expected):
    fn = functions(**setting)
    rt = sample_object("clustertrainingruntime-torch-kai")
    if runtime_timeout is not None:
        rt["spec"]["podGroupPolicy"] = {"kai": {} if runtime_timeout == {} else {"scheduleTimeoutSeconds": runtime_timeout}}
    seed(api, sample_object("queue-team-a"), rt, sample_object("trainjob-llama-finetune"),
         sample_object("jobset-llama-finetune"))
    assert send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, NAME))).status == 200
    pg = api.get(KAI_PG, "PodGroup", NS, PG)
    assert pg["metadata"]["annotations"].get(keys.SCHEDULE_TIMEOUT_ANNOTATION) == expected


def test_an_overdue_gang_gets_one_schedule_timeout_event_with_kais_reasons_and_keeps_waiting(api, function):
    released_llama(api, function.url, runtime_timeout=60)
    kai_says(api)
    backdate(api, 61)
    seed(api, pod(0), pod(1, node="n1"))
    api.reset_calls()
    assert send(function.url, ping()).status == 200
    (warning,) = events_of(api, "ScheduleTimeout")
    assert warning["type"] == "Warning"
    assert f"PodGroup {PG} is not bound 60s after the wait began" in warning["message"]
    assert "KAI says: OverLimit: team-a queue: gpu over its limit" in warning["message"], warning["message"]
    assert "keeps waiting" in warning["message"]
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    assert tj["spec"]["suspend"] is False and keys.TIMED_OUT_ANNOTATION in tj["metadata"]["annotations"]
    assert ("list", "pods") in [(c.verb, c.resource) for c in api.calls]

    api.reset_calls()  # the next ping: the wait timed out already, the timeout looks at nothing again
    assert send(function.url, ping()).status == 200
    assert writes(api) == [] and ("list", "podgroups") not in calls(api)
    assert calls(api).count(("list", "pods")) == 1  # the gang-status sweep's own look, no second one


def test_a_wait_that_is_not_over_is_left_alone(api, function):
    released_llama(api, function.url, runtime_timeout=60)
    backdate(api, 30)
    api.reset_calls()
    assert send(function.url, ping()).status == 200
    assert writes(api) == [] and calls(api).count(("list", "pods")) == 1  # the gang-status sweep's only


def test_the_trainjobs_annotation_overrides_the_runtimes_timeout(api, function):
    released_llama(api, function.url, runtime_timeout=3600)
    backdate(api, 11, **{keys.SCHEDULE_TIMEOUT_ANNOTATION: "10"})
    assert send(function.url, ping()).status == 200
    (warning,) = events_of(api, "ScheduleTimeout")
    assert "not bound 10s after" in warning["message"]


def test_suspend_mode_suspends_marks_and_a_resume_starts_a_new_wait_that_duplicates_do_not_touch(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    released_llama(api, fn.url, runtime_timeout=60)
    backdate(api, 61)
    assert send(fn.url, ping()).status == 200
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    timed_out = tj["metadata"]["annotations"][keys.TIMED_OUT_ANNOTATION]
    assert tj["spec"]["suspend"] is True and keys.RELEASED_AT_ANNOTATION not in tj["metadata"]["annotations"]
    assert "suspended again" in events_of(api, "ScheduleTimeout")[0]["message"]

    api.reset_calls()  # Trainer's own update of the suspended TrainJob: nothing to do
    assert send(fn.url, resource(tj, "update")).status == 200
    assert api.calls == []

    tj["spec"]["suspend"] = False  # the user resumes it
    (resumed,) = seed(api, tj)
    api.reset_calls()
    assert send(fn.url, resource(resumed, "update")).status == 200
    assert [(c.verb, c.resource) for c in api.calls] == [("patch", "trainjobs")]
    started = notes(api)[keys.RELEASED_AT_ANNOTATION]
    assert started > timed_out

    api.reset_calls()  # the update our patch caused, and any duplicate of it, cost nothing
    assert send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, NAME), "update")).status == 200
    assert api.calls == []
    assert send(fn.url, ping()).status == 200  # the new wait is not over
    assert writes(api) == [] and len(events_of(api, "ScheduleTimeout")) == 1


def test_a_resume_whose_event_was_missed_starts_its_wait_at_the_resync(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    released_llama(api, fn.url, runtime_timeout=60)
    backdate(api, 61)
    assert send(fn.url, ping()).status == 200
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    tj["spec"]["suspend"] = False
    api.put(tj)
    assert send(fn.url, ping()).status == 200
    assert notes(api)[keys.RELEASED_AT_ANNOTATION] > notes(api)[keys.TIMED_OUT_ANNOTATION]
    assert api.get(TRAINER, "TrainJob", NS, NAME)["spec"]["suspend"] is False


def test_a_gang_known_to_be_bound_never_times_out(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    released_llama(api, fn.url, runtime_timeout=60)
    backdate(api, 600, **{keys.GANG_BOUND_ANNOTATION: ago(590)})
    api.reset_calls()
    assert send(fn.url, ping()).status == 200
    assert writes(api) == [] and "pods" not in {c.resource for c in api.calls}


def test_a_gang_whose_pods_are_all_bound_but_not_yet_marked_never_times_out(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    released_llama(api, fn.url, runtime_timeout=60)
    backdate(api, 61)
    seed(api, *[pod(i, node=f"n{i}") for i in range(4)])
    assert send(fn.url, ping()).status == 200
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    assert tj["spec"]["suspend"] is False and events_of(api, "ScheduleTimeout") == []
    assert keys.GANG_BOUND_ANNOTATION in tj["metadata"]["annotations"]  # the wait is over: nothing more to look at
    api.reset_calls()
    assert send(fn.url, ping()).status == 200
    assert calls(api) == [("list", "trainjobs")]


def test_a_trainjob_that_changed_since_the_resync_read_it_is_left_for_the_next_run(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    released_llama(api, fn.url, runtime_timeout=60)
    backdate(api, 61)

    def bound_meanwhile(call):  # the gang-status path marks it bound between the resync's read and its patch
        if call.verb == "list" and call.resource == "pods":
            tj = api.get(TRAINER, "TrainJob", NS, NAME)
            tj["metadata"]["annotations"][keys.GANG_BOUND_ANNOTATION] = ago(0)
            del tj["metadata"]["resourceVersion"]  # a write: the server gives it a new version
            api.put(tj)
        return None

    api.faults = bound_meanwhile
    assert send(fn.url, ping()).status == 200
    api.faults = None
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    assert tj["spec"]["suspend"] is False and keys.TIMED_OUT_ANNOTATION not in tj["metadata"]["annotations"]
    assert events_of(api, "ScheduleTimeout") == []


def test_the_scheduler_plugins_flavor_leaves_timeouts_to_its_podgroup(api, functions):
    fn = functions(KAI_PODGROUP_FLAVOR="scheduler-plugins")
    released_llama(api, fn.url, runtime_timeout=60)
    assert keys.RELEASED_AT_ANNOTATION not in notes(api)
    api.reset_calls()
    assert send(fn.url, ping()).status == 200
    assert ("list", "podgroups") not in calls(api)


def test_a_bound_gang_the_gang_status_sweep_did_not_reach_is_still_never_suspended(api, functions):
    """The sweep looks at KAI_FN_RESYNC_LIMIT gangs, oldest first; the timeout looks at the pods itself."""
    fn = functions(KAI_FN_ON_TIMEOUT="suspend", KAI_FN_RESYNC_LIMIT="1")
    older = sample_object("trainjob-llama-finetune")
    older["metadata"] |= {"name": "older", "uid": "0a0b0c0d-1e1f-4a2b-8c3d-4e5f6a7b8c9d",
                          "creationTimestamp": "2026-01-01T00:00:00Z"}
    js = sample_object("jobset-llama-finetune")
    js["metadata"]["name"] = "older"
    js["metadata"]["ownerReferences"][0] |= {"name": "older", "uid": older["metadata"]["uid"]}
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"), older, js)
    assert send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, "older"))).status == 200
    released_llama(api, fn.url, runtime_timeout=60)
    backdate(api, 61)
    seed(api, *[pod(i, node=f"n{i}") for i in range(4)])
    assert send(fn.url, ping()).status == 200
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    assert keys.GANG_BOUND_ANNOTATION not in tj["metadata"]["annotations"]  # the sweep never got to it
    assert tj["spec"]["suspend"] is False and events_of(api, "ScheduleTimeout") == []
    assert keys.RELEASED_AT_ANNOTATION not in tj["metadata"]["annotations"]  # its wait ended quietly


# -- a staged gang: initializers run first, for as long as they need -------------------------------------------

BERT, BERT_UID = "bert-pretrain", "2b7e4c1d-8f3a-4b6e-9d2c-5a1f0e3b7c8d"
BERT_PG = f"pg-{BERT}-{BERT_UID}"


def staged_pod(rj, i, podgroup, node=None, created_ago=0):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{BERT}-{rj}-0-{i}", "namespace": NS, "creationTimestamp": ago(created_ago),
                         "labels": {keys.JOBSET_NAME_LABEL: BERT}, "annotations": {keys.KAI_POD_GROUP_ANNOTATION: podgroup}},
            "spec": {"containers": [{"name": "node", "image": "pytorch"}], **({"nodeName": node} if node else {})}}


@pytest.mark.parametrize("pods, timed_out", [
    (lambda: [staged_pod("dataset-initializer", 0, f"{BERT_PG}-stage-0", node="n1", created_ago=600)], False),
    (lambda: [staged_pod("node", i, BERT_PG, created_ago=20) for i in range(3)], False),
    (lambda: [staged_pod("node", i, BERT_PG, created_ago=120) for i in range(3)], True),
], ids=["initializers-still-running", "trainer-pods-new", "trainer-pods-waited-past-the-timeout"])
def test_a_staged_gangs_timeout_counts_from_its_trainer_pods_not_the_release(api, function, pods, timed_out):
    rt = sample_object("trainingruntime-torch-llm-kai")
    rt["spec"]["podGroupPolicy"] = {"kai": {"scheduleTimeoutSeconds": 60}}
    seed(api, sample_object("queue-team-a"), rt, sample_object("trainjob-bert-pretrain"),
         sample_object("jobset-bert-pretrain"))
    assert send(function.url, resource(api.get(TRAINER, "TrainJob", NS, BERT))).status == 200
    tj = api.get(TRAINER, "TrainJob", NS, BERT)
    tj["metadata"]["annotations"][keys.RELEASED_AT_ANNOTATION] = ago(600)
    api.put(tj)
    seed(api, *pods())  # their ages are taken now, not when the test was collected
    assert send(function.url, ping()).status == 200
    assert len(events_of(api, "ScheduleTimeout")) == (1 if timed_out else 0)
