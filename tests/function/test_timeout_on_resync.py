"""KAI's missing schedule timeout, kept by kai_fn on each resync ping, through the real function server.

A wait starts when the gang's JobSet starts running (JobSet's ``Suspended`` condition turns False; kai_fn's own
``kai-fn/released-at`` on the JobSet until then) and ends bound or timed out, both marked on the main PodGroup: the
TrainJob is written only to suspend it (``KAI_FN_ON_TIMEOUT=suspend``). The emulator runs no JobSet controller, so
the tests set the JobSet's condition as it would.
"""
from __future__ import annotations

import datetime
import uuid

import pytest

from kai_fn.core import keys
from tests.builders import job_owner
from tests.ce import ping, resource, send
from tests.conftest import JOBSET, KAI_PG, TRAINER, resync_lists, sample_object, seed
from tests.builders import held_by_0_2

NS, NAME = "team-a", "llama-finetune"
UID = PG = ""  # this test's (fresh_uids)
OVERLIMIT = [{"type": "UnschedulableOnNodePool", "lastTransitionTime": "2026-12-03T06:00:00Z",
              "reasons": [{"reason": "OverLimit", "message": "team-a queue: gpu over its limit"}]}]
LISTS = resync_lists()  # the resync's inventory
BERT = "bert-pretrain"
BERT_UID = BERT_PG = ""


@pytest.fixture(autouse=True)
def fresh_uids():
    """Each test its own TrainJob uids: a function process remembers for the session the TrainJobs whose JobSet it
    decided, by uid (kai_fn/function/recent.py), so a sample's uid reused by the next test would cost nothing."""
    global UID, PG, BERT_UID, BERT_PG
    UID, BERT_UID = str(uuid.uuid4()), str(uuid.uuid4())
    PG, BERT_PG = f"pg-{NAME}-{UID}", f"pg-{BERT}-{BERT_UID}"


def sample(name, uid=None):
    """A sample TrainJob or JobSet, given this test's uid (``uid``: another's) for the TrainJob."""
    obj = sample_object(name)
    uid = uid or (BERT_UID if BERT in name else UID)
    if obj["kind"] == "TrainJob":
        obj["metadata"]["uid"] = uid
    elif obj["kind"] == "JobSet":
        obj["metadata"]["uid"] = str(uuid.uuid5(uuid.UUID(uid), "jobset"))
        obj["metadata"]["ownerReferences"][0]["uid"] = uid
    return obj


def ago(seconds: int) -> str:
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def released_llama(api, url, runtime_timeout=None, **notes):
    """The sample submitted (its JobSet held by the policy) and released by kai_fn; its TrainJob as it is then."""
    rt = sample_object("clustertrainingruntime-torch-kai")
    if runtime_timeout is not None:
        rt["spec"]["podGroupPolicy"] = {"kai": {"scheduleTimeoutSeconds": runtime_timeout}}
    tj = sample("trainjob-llama-finetune")
    tj["metadata"]["annotations"] = notes
    seed(api, sample_object("queue-team-a"), rt, tj, held_by_0_2(sample("jobset-llama-finetune")))
    assert send(url, resource(api.get(TRAINER, "TrainJob", NS, NAME))).status == 200
    assert api.get(JOBSET, "JobSet", NS, NAME)["spec"]["suspend"] is False
    return api.get(TRAINER, "TrainJob", NS, NAME)


def write(api, obj):
    """Store ``obj`` as a write (a new resourceVersion), as a controller's update would."""
    del obj["metadata"]["resourceVersion"]
    return api.put(obj)


def jobset_runs(api, seconds: int, name: str = NAME, suspend: bool = False):
    """JobSet's controller: the JobSet resumed (``suspend``: suspended) ``seconds`` ago, in its spec and condition."""
    js = api.get(JOBSET, "JobSet", NS, name)
    js["spec"]["suspend"] = suspend
    js["status"] = {"conditions": [{"type": "Suspended", "status": "True" if suspend else "False",
                                    "reason": "SuspendJobs" if suspend else "ResumeJobs",
                                    "lastTransitionTime": ago(seconds)}]}
    return write(api, js)


def trainjob_notes(api, **notes):
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    tj["metadata"].setdefault("annotations", {}).update(notes)
    return write(api, tj)


def pg_notes(api, **notes):
    pg = api.get(KAI_PG, "PodGroup", NS, PG)
    if notes:
        pg["metadata"]["annotations"].update(notes)
        write(api, pg)
    return api.get(KAI_PG, "PodGroup", NS, PG)["metadata"]["annotations"]


def kai_says(api, conditions=OVERLIMIT):
    pg = api.get(KAI_PG, "PodGroup", NS, PG)
    pg["status"] = {"schedulingConditions": conditions}
    api.put(pg)


def pod(i, node=None):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{NAME}-node-0-{i}", "namespace": NS, "ownerReferences": job_owner(NAME),
                         "labels": {keys.JOBSET_NAME_LABEL: NAME}, "annotations": {keys.KAI_POD_GROUP_ANNOTATION: PG}},
            "spec": {"containers": [{"name": "node", "image": "pytorch"}], **({"nodeName": node} if node else {})}}


def calls(api):
    """The resync's calls but its heartbeat (one PATCH of its Lease each run: tests/function/test_heartbeat.py)."""
    return [(c.verb, c.resource) for c in api.calls if c.resource != "leases"]


def writes(api):
    return [(c.verb, c.resource) for c in api.writes() if c.resource != "leases"]


def events_of(api, reason):
    return [e for e in api.list("v1", "Event", NS) if e["reason"] == reason]


def live(api):
    return api.get(TRAINER, "TrainJob", NS, NAME)


def test_the_release_records_when_the_wait_began_on_the_jobset_in_its_one_patch(api, function):
    before = sample("trainjob-llama-finetune")
    tj = released_llama(api, function.url, runtime_timeout=120)
    patches = [c for c in api.calls if c.verb == "patch"]
    assert [(c.resource, c.content_type) for c in patches] == [("jobsets", "application/json-patch+json")]
    assert {"op": "replace", "path": "/spec/suspend", "value": False} in patches[0].body
    js = api.get(JOBSET, "JobSet", NS, NAME)
    assert js["metadata"]["annotations"][keys.RELEASED_AT_ANNOTATION] <= ago(0)
    assert js["metadata"]["annotations"][keys.MARKER_PODGROUP] == PG
    assert tj["metadata"].get("annotations") == {} and "suspend" not in tj["spec"]  # the TrainJob is not written
    assert tj["spec"] == before["spec"]
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
    seed(api, sample_object("queue-team-a"), rt, sample("trainjob-llama-finetune"),
         held_by_0_2(sample("jobset-llama-finetune")))
    assert send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, NAME))).status == 200
    pg = api.get(KAI_PG, "PodGroup", NS, PG)
    assert pg["metadata"]["annotations"].get(keys.SCHEDULE_TIMEOUT_ANNOTATION) == expected


def test_an_overdue_gang_gets_one_schedule_timeout_event_with_kais_reasons_and_keeps_waiting(api, function):
    released_llama(api, function.url, runtime_timeout=60)
    kai_says(api)
    jobset_runs(api, 61)
    seed(api, pod(0), pod(1, node="n1"))
    before = live(api)
    api.reset_calls()
    assert send(function.url, ping()).status == 200
    (warning,) = events_of(api, "ScheduleTimeout")
    assert warning["type"] == "Warning" and warning["involvedObject"]["uid"] == UID
    assert f"PodGroup {PG} is not bound 60s after the wait began" in warning["message"]
    assert "KAI says: OverLimit: team-a queue: gpu over its limit" in warning["message"], warning["message"]
    assert "keeps waiting" in warning["message"]
    assert live(api) == before  # the TrainJob is not written in event mode
    assert keys.TIMED_OUT_ANNOTATION in pg_notes(api)
    assert writes(api) == [("create", "events"), ("patch", "podgroups")]  # the Event, then the mark
    assert ("list", "pods") in calls(api)

    api.reset_calls()  # the next ping: the wait timed out already, the timeout looks at nothing again
    assert send(function.url, ping()).status == 200
    assert writes(api) == []
    # the gang-status sweep's own look (its pods, and its runtime for the plan they are counted against), no second one
    assert calls(api) == [*LISTS, ("list", "pods"), ("get", "clustertrainingruntimes")]


def test_a_wait_that_is_not_over_is_left_alone(api, function):
    released_llama(api, function.url, runtime_timeout=60)
    jobset_runs(api, 30)
    api.reset_calls()
    assert send(function.url, ping()).status == 200
    # the gang-status sweep's only look: its pods, and its runtime for the plan they are counted against
    assert writes(api) == [] and calls(api) == [*LISTS, ("list", "pods"), ("get", "clustertrainingruntimes")]


def test_until_jobsets_controller_reports_the_resume_the_wait_counts_from_kai_fns_release(api, function):
    released_llama(api, function.url, runtime_timeout=60)
    js = api.get(JOBSET, "JobSet", NS, NAME)
    js["metadata"]["annotations"][keys.RELEASED_AT_ANNOTATION] = ago(61)  # no Suspended condition yet
    write(api, js)
    assert send(function.url, ping()).status == 200
    (warning,) = events_of(api, "ScheduleTimeout")
    assert "not bound 60s after" in warning["message"]


def test_the_trainjobs_annotation_overrides_the_runtimes_timeout(api, function):
    released_llama(api, function.url, runtime_timeout=3600)
    trainjob_notes(api, **{keys.SCHEDULE_TIMEOUT_ANNOTATION: "10"})
    jobset_runs(api, 11)
    assert send(function.url, ping()).status == 200
    (warning,) = events_of(api, "ScheduleTimeout")
    assert "not bound 10s after" in warning["message"]


def test_suspend_mode_suspends_marks_and_a_resume_starts_a_new_wait_that_duplicates_do_not_touch(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    released_llama(api, fn.url, runtime_timeout=60)
    jobset_runs(api, 61)
    api.reset_calls()
    assert send(fn.url, ping()).status == 200
    tj = live(api)
    assert tj["spec"]["suspend"] is True and keys.TIMED_OUT_ANNOTATION in pg_notes(api)
    assert writes(api) == [("patch", "trainjobs"), ("create", "events"), ("patch", "podgroups")]
    (suspension,) = [c for c in api.calls if c.resource == "trainjobs" and c.verb == "patch"]
    assert suspension.body["spec"] == {"suspend": True} and suspension.body["metadata"]["resourceVersion"]
    assert "suspended again" in events_of(api, "ScheduleTimeout")[0]["message"]
    jobset_runs(api, 60, suspend=True)  # Trainer suspends the JobSet with its TrainJob

    api.reset_calls()  # Trainer's own update of the suspended TrainJob: read, nothing to do
    assert send(fn.url, resource(tj, "update")).status == 200
    assert writes(api) == []
    api.reset_calls()  # and its duplicate costs nothing
    assert send(fn.url, resource(tj, "update")).status == 200
    assert api.calls == []

    # As if the timeout was two minutes ago (a resume in the second of the timeout's mark is not seen as one:
    # tests/core/test_schedule_timeout.py).
    pg_notes(api, **{keys.TIMED_OUT_ANNOTATION: ago(120)})
    tj["spec"]["suspend"] = False  # the user resumes it; JobSet's controller resumes the JobSet
    resumed = write(api, tj)
    jobset_runs(api, 10)
    api.reset_calls()
    assert send(fn.url, resource(resumed, "update")).status == 200
    assert writes(api) == []  # the new wait needs no write: the JobSet's condition is its start
    api.reset_calls()  # any duplicate of it costs nothing
    assert send(fn.url, resource(resumed, "update")).status == 200
    assert api.calls == []
    assert send(fn.url, ping()).status == 200  # the new wait is not over
    assert writes(api) == [] and len(events_of(api, "ScheduleTimeout")) == 1

    jobset_runs(api, 90)  # the new wait, overdue in its turn: timed out again, once
    assert send(fn.url, ping()).status == 200
    assert live(api)["spec"]["suspend"] is True and len(events_of(api, "ScheduleTimeout")) == 2


def test_a_resume_whose_event_was_missed_needs_no_write_and_its_wait_is_timed_at_the_resync(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    released_llama(api, fn.url, runtime_timeout=60)
    jobset_runs(api, 61)
    assert send(fn.url, ping()).status == 200
    pg_notes(api, **{keys.TIMED_OUT_ANNOTATION: ago(120)})
    tj = live(api)
    tj["spec"]["suspend"] = False
    write(api, tj)
    jobset_runs(api, 30)
    api.reset_calls()
    assert send(fn.url, ping()).status == 200
    assert writes(api) == [] and live(api)["spec"]["suspend"] is False
    jobset_runs(api, 90)
    assert send(fn.url, ping()).status == 200
    assert live(api)["spec"]["suspend"] is True and len(events_of(api, "ScheduleTimeout")) == 2


def test_a_gang_known_to_be_bound_never_times_out(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    released_llama(api, fn.url, runtime_timeout=60)
    pg_notes(api, **{keys.GANG_BOUND_ANNOTATION: ago(590)})
    jobset_runs(api, 600)
    api.reset_calls()
    assert send(fn.url, ping()).status == 200
    assert writes(api) == [] and calls(api) == LISTS


def test_a_gang_whose_pods_are_all_bound_but_not_yet_marked_never_times_out(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    released_llama(api, fn.url, runtime_timeout=60)
    jobset_runs(api, 61)
    seed(api, *[pod(i, node=f"n{i}") for i in range(4)])
    before = live(api)
    assert send(fn.url, ping()).status == 200
    assert live(api) == before and events_of(api, "ScheduleTimeout") == []
    assert keys.GANG_BOUND_ANNOTATION in pg_notes(api)  # the wait is over: nothing more to look at
    api.reset_calls()
    assert send(fn.url, ping()).status == 200
    assert calls(api) == LISTS


def test_a_trainjob_that_changed_since_the_resync_read_it_is_left_for_the_next_run(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    released_llama(api, fn.url, runtime_timeout=60)
    jobset_runs(api, 61)

    def changed_meanwhile(call):  # its user labels it between the resync's read and its suspension
        if call.verb == "list" and call.resource == "pods":
            tj = live(api)
            tj["metadata"]["labels"]["example.com/team"] = "vision"
            write(api, tj)
        return None

    api.faults = changed_meanwhile
    assert send(fn.url, ping()).status == 200
    api.faults = None
    assert live(api)["spec"].get("suspend") is not True and keys.TIMED_OUT_ANNOTATION not in pg_notes(api)
    assert events_of(api, "ScheduleTimeout") == []
    assert send(fn.url, ping()).status == 200  # the next run reads it afresh and times it out
    tj = live(api)
    assert tj["spec"]["suspend"] is True and tj["metadata"]["labels"]["example.com/team"] == "vision"
    assert keys.TIMED_OUT_ANNOTATION in pg_notes(api) and len(events_of(api, "ScheduleTimeout")) == 1


def test_the_scheduler_plugins_flavor_leaves_timeouts_to_its_podgroup(api, functions):
    fn = functions(KAI_PODGROUP_FLAVOR="scheduler-plugins")
    released_llama(api, fn.url, runtime_timeout=60)
    jobset_runs(api, 600)
    api.reset_calls()
    assert send(fn.url, ping()).status == 200
    assert writes(api) == [] and events_of(api, "ScheduleTimeout") == []
    assert ("list", "podgroups") in calls(api)  # scheduler-plugins' PodGroups, for the inventory only


def test_a_bound_gang_the_gang_status_sweep_did_not_reach_is_still_never_suspended(api, functions):
    """The sweep looks at KAI_FN_RESYNC_LIMIT gangs, in turn; the timeout looks at the pods itself."""
    fn = functions(KAI_FN_ON_TIMEOUT="suspend", KAI_FN_RESYNC_LIMIT="1")
    older_uid = str(uuid.uuid4())
    older = sample("trainjob-llama-finetune", older_uid)
    older["metadata"] |= {"name": "older", "creationTimestamp": "2026-01-01T00:00:00Z"}
    js = held_by_0_2(sample("jobset-llama-finetune", older_uid))
    js["metadata"]["name"] = "older"
    js["metadata"]["ownerReferences"][0]["name"] = "older"
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"), older, js)
    assert send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, "older"))).status == 200
    released_llama(api, fn.url, runtime_timeout=60)
    jobset_runs(api, 61)
    seed(api, *[pod(i, node=f"n{i}") for i in range(4)])
    assert send(fn.url, ping()).status == 200
    assert events_of(api, "GangBound") == []  # the sweep took "older" this run, not this one
    assert live(api)["spec"].get("suspend") is not True and events_of(api, "ScheduleTimeout") == []
    notes = pg_notes(api)
    assert keys.GANG_BOUND_ANNOTATION in notes and keys.TIMED_OUT_ANNOTATION not in notes  # its wait ended quietly


# -- a staged gang: initializers run first, for as long as they need -------------------------------------------



def staged_pod(rj, i, podgroup, node=None, created_ago=0):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{BERT}-{rj}-0-{i}", "namespace": NS, "creationTimestamp": ago(created_ago),
                         "ownerReferences": job_owner(BERT, rj),
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
    seed(api, sample_object("queue-team-a"), rt, sample("trainjob-bert-pretrain"),
         held_by_0_2(sample("jobset-bert-pretrain")))
    assert send(function.url, resource(api.get(TRAINER, "TrainJob", NS, BERT))).status == 200
    jobset_runs(api, 600, name=BERT)
    seed(api, *pods())  # their ages are taken now, not when the test was collected
    assert send(function.url, ping()).status == 200
    assert len(events_of(api, "ScheduleTimeout")) == (1 if timed_out else 0)
