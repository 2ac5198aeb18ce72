"""What the process remembers of its own work: only what makes a later event cost no call, never a wrong answer."""
from __future__ import annotations

from kai_fn.function.recent import Recent, older


def test_resource_versions_compare_as_apimachinery_does_length_first():
    assert older("9", "10") and older("99", "100") and older("123", "124")
    assert not older("124", "123") and not older("10", "10")


def test_a_copy_older_than_the_release_is_done_and_a_newer_one_is_not():
    recent = Recent()
    recent.released("uid-1", "120")
    assert recent.done_before("uid-1", "119")
    assert not recent.done_before("uid-1", "120")  # the released object itself carries the marker anyway
    assert not recent.done_before("uid-1", "121")  # changed since (re-suspended, say): decided afresh
    assert not recent.done_before("uid-2", "1")


def test_unreadable_resource_versions_are_never_taken_as_older():
    recent = Recent()
    recent.released("uid-1", "0120")
    recent.released("uid-2", None)
    recent.released("uid-3", "120")
    assert not recent.done_before("uid-1", "1") and not recent.done_before("uid-2", "1")
    assert not recent.done_before("uid-3", "x") and not recent.done_before("uid-3", "") and not recent.done_before(None, "1")


def test_memory_is_bounded_least_recently_used_first():
    recent = Recent(size=2)
    for uid in ("a", "b", "c"):
        recent.released(uid, "100")
        recent.bound(f"pg-{uid}")
    assert not recent.done_before("a", "1") and recent.done_before("c", "1")
    assert not recent.is_bound("pg-a") and recent.is_bound("pg-b") and recent.is_bound("pg-c")
