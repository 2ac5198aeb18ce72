"""Opt-in means opt-in (issue 39, item 3; attack 4): kai_fn acts only in namespaces labelled kai-fn.io/enabled=true,
and ``KAI_FN_NAMESPACES`` narrows that, never widens it; the labelled namespaces are read at most every few seconds."""
from __future__ import annotations

import pytest

from kai_fn.function.optin import SELECTOR, OptIn
from kai_fn.kube.errors import Transient
from kai_fn.settings import load


class Namespaces:
    """A fake session's namespace LIST: the labelled ones, counted; ``down`` makes it fail."""

    def __init__(self, *labelled: str) -> None:
        self.labelled, self.calls, self.down = list(labelled), 0, False

    def namespaces(self, selector: str) -> list[dict]:
        assert selector == SELECTOR
        self.calls += 1
        if self.down:
            raise Transient("API 503 on list")
        return [{"metadata": {"name": n, "labels": {"kai-fn.io/enabled": "true"}}} for n in self.labelled]


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    "allowlist,namespace,acts",
    [
        ("", "team-a", True),
        ("", "team-b", False),  # issue 39, attack 4: empty used to mean every namespace, opted in or not
        ("", "kube-system", False),
        ("team-a", "team-a", True),
        ("team-b", "team-b", False),  # the list never widens: team-b never opted in
        ("team-b", "team-a", False),  # and it narrows
    ],
    ids=["opted-in", "never-opted-in", "kube-system", "listed-and-opted-in", "listed-only", "opted-in-not-listed"],
)
def test_kai_fn_acts_only_where_a_namespace_opted_in_and_the_allowlist_narrows(allowlist, namespace, acts):
    optin = OptIn(load(KAI_FN_NAMESPACES=allowlist))
    assert optin.watches(Namespaces("team-a"), namespace) is acts


def test_the_labelled_namespaces_are_read_once_per_ttl_and_a_change_is_seen_after_it():
    clock, cluster = Clock(), Namespaces("team-a")
    optin = OptIn(load(), ttl=10, clock=clock)
    assert [optin.watches(cluster, "team-b") for _ in range(20)] == [False] * 20
    cluster.labelled.append("team-b")
    clock.now += 9.9
    assert optin.watches(cluster, "team-b") is False and cluster.calls == 1
    clock.now += 0.1
    assert optin.watches(cluster, "team-b") is True and cluster.calls == 2


def test_a_failed_list_keeps_the_last_answer_and_without_one_nothing_is_done():
    clock, cluster = Clock(), Namespaces("team-a")
    cold = OptIn(load(), clock=clock)
    cluster.down = True
    with pytest.raises(Transient, match="503"):
        cold.watches(cluster, "team-a")
    cluster.down = False
    assert cold.watches(cluster, "team-a") is True
    cluster.down, clock.now = True, clock.now + 60
    assert cold.watches(cluster, "team-a") is True and cold.watches(cluster, "team-b") is False
