"""The resync's turns (kai_fn/core/turns.py): ``limit`` at a time, after the last taken, wrapping around."""
from __future__ import annotations

from kai_fn.core.turns import order, turn


def made(name: str, second: int, namespace: str = "ns") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": f"2026-01-01T00:00:0{second}Z"}}


FOUND = [made("e", 4), made("a", 0), made("c", 2), made("b", 1), made("d", 3)]


def names(objs: list[dict]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def test_the_first_run_takes_the_oldest():
    assert names(turn(FOUND, 2, None)) == ["a", "b"]


def test_each_run_starts_after_the_last_one_taken_and_wraps_around():
    after, runs = None, []
    for _ in range(4):
        batch = turn(FOUND, 2, after)
        after = order(batch[-1])
        runs.append(names(batch))
    assert runs == [["a", "b"], ["c", "d"], ["e", "a"], ["b", "c"]]


def test_what_fits_is_all_taken_whatever_the_cursor():
    assert sorted(names(turn(FOUND, 50, order(made("c", 2))))) == ["a", "b", "c", "d", "e"]


def test_a_cursor_whose_object_is_gone_still_places_the_turn():
    assert names(turn(FOUND, 2, order(made("bb", 1)))) == ["c", "d"]


def test_same_second_is_ordered_by_namespace_then_name():
    assert names(turn([made("b", 0, "x"), made("a", 0, "y"), made("c", 0, "x")], 3, None)) == ["b", "c", "a"]
