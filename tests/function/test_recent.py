"""What the process remembers of its own work: only what makes a later event cost no call, never a wrong answer.

In the JobSet gate a TrainJob is remembered once this process decided its JobSet with nothing left to do (by uid:
any later event of it asks for work that is done), and forgotten when it owes kai_fn work again (the schedule
timeout suspended it); a PodGroup once its gang is known to be bound.
"""
from __future__ import annotations

import threading

import pytest

from kai_fn.function.recent import EARLY_BYTES, Recent


def test_a_decided_trainjob_is_remembered_by_uid_and_no_other_is():
    recent = Recent()
    recent.decided("uid-1")
    assert recent.is_decided("uid-1")
    assert not recent.is_decided("uid-2")


@pytest.mark.parametrize("uid", [None, ""], ids=["none", "empty"])
def test_a_trainjob_without_a_uid_is_never_taken_as_decided(uid):
    """Reference-mode events carry no uid: they are never answered from memory."""
    recent = Recent()
    recent.decided(uid)
    recent.decided("uid-1")
    assert not recent.is_decided(uid)
    assert recent.is_decided("uid-1")


def test_forgetting_a_trainjob_makes_its_next_event_a_pass_again_and_forgetting_an_unknown_one_is_harmless():
    recent = Recent()
    recent.decided("uid-1")
    recent.decided("uid-2")
    recent.forget("uid-1")
    recent.forget("uid-unknown")
    recent.forget(None)
    assert not recent.is_decided("uid-1")
    assert recent.is_decided("uid-2")


def test_bound_gangs_are_remembered_by_podgroup_uid_apart_from_decided_trainjobs():
    recent = Recent()
    recent.bound("pg-uid")
    recent.bound(None)
    assert recent.is_bound("pg-uid") and not recent.is_bound("other") and not recent.is_bound(None)
    assert not recent.is_decided("pg-uid")
    recent.decided("tj-uid")
    assert not recent.is_bound("tj-uid")


def test_memory_is_bounded_least_recently_used_first():
    recent = Recent(size=2)
    for uid in ("a", "b", "c"):
        recent.decided(uid)
        recent.bound(f"pg-{uid}")
    assert not recent.is_decided("a") and recent.is_decided("b") and recent.is_decided("c")
    assert not recent.is_bound("pg-a") and recent.is_bound("pg-b") and recent.is_bound("pg-c")


def test_deciding_again_makes_a_trainjob_the_most_recently_used():
    recent = Recent(size=2)
    recent.decided("a")
    recent.decided("b")
    recent.decided("a")  # a later pass found it decided again: it is the newest now
    recent.decided("c")
    assert recent.is_decided("a") and not recent.is_decided("b") and recent.is_decided("c")


def test_concurrent_use_from_many_threads_keeps_the_bound():
    recent = Recent(size=50)
    barrier = threading.Barrier(8, timeout=10)

    def work(worker: int) -> None:
        barrier.wait()
        for i in range(200):
            recent.decided(f"{worker}-{i}")
            recent.is_decided(f"{worker}-{i - 1}")
            recent.forget(f"{worker}-{i - 2}")

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "wall-clock guard: threads still running after 30 s"
    remembered = [f"{w}-{i}" for w in range(8) for i in range(200) if recent.is_decided(f"{w}-{i}")]
    assert 0 < len(remembered) <= 50
    assert all(uid.endswith(("-199", "-198")) for uid in remembered)


def test_a_gang_made_early_is_kept_without_managed_fields_or_status_and_taken_once():
    recent = Recent()
    trainjob = {"metadata": {"uid": "u1", "name": "a", "managedFields": [{"manager": "x"}]}, "spec": {"n": 1},
                "status": {"conditions": []}}
    recent.made_early("u1", trainjob, {"metadata": {"name": "pg-a-u1"}})
    assert recent.early("u1") == ({"metadata": {"uid": "u1", "name": "a"}, "spec": {"n": 1}},
                                  {"metadata": {"name": "pg-a-u1"}})
    assert recent.early("u1") is None


@pytest.mark.parametrize("spec_bytes, kept", [(1_000, True), (EARLY_BYTES, False)])
def test_a_trainjob_over_the_early_bound_is_not_kept_and_the_memory_holds_at_most_its_size(spec_bytes, kept):
    recent = Recent(early=2)
    for uid in ("u1", "u2", "u3"):
        recent.made_early(uid, {"metadata": {"uid": uid}, "spec": {"blob": "x" * spec_bytes}}, {"metadata": {}})
    assert [recent.early(uid) is not None for uid in ("u1", "u2", "u3")] == [False, kept, kept]


def test_a_gang_seen_named_is_kept_without_its_jobset_s_managed_fields_or_status_until_bound():
    recent = Recent()
    trainjob = {"metadata": {"uid": "u1", "name": "a"}, "spec": {"n": 1}}
    jobset = {"metadata": {"uid": "j1", "managedFields": [{"manager": "x"}]}, "spec": {"r": 2}, "status": {"s": 1}}
    recent.named("u1", trainjob, jobset)
    assert recent.known("u1") == recent.known("u1") == (trainjob, {"metadata": {"uid": "j1"}, "spec": {"r": 2}})
    recent.bound("pg-uid", "u1")
    assert recent.known("u1") is None and recent.is_bound("pg-uid")
    recent.named("u1", trainjob, jobset)
    recent.forget("u1")  # the schedule timeout suspended it
    assert recent.known("u1") is None


@pytest.mark.parametrize("spec_bytes, kept", [(1_000, True), (EARLY_BYTES, False)])
def test_a_jobset_over_the_early_bound_is_not_kept_and_the_named_memory_holds_at_most_its_size(spec_bytes, kept):
    recent = Recent(early=2)
    for uid in ("u1", "u2", "u3"):
        recent.named(uid, {"metadata": {"uid": uid}}, {"metadata": {}, "spec": {"blob": "x" * spec_bytes}})
    assert [recent.known(uid) is not None for uid in ("u1", "u2", "u3")] == [False, kept, kept]
