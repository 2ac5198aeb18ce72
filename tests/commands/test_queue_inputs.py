"""The Queue input of the gatherer (kai_fn/plan_inputs.py, ``queue_check``): the one read and judgement of a plan's gang
against KAI's Queues that the function's pre-check, ``status`` and ``explain`` share."""
from __future__ import annotations

from dataclasses import replace

import pytest

from kai_fn import plan_inputs
from kai_fn.commands.verdicts import ListedOnce
from kai_fn.core.models import Runtime, TrainJob, parse
from kai_fn.core.plan import plan
from kai_fn.core.queue_check import QueueTree
from kai_fn.kube import Transient
from tests.conftest import sample_object
from tests.core.test_queue_check import open_queue

PLANNED = plan(parse(TrainJob, sample_object("trainjob-llama-finetune")),
               parse(Runtime, sample_object("clustertrainingruntime-torch-kai")))
LEAF = PLANNED.queue


class Reader:
    """Queues as a cache and the API would answer them: ``cached`` first (the flag set), then ``fresh``."""

    def __init__(self, cached: list[dict] | None, fresh: list[dict]) -> None:
        self.cached, self.fresh, self.reads = cached, fresh, []

    def queues(self, fresh: bool = False) -> tuple[QueueTree, bool]:
        self.reads.append("fresh" if fresh or self.cached is None else "cached")
        if fresh or self.cached is None:
            return QueueTree.of(self.fresh), False
        return QueueTree.of(self.cached), True


# (the cache's Queues or no cache, the API's, the refusal's kind or None, the reads made)
CASES = {
    "the queue exists: no refusal, one read": (None, [open_queue(LEAF)], None, ["fresh"]),
    "it does not: refused": (None, [], "missing", ["fresh"]),
    "a cached refusal is confirmed on a fresh read": ([], [], "missing", ["cached", "fresh"]),
    "a cached refusal the fresh read lifts is no refusal": ([], [open_queue(LEAF)], None, ["cached", "fresh"]),
    "a cached pass is not read again": ([open_queue(LEAF)], [], None, ["cached"]),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_plans_gang_is_judged_against_the_queues_and_a_cached_refusal_confirmed(case):
    cached, fresh, kind, reads = CASES[case]
    reader = Reader(cached, fresh)
    tree, refusal = plan_inputs.queue_check(reader, PLANNED)
    assert tree is not None and (refusal.kind if refusal else None) == kind
    assert reader.reads == reads


def test_a_plan_that_names_no_queue_reads_none():
    reader = Reader(None, [])
    assert plan_inputs.queue_check(reader, replace(PLANNED, queue=None)) == (None, None)
    assert reader.reads == []


class Refusing:
    def queues(self):
        raise Transient("forbidden")


def test_queues_the_caller_may_not_list_leave_the_check_unmade():
    with pytest.raises(plan_inputs.Unread, match="cannot be listed"):
        ListedOnce(Refusing()).queues()
