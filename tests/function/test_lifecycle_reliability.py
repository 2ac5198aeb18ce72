"""Reliability of the queue pre-check and the schedule timeout: API faults, duplicates and out-of-order events.

The same holds as for the release (tests/reliability.py): 503 + Retry-After for what a retry fixes, never a 500;
nothing half-done that a later delivery or ping does not finish; one Warning per refusal or timed-out wait.
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
from tests.conftest import KAI_PG, TRAINER, sample_object
from tests.reliability import on_first, DONE, PERIOD, check_answers, make_job, plant, safety_violations, settle, state_of

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
    assert state_of(api, job) == (DONE, []) and safety_violations(api, job, since) == []


def test_an_add_refused_earlier_and_redelivered_after_the_fix_and_release_writes_nothing(api, function):
    job = make_job("rel-refused-late", "late", "0b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f")
    plant(api, [job])
    team_a = sample_object("queue-team-a")
    team_a["spec"]["resources"]["gpu"]["limit"] = 1
    api.put(team_a)
    assert send(function.url, job.event()).status == 200
    assert len(warnings(api, job.namespace, "GangExceedsQueue")) == 1
    api.put(sample_object("queue-team-a"))
    assert send(function.url, ping()).status == 200
    assert state_of(api, job) == (DONE, [])
    api.reset_calls()
    assert send(function.url, job.event()).status == 200  # the original add, its copy unmarked, once more
    assert api.writes() == []


# -- the schedule timeout ------------------------------------------------------------------------------------------

def overdue_job(api, url, name):
    job = make_job(f"rel-timeout-{name}", "timeout", str(uuid.uuid5(uuid.NAMESPACE_URL, name)))
    plant(api, [job])
    assert send(url, job.event()).status == 200
    tj = api.get(TRAINER, "TrainJob", job.namespace, job.name)
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=10)
    tj["metadata"]["annotations"] |= {keys.RELEASED_AT_ANNOTATION: long_ago.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                      keys.SCHEDULE_TIMEOUT_ANNOTATION: "60"}
    del tj["metadata"]["resourceVersion"]
    api.put(tj)
    return job


TIMEOUT_FAULTS = {
    # name: (the call that fails once, the fault, how many ScheduleTimeout Events at the end)
    "the PodGroup list fails": ("list", "podgroups", Fault(status=503), 1),
    "the pod list fails": ("list", "pods", Fault(status=500), 1),
    "the pod list hangs": ("list", "pods", Fault(hang=1.6), 1),
    "the suspend patch fails": ("patch", "trainjobs", Fault(status=503), 1),
    "the suspend patch is applied but its answer is lost": ("patch", "trainjobs", Fault(status=503, after=True), 1),
    # kai_fn gave up on the write, so it cannot know it landed: the Event may be lost (Events are best effort),
    # never doubled, and the TrainJob is timed out exactly once.
    "the suspend patch hangs past the timeout and lands late": ("patch", "trainjobs", Fault(hang=1.6), None),
}


@pytest.mark.parametrize("case", TIMEOUT_FAULTS, ids=list(TIMEOUT_FAULTS))
def test_a_fault_on_the_timeout_path_is_finished_by_the_next_ping_never_doubled(api, functions, case):
    verb, resource_, fault, events = TIMEOUT_FAULTS[case]
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    job = overdue_job(api, fn.url, str(list(TIMEOUT_FAULTS).index(case)))
    api.faults = on_first(verb, resource_, fault)
    assert send(fn.url, ping()).status == 200  # the resync itself is done; the timeout waits for the next ping
    settle(api)
    api.faults = None
    assert send(fn.url, ping()).status == 200
    tj = api.get(TRAINER, "TrainJob", job.namespace, job.name)
    assert tj["spec"]["suspend"] is True and keys.TIMED_OUT_ANNOTATION in tj["metadata"]["annotations"]
    versions = [v for v in api.history(TRAINER, "TrainJob", job.namespace, job.name) if v]
    suspended = [b for a, b in zip(versions, versions[1:]) if not a["spec"]["suspend"] and b["spec"]["suspend"]]
    assert len(suspended) == 1
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


def test_an_old_event_after_the_timeout_suspended_the_trainjob_changes_nothing(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    job = overdue_job(api, fn.url, "old-event")
    running = api.get(TRAINER, "TrainJob", job.namespace, job.name)  # as an update before the timeout saw it
    assert send(fn.url, ping()).status == 200
    api.reset_calls()
    assert send(fn.url, resource(running, "update")).status == 200
    assert api.calls == []
    assert api.get(TRAINER, "TrainJob", job.namespace, job.name)["spec"]["suspend"] is True


def test_a_stale_resume_cannot_restart_a_wait_that_has_timed_out_again_since(api, functions):
    fn = functions(KAI_FN_ON_TIMEOUT="suspend")
    job = overdue_job(api, fn.url, "stale-resume")
    assert send(fn.url, ping()).status == 200  # first timeout: suspended
    tj = api.get(TRAINER, "TrainJob", job.namespace, job.name)
    tj["spec"]["suspend"] = False
    del tj["metadata"]["resourceVersion"]
    first_resume = api.put(tj)
    assert send(fn.url, resource(first_resume, "update")).status == 200  # a new wait...
    tj = api.get(TRAINER, "TrainJob", job.namespace, job.name)
    tj["metadata"]["annotations"][keys.RELEASED_AT_ANNOTATION] = "2026-01-01T00:00:00Z"  # ...made overdue
    tj["metadata"]["annotations"][keys.TIMED_OUT_ANNOTATION] = "2025-12-31T00:00:00Z"
    del tj["metadata"]["resourceVersion"]
    api.put(tj)
    assert send(fn.url, ping()).status == 200  # second timeout: suspended again
    before = api.get(TRAINER, "TrainJob", job.namespace, job.name)
    assert before["spec"]["suspend"] is True
    assert send(fn.url, resource(first_resume, "update")).status == 200  # the first resume, delivered again
    assert api.get(TRAINER, "TrainJob", job.namespace, job.name) == before
    assert api.get(KAI_PG, "PodGroup", job.namespace, job.pg_name) is not None
