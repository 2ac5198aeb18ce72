"""Refused TrainJobs back off from the resync (kai_fn/function/backoff.py; issue 39, attack 5): a tenant's many
TrainJobs with an invalid annotation cost one pass each, then nothing until their back-off is over, so every ping
does not redo them all; one fixed (changed) is due at once; a pass that makes the gang forgets it."""
from __future__ import annotations

import uuid

import pytest

from kai_fn.function.backoff import Backoff
from tests.builders import named_jobset_for
from tests.ce import ping, resource, send
from tests.conftest import KAI_PG, TRAINER, sample_object, seed

pytestmark = pytest.mark.usefixtures("forgetful")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


KEY = ("team-a", "tj", "uid-1")


@pytest.mark.parametrize("steps, due", [
    # (seconds passed before each recorded result, result) in order, then: is the TrainJob due at the end?
    ([], True),
    ([(0, "blocked")], False),
    ([(0, "blocked"), (60, None)], True),
    ([(0, "blocked"), (60, "blocked"), (119, None)], False),  # the second failure waits 120 s
    ([(0, "blocked"), (60, "blocked"), (120, None)], True),
    ([(0, "error"), (0, "done")], True),  # the gang made: forgotten
    ([(0, "blocked"), (0, "ignored")], True),  # gone, or no longer kai_fn's
    ([(0, "retry")], True),  # the API failed the pass, not the TrainJob
    ([(0, "skipped")], True),  # a wait its author asked for is no failure
    ([(0, "blocked")] * 20 + [(600, None)], True),  # at most 10 minutes, however many in a row
], ids=["never seen", "refused once", "after a minute", "second refusal: not yet", "second refusal: 2 minutes",
        "made", "ignored", "retry", "skipped", "capped"])
def test_a_refusal_backs_off_doubling_and_a_made_gang_forgets_it(steps, due):
    clock = Clock()
    backoff = Backoff(first=60, cap=600, clock=clock)
    for passed, result in steps:
        clock.now += passed
        if result is not None:
            backoff.record(KEY, result, "7")
    assert backoff.due(KEY, "7") is due


@pytest.mark.parametrize("version, due", [("7", False), ("8", True), ("", False)],
                         ids=["unchanged", "changed since: its author may have fixed it", "version unknown"])
def test_a_trainjob_changed_since_its_refusal_is_due_at_once(version, due):
    backoff = Backoff(first=60, clock=Clock())
    backoff.record(KEY, "blocked", "7")
    assert backoff.due(KEY, version) is due


def test_the_memory_is_bounded_the_longest_unseen_forgotten_first():
    backoff = Backoff(first=60, size=2, clock=Clock())
    for i in range(3):
        backoff.record(("ns", f"tj-{i}", "u"), "blocked")
    assert [backoff.due(("ns", f"tj-{i}", "u")) for i in range(3)] == [True, False, False]


def bad_trainjob(i: int, runtime: dict) -> tuple[dict, dict]:
    """A TrainJob of team-a whose schedule timeout is not a number (refused: PlanBlocked), with its JobSet as
    Trainer made it and the admission policy named it."""
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"].update(name=f"bad-{i}", uid=str(uuid.uuid4()))
    tj["metadata"].setdefault("annotations", {})["kai-fn/schedule-timeout-seconds"] = "soon"
    return tj, named_jobset_for(tj, runtime, uid=str(uuid.uuid4()))


def per_trainjob_calls(api) -> list[tuple[str, str]]:
    """The calls a resync made for single TrainJobs: everything but its LISTs and the heartbeat."""
    return [(c.verb, c.resource) for c in api.calls if c.verb != "list" and c.resource != "leases"]


def test_a_tenants_refused_trainjobs_cost_one_pass_then_nothing_until_their_back_off_is_over(api, functions):
    fn = functions(KAI_FN_RESYNC_LIMIT="100")
    runtime = sample_object("clustertrainingruntime-torch-kai")
    bad = [o for i in range(20) for o in bad_trainjob(i, runtime)]
    seed(api, sample_object("queue-team-a"), runtime, *bad)

    assert send(fn.url, ping()).status == 200
    refused = {e["involvedObject"]["name"] for e in api.list("v1", "Event", "team-a")
               if e.get("reason") == "PlanBlocked"}
    assert refused == {f"bad-{i}" for i in range(20)}

    api.reset_calls()
    assert send(fn.url, ping()).status == 200
    assert per_trainjob_calls(api) == []  # on main: a GET and an Event for each of the 20, every ping
    assert api.list(KAI_PG, "PodGroup", "team-a") == []

    fixed = api.get(TRAINER, "TrainJob", "team-a", "bad-3")
    fixed["metadata"]["annotations"]["kai-fn/schedule-timeout-seconds"] = "3600"
    del fixed["metadata"]["resourceVersion"]
    api.put(fixed)  # its author fixed it (a write: a new resourceVersion); the event of that is lost
    assert send(fn.url, ping()).status == 200
    assert [p["metadata"]["name"] for p in api.list(KAI_PG, "PodGroup", "team-a")] == [
        f"pg-bad-3-{fixed['metadata']['uid']}"]


def test_an_event_of_a_refused_trainjob_is_worked_on_at_once(api, functions):
    fn = functions(KAI_FN_RESYNC_LIMIT="100")
    runtime = sample_object("clustertrainingruntime-torch-kai")
    tj, js = bad_trainjob(0, runtime)
    seed(api, sample_object("queue-team-a"), runtime, tj, js)
    assert send(fn.url, ping()).status == 200
    answer = send(fn.url, resource(api.get(TRAINER, "TrainJob", "team-a", "bad-0"), "update"))
    assert answer.headers.get("X-Kai-Fn-Outcome") == "blocked"  # worked on, not left to the back-off
