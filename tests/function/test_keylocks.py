"""One worker at a time on a TrainJob (kai_fn/function/keylocks.py): work on one key waits for the work under way on
it, work on another key does not, and the map keeps no lock once no one holds or waits for it."""
from __future__ import annotations

import threading

from kai_fn.function.keylocks import KeyLocks


def test_work_on_one_trainjob_waits_for_the_work_under_way_and_another_trainjob_does_not():
    locks = KeyLocks()
    inside, release = threading.Event(), threading.Event()
    order: list[str] = []

    def first() -> None:
        with locks.hold(("team-a", "llama")):
            inside.set()
            assert release.wait(30)
            order.append("first done")

    def same() -> None:
        with locks.hold(("team-a", "llama")):
            order.append("same key")

    worker = threading.Thread(target=first)
    worker.start()
    assert inside.wait(30)
    waiting = threading.Thread(target=same)
    waiting.start()
    with locks.hold(("team-b", "llama")):
        order.append("other key")  # not held up by the first
    release.set()
    for thread in (worker, waiting):
        thread.join(30)
    assert order == ["other key", "first done", "same key"]


def test_no_lock_is_kept_once_no_one_holds_or_waits_for_it():
    locks = KeyLocks()
    with locks.hold(("team-a", "x")), locks.hold(("team-a", "y")):
        assert len(locks) == 2
    assert len(locks) == 0
