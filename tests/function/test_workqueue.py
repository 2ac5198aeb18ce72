"""The work queue behind KAI_FN_BACKGROUND_WORKERS: one pass per TrainJob at a time, the newest event, bounded
retries, a bounded queue. In-process, with a work function the test controls; every wait bounded."""
from __future__ import annotations

import threading
import time

import pytest

from kai_fn.function.workqueue import Again, Item, WorkQueue


def until(check, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self, gate: threading.Event | None = None, fail: int = 0, error: Exception | None = None) -> None:
        self.seen: list[tuple[str, object, int]] = []
        self.running: dict[str, int] = {}
        self.overlap = False
        self.lock = threading.Lock()
        self.gate, self.fail, self.error = gate, fail, error
        self.dropped: list[tuple[Item, BaseException | None]] = []

    def work(self, item: Item) -> None:
        with self.lock:
            self.running[item.key] = self.running.get(item.key, 0) + 1
            self.overlap |= self.running[item.key] > 1
            self.seen.append((item.key, item.payload, item.attempt))
        try:
            if self.gate is not None:
                assert self.gate.wait(30)
            if self.error is not None:
                raise self.error
            if item.attempt <= self.fail:
                raise Again()
        finally:
            with self.lock:
                self.running[item.key] -= 1

    def drop(self, item: Item, error: BaseException | None) -> None:
        self.dropped.append((item, error))


def test_events_for_a_queued_trainjob_replace_its_entry_and_keep_its_place():
    gate = threading.Event()
    rec = Recorder(gate)
    queue = WorkQueue(rec.work, workers=1)
    queue.offer("busy", 0)  # holds the only worker
    until(lambda: rec.seen)
    for key, payload in (("a", 1), ("b", 1), ("a", 2), ("a", 3)):
        assert queue.offer(key, payload)
    gate.set()
    until(queue.idle)
    assert rec.seen == [("busy", 0, 1), ("a", 3, 1), ("b", 1, 1)]


def test_no_two_passes_of_one_trainjob_overlap_and_an_event_during_a_pass_gets_one_more_pass():
    gate = threading.Event()
    rec = Recorder(gate)
    queue = WorkQueue(rec.work, workers=4)
    queue.offer("a", 1)
    until(lambda: rec.seen)
    for payload in (2, 3, 4):
        queue.offer("a", payload)
    queue.offer("b", 1)  # queued after them: a worker takes it only past any "a" that could be taken
    until(lambda: len(rec.seen) >= 2)
    assert rec.seen == [("a", 1, 1), ("b", 1, 1)]  # three idle workers, none took "a"
    gate.set()
    until(queue.idle)
    assert sorted(rec.seen) == [("a", 1, 1), ("a", 4, 1), ("b", 1, 1)] and not rec.overlap


def test_a_failed_pass_is_tried_again_later_with_growing_delays_then_dropped():
    rec = Recorder(fail=10)
    queue = WorkQueue(rec.work, workers=2, tries=3, first_delay=0.05, on_drop=rec.drop)
    started = time.monotonic()
    queue.offer("a", 1)
    until(queue.idle)
    assert [attempt for _, _, attempt in rec.seen] == [1, 2, 3]
    assert time.monotonic() - started >= 0.05 + 0.1
    assert [(item.key, item.attempt, error) for item, error in rec.dropped] == [("a", 3, None)]


def test_a_pass_that_succeeds_on_a_later_try_is_not_dropped():
    rec = Recorder(fail=1)
    queue = WorkQueue(rec.work, workers=1, first_delay=0.01, on_drop=rec.drop)
    queue.offer("a", 1)
    until(lambda: queue.idle() and len(rec.seen) == 2)
    assert rec.dropped == [] and [a for _, _, a in rec.seen] == [1, 2]


def test_a_newer_event_replaces_a_waiting_retry():
    clock = Clock()
    rec = Recorder(fail=1)
    queue = WorkQueue(rec.work, workers=1, first_delay=0.3, on_drop=rec.drop, clock=clock)
    queue.offer("a", 1)
    until(lambda: queue.depth() == 1 and rec.seen and not rec.running.get("a"))
    rec.fail = 0
    queue.offer("a", 2)  # while the retry of 1 waits
    until(queue.idle)
    clock.now += 1  # the cancelled retry is due now
    queue.offer("z", 1)  # wakes the worker, which queues what is due before it takes "z"
    until(lambda: ("z", 1, 1) in rec.seen and queue.idle())
    assert rec.seen == [("a", 1, 1), ("a", 2, 1), ("z", 1, 1)]  # nothing ran for the cancelled retry


def test_a_full_queue_refuses_the_offer_and_a_known_trainjob_is_still_taken():
    gate = threading.Event()
    rec = Recorder(gate)
    queue = WorkQueue(rec.work, workers=1, capacity=2)
    assert queue.offer("a", 1)
    until(lambda: rec.seen)
    assert queue.offer("b", 1)
    assert not queue.offer("c", 1)  # a, b: full
    assert queue.offer("b", 2)  # already queued: replaced, not refused
    gate.set()
    until(queue.idle)
    assert [key for key, _, _ in rec.seen] == ["a", "b"]


@pytest.mark.parametrize("error", [RuntimeError("a bug"), KeyError("x")])
def test_an_unexpected_failure_is_dropped_with_its_error_and_the_worker_carries_on(error):
    rec = Recorder(error=error)
    queue = WorkQueue(rec.work, workers=1, on_drop=rec.drop)
    queue.offer("a", 1)
    until(queue.idle)
    assert [(item.key, err) for item, err in rec.dropped] == [("a", error)]
    rec.error = None
    queue.offer("b", 1)
    until(lambda: queue.idle() and len(rec.seen) == 2)
    assert rec.seen[-1] == ("b", 1, 1)


def test_drain_waits_for_the_work_in_hand_and_says_what_is_left_when_its_time_is_up():
    gate = threading.Event()
    rec = Recorder(gate)
    queue = WorkQueue(rec.work, workers=1)
    queue.offer("a", 1)
    queue.offer("b", 2)
    assert queue.drain(0.2) == 2  # the first pass is held at the gate: nothing finished
    threading.Timer(0.1, gate.set).start()
    assert queue.drain(5) == 0 and [key for key, _, _ in rec.seen] == ["a", "b"]


@pytest.mark.parametrize("offers, served", [
    # (namespace, name) keys offered while the one worker is busy, and the order they are then worked on
    ([("team-a", f"bad-{i}") for i in range(5)] + [("team-b", "good")],
     [("team-a", "bad-0"), ("team-b", "good"), ("team-a", "bad-1"), ("team-a", "bad-2"), ("team-a", "bad-3"),
      ("team-a", "bad-4")]),
    ([("a", "1"), ("a", "2"), ("b", "1"), ("c", "1"), ("b", "2")],
     [("a", "1"), ("b", "1"), ("c", "1"), ("a", "2"), ("b", "2")]),
    ([("a", "1"), ("a", "2"), ("a", "1")],
     [("a", "1"), ("a", "2")]),
], ids=["a thousand of one team's passes delay another team's by one", "namespaces in turn", "one lane, in order"])
def test_the_queue_serves_namespaces_in_turn_first_come_first_served_within_each(offers, served):
    gate = threading.Event()
    rec = Recorder(gate)
    queue = WorkQueue(rec.work, workers=1)
    queue.offer(("busy", "x"), 0)  # holds the only worker while the others queue
    until(lambda: rec.seen)
    for key in offers:
        assert queue.offer(key, 0)
    gate.set()
    until(queue.idle)
    assert [key for key, _, _ in rec.seen[1:]] == served


@pytest.mark.parametrize("offers, served", [
    # (name, urgent?) offered in one namespace while the one worker is busy; a key's merged offers are urgent if either is
    ([("a", False), ("b", False), ("c", True)], ["c", "a", "b"]),
    ([("a", False), ("b", True), ("a", True)], ["b", "a"]),
    ([("a", True), ("b", False), ("a", False)], ["a", "b"]),
    ([("a", False), ("b", False)], ["a", "b"]),
], ids=["a pass goes before looks queued earlier", "a look a pass joins moves behind the passes, before the looks",
        "a pass a look joins keeps its place", "looks alone, in order"])
def test_urgent_work_is_served_before_the_rest_of_its_lane(offers, served):
    gate = threading.Event()
    rec = Recorder(gate)
    queue = WorkQueue(rec.work, workers=1, urgent=bool, merge=lambda older, newer: older or newer)
    queue.offer("busy", True)  # holds the only worker while the others queue
    until(lambda: rec.seen)
    for name, urgent in offers:
        assert queue.offer(("team-a", name), urgent)
    gate.set()
    until(queue.idle)
    assert [key for (_, key), _, _ in rec.seen[1:]] == served
