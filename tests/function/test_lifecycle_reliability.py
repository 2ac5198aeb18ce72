"""Reliability of the queue pre-check and the schedule timeout: API faults, duplicates and out-of-order events.

The same holds as for the release (tests/reliability.py): 503 + Retry-After for what a retry fixes, never a 500;
nothing half-done that a later delivery or ping does not finish; one Warning per refusal or timed-out wait. In the
JobSet gate: a refused gang's JobSet stays held; the timeout's marks go on the main PodGroup, and the TrainJob is
written only by KAI_FN_ON_TIMEOUT=suspend, which comes first (a mark ends the wait).
"""
from __future__ import annotations

import datetime
import threading
import uuid

import pytest

from kai_fn.core import keys
from kai_fn.local.delivery import Adapter
from kai_fn.local.emulator import Call, Fault
from tests.ce import ping, resource, send
from tests.conftest import JOBSET, KAI_PG, TRAINER, sample_object
from tests.reliability import (
    DONE, PERIOD, UNTOUCHED, check_answers, gate_state_of, make_job, on_nth, plant, safety_violations, settle,
)

FAULTS = {"500": Fault(status=500), "503": Fault(status=503), "429": Fault(status=429, retry_after=1),
          "hang": Fault(hang=1.6)}



def warnings(api, ns, reason):
    return [e for e in api.list("v1", "Event", ns) if e["reason"] == reason]


# -- the queue pre-check -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", FAULTS, ids=list(FAULTS))
def test_a_failing_queue_list_is_retried_by_the_sender_and_nothing_is_written_before_it_succeeds(api, function, fault):
    job = make_job(f"rel-queues-{fault}", "queues", str(uuid.uuid5(uuid.NAMESPACE_URL, fault)), extras=True)
    since = plant(api, [job])
    seen_writes_before_list: list[str] = []

    def faults(call: Call) -> Fault | None:
        if call.resource == "queues" and not fired.is_set():
            fired.set()
            seen_writes_before_list.extend(c.resource for c in api.writes())
            return FAULTS[fault]
        return None

    fired = threading.Event()
    api.faults = faults
    delivery = Adapter(function.url, period=PERIOD).send(job.event())
    api.faults = None
    assert delivery.statuses == [503, 200] and check_answers([delivery]) == []
    assert seen_writes_before_list == []
    assert gate_state_of(api, job) == (DONE, []) and safety_violations(api, job, since) == []


def test_an_add_refused_earlier_and_redelivered_after_the_fix_and_release_writes_nothing(api, function):
    job = make_job("rel-refused-late", "late", str(uuid.uuid5(uuid.NAMESPACE_URL, "gate refused-late")))
    plant(api, [job])
    team_a = sample_object("queue-team-a")
    team_a["spec"]["resources"]["gpu"]["limit"] = 1
    api.put(team_a)
    assert send(function.url, job.event()).status == 200
    assert len(warnings(api, job.namespace, "GangExceedsQueue")) == 1
    assert gate_state_of(api, job) == (UNTOUCHED, [])  # its JobSet stays held, no PodGroup
    api.put(sample_object("queue-team-a"))
    assert send(function.url, ping()).status == 200  # the resync finds the JobSet still held
    assert gate_state_of(api, job) == (DONE, [])
    api.reset_calls()
    assert send(function.url, job.event()).status == 200  # the original add once more
    assert api.writes() == []


# -- the schedule timeout ------------------------------------------------------------------------------------------

def ago(seconds: int) -> str:
    return (datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def jobset_runs(api, job, seconds: int, suspend: bool = False) -> None:
    """What JobSet's controller writes (the emulator runs none): resumed, or suspended, ``seconds`` ago."""
    js = api.get(JOBSET, "JobSet", job.namespace, job.name)
    js["spec"]["suspend"] = suspend
    js["status"] = {"conditions": [{"type": "Suspended", "status": str(suspend), "lastTransitionTime": ago(seconds),
                                    "reason": "SuspendJobs" if suspend else "ResumeJobs"}]}
    del js["metadata"]["resourceVersion"]
    api.put(js)


def set_trainjob(api, job, change) -> dict:
    tj = api.get(TRAINER, "TrainJob", job.namespace, job.name)
    change(tj)
    del tj["metadata"]["resourceVersion"]
    return api.put(tj)


def marks(api, job) -> dict:
    return api.get(KAI_PG, "PodGroup", job.namespace, job.pg_name)["metadata"].get("annotations") or {}


def overdue_job(api, url, name):
    """Released by kai_fn, its JobSet running for 10 minutes, its TrainJob asking for a 60 s timeout."""
    job = make_job(f"rel-timeout-{name}", "timeout", str(uuid.uuid5(uuid.NAMESPACE_URL, f"gate {name}")))
    plant(api, [job])
    assert send(url, job.event()).status == 200
    set_trainjob(api, job, lambda tj: tj["metadata"].setdefault("annotations", {}).update(
        {keys.SCHEDULE_TIMEOUT_ANNOTATION: "60"}))
    jobset_runs(api, job, 600)
    return job


TIMEOUT_FAULTS = {
    # name: (the call that fails, which of them (from 1), the fault, the first ping's answer,
    #        how many ScheduleTimeout Events at the end (None: at most one), whether the wait is marked timed out
    #        (None: it may not be))
    # The resync's three LISTs are its inventory: without one it does nothing, and says so (503).
    "the PodGroup list fails": ("list", "podgroups", 1, Fault(status=503), 503, 1, True),
    "the gang-status sweep's pod list fails": ("list", "pods", 1, Fault(status=500), 200, 1, True),
    "the timeout's pod list fails": ("list", "pods", 2, Fault(status=500), 200, 1, True),
    "the timeout's pod list hangs": ("list", "pods", 2, Fault(hang=1.6), 200, 1, True),
    "the suspend patch fails": ("patch", "trainjobs", 1, Fault(status=503), 200, 1, True),
    "the suspend patch is applied but its answer is lost": (
        "patch", "trainjobs", 1, Fault(status=503, after=True), 200, 1, True),
    # kai_fn gave up on the write, so it cannot know it landed: the Event and the mark may be lost (a suspended
    # TrainJob has no wait left to time out), never doubled, and the TrainJob is suspended exactly once.
    "the suspend patch hangs past the timeout and lands late": (
        "patch", "trainjobs", 1, Fault(hang=1.6), 200, None, None),
    # After the suspension and its Event: only the mark is lost, which a suspended TrainJob does not need (its
    # resume starts a new wait whether or not the last one is marked).
    "the timed-out mark fails": ("patch", "podgroups", 1, Fault(status=503), 200, 1, False),
    "the ScheduleTimeout Event fails": ("create", "events", 1, Fault(status=500), 200, 0, True),
}


@pytest.mark.parametrize("case", TIMEOUT_FAULTS, ids=list(TIMEOUT_FAULTS))
def test_a_fault_on_the_timeout_path_is_finished_by_the_next_ping_never_doubled(api, functions, case):
    verb, resource_, nth, fault, answer, events, marked = TIMEOUT_FAULTS[case]
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    job = overdue_job(api, fn.url, f"fault-{list(TIMEOUT_FAULTS).index(case)}")
    api.faults = on_nth(verb, resource_, nth, fault)
    first = send(fn.url, ping())
    settle(api)
    api.faults = None
    assert first.status == answer  # a resync whose inventory failed is retried by the next ping
    assert send(fn.url, ping()).status == 200
    tj = api.get(TRAINER, "TrainJob", job.namespace, job.name)
    assert tj["spec"]["suspend"] is True
    versions = [v for v in api.history(TRAINER, "TrainJob", job.namespace, job.name) if v]
    assert len(versions) >= 2
    suspended = [b for a, b in zip(versions, versions[1:]) if not a["spec"].get("suspend") and b["spec"].get("suspend")]
    assert len(suspended) == 1
    assert marked is None or (keys.TIMED_OUT_ANNOTATION in marks(api, job)) is marked
    found = len(warnings(api, job.namespace, "ScheduleTimeout"))
    assert found == events if events is not None else found <= 1


def test_simultaneous_pings_time_a_gang_out_once(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    job = overdue_job(api, fn.url, "simultaneous")
    api.reset_calls()
    barrier = threading.Barrier(8)
    answers: list[int] = []

    def deliver() -> None:
        barrier.wait()
        answers.append(send(fn.url, ping()).status)

    threads = [threading.Thread(target=deliver) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert answers == [200] * 8
    suspends = [c for c in api.calls if c.verb == "patch" and c.resource == "trainjobs" and c.status == 200]
    assert len(suspends) == 1  # the others found it changed (409) or timed out already
    assert len(warnings(api, job.namespace, "ScheduleTimeout")) == 1
    assert keys.TIMED_OUT_ANNOTATION in marks(api, job)


def test_an_old_event_after_the_timeout_suspended_the_trainjob_changes_nothing(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    job = overdue_job(api, fn.url, "old-event")
    running = api.get(TRAINER, "TrainJob", job.namespace, job.name)  # as an update before the timeout saw it
    assert send(fn.url, ping()).status == 200
    jobset = api.get(JOBSET, "JobSet", job.namespace, job.name)
    api.reset_calls()
    assert send(fn.url, resource(running, "update")).status == 200
    assert api.writes() == []  # read (the timeout made kai_fn forget it had decided it), nothing to do
    assert api.get(TRAINER, "TrainJob", job.namespace, job.name)["spec"]["suspend"] is True
    assert api.get(JOBSET, "JobSet", job.namespace, job.name) == jobset
    api.reset_calls()
    assert send(fn.url, resource(running, "update")).status == 200  # and once read, its duplicates cost nothing
    assert api.calls == []


def test_a_stale_resume_cannot_restart_a_wait_that_has_timed_out_again_since(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    job = overdue_job(api, fn.url, "stale-resume")
    assert send(fn.url, ping()).status == 200  # first timeout: suspended
    pg = api.get(KAI_PG, "PodGroup", job.namespace, job.pg_name)  # (as if it were 400 s ago)
    pg["metadata"]["annotations"][keys.TIMED_OUT_ANNOTATION] = ago(400)
    del pg["metadata"]["resourceVersion"]
    api.put(pg)
    jobset_runs(api, job, 390, suspend=True)  # Trainer suspends the JobSet with it
    first_resume = set_trainjob(api, job, lambda tj: tj["spec"].update(suspend=False))
    jobset_runs(api, job, 300)  # ...and resumes it: a new wait, made overdue
    assert send(fn.url, resource(first_resume, "update")).status == 200  # the resume costs no write
    assert send(fn.url, ping()).status == 200  # second timeout: suspended again
    assert len(warnings(api, job.namespace, "ScheduleTimeout")) == 2
    jobset_runs(api, job, 290, suspend=True)
    before = api.get(TRAINER, "TrainJob", job.namespace, job.name), api.get(JOBSET, "JobSet", job.namespace, job.name)
    assert before[0]["spec"]["suspend"] is True
    api.reset_calls()
    assert send(fn.url, resource(first_resume, "update")).status == 200  # the first resume, delivered again
    assert api.writes() == []
    assert (api.get(TRAINER, "TrainJob", job.namespace, job.name),
            api.get(JOBSET, "JobSet", job.namespace, job.name)) == before
    assert api.get(KAI_PG, "PodGroup", job.namespace, job.pg_name) is not None
