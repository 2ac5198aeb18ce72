"""One keyed queue for every event of a TrainJob (issue 38, item 1; kai_fn/function/keywork.py): with workers, a
PodGroup event's look at the gang is its TrainJob's work in the queue, never beside a pass of it; what events
queue for one TrainJob collapses into one turn; a gang seen waiting sets its TrainJob's timer, which times it out
at the deadline without a resync; the resync only enqueues. The queue's timers in process, with a clock the test
moves; the rest through the real function server or in process, kmock emulator; every wait bounded.
"""
from __future__ import annotations

import threading
import time

import pytest

from kai_fn.core import keys
from kai_fn.function import events, keywork, resync
from kai_fn.function.cluster import CachedServer
from kai_fn.function.optin import OptIn
from kai_fn.function.workqueue import Again, WorkQueue
from kai_fn.local.emulator import Fault
from kai_fn.settings import load
from tests.ce import resource, send
from tests.conftest import JOBSET, KAI_PG, TRAINER
from tests.function.test_background_work import WORKERS, idle
from tests.function.test_function import NAME, NS
from tests.function.test_gang_status import OVER_LIMIT, fresh, kai_says, released, seed_held_llama
from tests.function.test_timeout_on_resync import ago, write
from tests.function.test_workqueue import Clock, Recorder, until


def pg_event(api, name: str, action: str = "update") -> events.PodGroupEvent:
    sample = resource(api.get(KAI_PG, "PodGroup", NS, name), action)
    event = events.parse(sample.headers, sample.body)
    assert isinstance(event, events.PodGroupEvent)
    return event


def parts(chores: keywork.Chores) -> list[str]:
    """What a turn does, by name (the PodGroups looked at by theirs)."""
    named = [f for f in ("trainjob", "gang", "overdue", "timer", "migrate") if getattr(chores, f)]
    return named + [f"look {e.name}" for e in chores.podgroups]


def run_after(api, uid: str, seconds: int) -> None:
    """JobSet's controller: the llama's JobSet running for ``seconds`` (its wait for the gang began then)."""
    js = api.get(JOBSET, "JobSet", NS, NAME)
    js["spec"]["suspend"] = False
    js["status"] = {"conditions": [{"type": "Suspended", "status": "False", "reason": "ResumeJobs",
                                    "lastTransitionTime": ago(seconds)}]}
    write(api, js)


def timeout_of(api, seconds: int) -> None:
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    tj["metadata"].setdefault("annotations", {})[keys.SCHEDULE_TIMEOUT_ANNOTATION] = str(seconds)
    write(api, tj)


# -- the queue's timers ---------------------------------------------------------------------------------------------

def test_a_timer_runs_its_key_at_the_time_asked_and_not_before_and_holds_no_place_in_the_depth():
    clock, recorder = Clock(), Recorder()
    queue = WorkQueue(recorder.work, 1, clock=clock)
    queue.offer_after("a", "timeout", 5.0)
    assert (queue.timers(), queue.depth()) == (1, 0)
    clock.now += 4.9
    queue.offer("z", 1)  # wakes the worker, which queues what is due before it takes "z"
    until(lambda: queue.idle() and len(recorder.seen) == 1)
    clock.now += 0.1
    queue.offer("z", 2)
    until(lambda: queue.idle() and len(recorder.seen) == 3)
    assert recorder.seen[0][:2] == ("z", 1)  # "a" not yet due
    assert sorted((k, p) for k, p, _ in recorder.seen[1:]) == [("a", "timeout"), ("z", 2)]
    assert queue.timers() == 0


@pytest.mark.parametrize("asks, forget, expected", [
    ([(5.0, "x")], False, [("a", "x")]),
    ([(5.0, "x"), (3.0, "y")], False, [("a", "x+y")]),  # one timer per key: the earliest, the payloads merged
    ([(3.0, "x"), (9.0, "y")], False, [("a", "x+y")]),
    ([(3.0, "x")], True, []),  # what it waited for happened
], ids=["one", "earlier-wins", "later-joins", "forgotten"])
def test_a_key_has_one_timer_at_the_earliest_time_asked_and_a_forgotten_one_never_fires(asks, forget, expected):
    clock, recorder = Clock(), Recorder()
    queue = WorkQueue(recorder.work, 1, clock=clock, merge=lambda older, newer: f"{older}+{newer}")
    for seconds, payload in asks:
        queue.offer_after("a", payload, seconds)
    if forget:
        queue.forget_timer("a")
    clock.now += min(s for s, _ in asks)
    queue.offer("z", "wake")
    until(lambda: queue.idle() and len(recorder.seen) == 1 + len(expected))
    assert [(k, p) for k, p, _ in recorder.seen if k != "z"] == expected and queue.timers() == 0


def test_again_with_a_payload_retries_only_that_part():
    clock = Clock()
    seen: list[object] = []

    def work(item):
        seen.append(item.payload)
        if item.key == "a" and item.attempt == 1:
            raise Again("the part that failed")

    queue = WorkQueue(work, 1, clock=clock, first_delay=1.0)
    queue.offer("a", "pass and look")
    until(lambda: len(seen) == 1 and queue.depth() == 1)
    clock.now += 1.0
    queue.offer("z", "wake")
    until(lambda: queue.idle() and len(seen) == 3)
    assert seen == ["pass and look", "wake", "the part that failed"]


# -- one turn per key -----------------------------------------------------------------------------------------------

def test_what_events_queue_for_one_trainjob_collapses_into_one_turn_that_does_all_of_it():
    gate = threading.Event()
    recorder = Recorder(gate)
    queue = WorkQueue(recorder.work, 1, merge=keywork.merge)
    pass_ = events.TrainJobEvent("e1", "update", "resource", NS, NAME)
    newer = events.TrainJobEvent("e2", "update", "resource", NS, NAME)
    look = events.PodGroupEvent("p1", "update", NS, "pg-a", "u1", {})
    stage = events.PodGroupEvent("p2", "update", NS, "pg-b", "u2", {})
    queue.offer(("busy", "x"), keywork.Chores())  # holds the only worker while the others queue
    for chores in (keywork.Chores(trainjob=pass_), keywork.Chores(podgroups=(look,)),
                   keywork.Chores(podgroups=(stage, look)), keywork.Chores(trainjob=newer),
                   keywork.Chores(timer=True)):
        assert queue.offer((NS, NAME), chores)
    assert queue.depth() == 2
    gate.set()
    until(queue.idle)
    (turn,) = [p for k, p, _ in recorder.seen if k == (NS, NAME)]
    assert parts(turn) == ["trainjob", "timer", "look pg-a", "look pg-b"] and turn.trainjob is newer


def test_a_trainjobs_pass_goes_before_the_looks_queued_in_its_namespace():
    """A burst: KAI's status writes on the first gangs' PodGroups queue looks; the next TrainJob's pass, which makes
    the PodGroup its pods wait for, is served first."""
    gate = threading.Event()
    recorder = Recorder(gate)
    queue = WorkQueue(recorder.work, 1, merge=keywork.merge, urgent=keywork.urgent)
    queue.offer(("busy", "x"), keywork.Chores())
    for i in range(3):
        look = events.PodGroupEvent(f"p{i}", "update", NS, f"pg-{i}", f"u{i}", {})
        assert queue.offer((NS, f"bound-{i}"), keywork.Chores(podgroups=(look,)))
    assert queue.offer((NS, "next"), keywork.Chores(trainjob=events.TrainJobEvent("e", "add", "resource", NS, "next")))
    gate.set()
    until(queue.idle)
    assert [k[1] for k, _, _ in recorder.seen[1:]] == ["next", "bound-0", "bound-1", "bound-2"]


def test_a_podgroup_event_never_runs_beside_a_pass_of_its_trainjob(api, functions):
    """The pass holds on its Event (the PodGroup made already); the PodGroup's event is answered 202 at once, and its
    look reads the PodGroup only once the pass has ended. On main it ran in the request thread: its read beside the
    pass, its answer after it."""
    worked = functions(**WORKERS, KAI_FN_API_TIMEOUT_SECONDS="60")
    uid = fresh()
    tj = seed_held_llama(api, uid)
    api.delete(JOBSET, "JobSet", NS, NAME)  # Trainer has not made it yet: the pass makes the gang, then says so
    passing, release = threading.Event(), threading.Event()

    def faults(call):
        if (call.verb, call.resource) == ("create", "events") and not release.is_set():
            passing.set()
            return Fault(until=release)
        return None

    api.reset_calls()
    api.faults = faults
    try:
        assert send(worked.url, resource(tj)).status == 202
        assert passing.wait(30), "wall-clock guard: the pass did not reach its Event"
        answers = []
        delivery = threading.Thread(target=lambda: answers.append(send(
            worked.url, resource(kai_says(api, OVER_LIMIT, name=f"pg-{NAME}-{uid}"), "update"))))
        delivery.start()
        delivery.join(10)
        during = [(c.verb, c.resource) for c in api.calls]
    finally:
        release.set()
        api.faults = None
    delivery.join(30)
    idle(worked.url)
    assert [(a.status, a.headers.get("X-Kai-Fn-Outcome")) for a in answers] == [(202, "accepted")]
    assert ("get", "podgroups") not in during
    calls = [(c.verb, c.resource) for c in api.calls]
    assert calls.index(("get", "podgroups")) > calls.index(("create", "events"))


def test_a_gang_seen_waiting_is_timed_out_at_its_deadline_by_its_timer_without_a_resync(api, functions):
    worked = functions(**WORKERS)
    uid = fresh()
    tj = seed_held_llama(api, uid)
    assert send(worked.url, resource(tj)).status == 202
    idle(worked.url)
    timeout_of(api, 2)
    run_after(api, uid, 0)
    api.reset_calls()
    pg = kai_says(api, OVER_LIMIT, name=f"pg-{NAME}-{uid}")
    assert send(worked.url, resource(pg, "update")).status == 202
    end = time.monotonic() + 20
    while keys.TIMED_OUT_ANNOTATION not in (api.get(KAI_PG, "PodGroup", NS, pg["metadata"]["name"])["metadata"]
                                            .get("annotations") or {}):
        assert time.monotonic() < end, "wall-clock guard: the timer did not time the gang out in 20 s"
        time.sleep(0.05)
    assert [e["reason"] for e in api.list("v1", "Event", NS) if e["reason"] == "ScheduleTimeout"] == ["ScheduleTimeout"]
    assert ("list", "trainjobs") not in [(c.verb, c.resource) for c in api.calls]  # no resync ran


# -- the resync only enqueues ---------------------------------------------------------------------------------------

class Offers:
    """A work queue that records what it is offered."""

    def __init__(self) -> None:
        self.now: list[tuple[object, keywork.Chores]] = []
        self.later: list[tuple[object, keywork.Chores, float]] = []

    def offer(self, key, chores) -> bool:
        self.now.append((key, chores))
        return True

    def offer_after(self, key, chores, seconds) -> None:
        self.later.append((key, chores, seconds))


LISTS_ONLY = {("list", "namespaces"), ("list", "trainjobs"), ("list", "jobsets"), ("list", "podgroups")}


@pytest.mark.parametrize("state, now, later", [
    ("held", [["trainjob"]], []),
    ("waiting", [["gang"]], [["timer"]]),
    ("overdue", [["gang"], ["overdue"]], []),
])
def test_the_resync_with_workers_enqueues_each_trainjobs_work_and_does_none_of_it(api, function, emulator, state,
                                                                                   now, later):
    uid = fresh()
    if state == "held":
        seed_held_llama(api, uid)
    else:
        released(api, function.url, uid)
        timeout_of(api, 600)
        run_after(api, uid, 10 if state == "waiting" else 700)
    settings = load(KUBECONFIG=emulator.kubeconfig)
    cluster = CachedServer.from_settings(settings, emulator.kubeconfig)
    offers = Offers()
    api.reset_calls()
    resync.resync(cluster.session(), settings, OptIn(settings), offers)
    assert {(c.verb, c.resource) for c in api.calls if c.resource != "leases"} <= LISTS_ONLY
    assert [parts(c) for _, c in offers.now] == now and {k for k, _ in offers.now} <= {(NS, NAME)}
    assert [parts(c) for _, c, _ in offers.later] == later
    assert all(580 < seconds <= 590 for _, _, seconds in offers.later)
