"""The look at a gang this process made early and saw named (kai_fn/function/gang_status.py, ``known``): with delivery
authenticated, the PodGroup update's body stands for the PodGroup and the TrainJob and JobSet are taken as the pass
and the JobSet's add saw them, so GangBound costs a pod list and its two writes; anything else reads as before."""
from __future__ import annotations

import copy

import pytest

from tests.ce import resource, send
from tests.conftest import KAI_PG
from tests.function.test_gang_status import OVER_LIMIT, bound_mark, kai_counts, place, status_events
from tests.function.test_jobset_seen import AUDIENCE, CACHED, JOBSETS, NS, TRAINJOBS, calls, gang_made_before_its_jobset

pytestmark = pytest.mark.usefixtures("forgetful")

PODGROUPS = ("kai-fn", "kai-fn-podgroups-oidc-sources.knative.dev-apiserversource")
BOUND_WRITES = [("create", "events"), ("list", "pods"), ("patch", "podgroups")]
READS = {("get", "podgroups"), ("get", "trainjobs"), ("get", "jobsets")}


def token(api, sender) -> str:
    return api.issue_token(*sender, audiences=[AUDIENCE])


def named_and_placed(api, fn, *, add_seen: bool = True, reasons: tuple = ()) -> dict:
    """llama-finetune's gang made from its add, its named JobSet's add delivered (unless told), its four pods on
    nodes; the PodGroup as KAI's podgroupcontroller then writes it (with ``reasons`` from the scheduler)."""
    jobset = gang_made_before_its_jobset(api, fn, token(api, TRAINJOBS))
    if add_seen:
        answer = send(fn.url, resource(jobset), token=token(api, JOBSETS))
        assert answer.headers.get("X-Kai-Fn-Outcome") == "skipped"
    place(api, 4, 4)
    pg = kai_counts(api, {"nvidia.com/gpu": "8"})
    if reasons:
        pg["status"]["schedulingConditions"] = [{"type": "UnschedulableOnNodePool", "nodePool": "default",
                                                 "status": "True", "reasons": list(reasons)}]
        pg = api.put(pg)
    return pg


def test_a_gang_made_early_and_seen_named_is_reported_bound_with_its_pods_listed_and_nothing_else_read(api, functions):
    fn = functions(KAI_FN_AUDIENCE=AUDIENCE, **CACHED)
    pg = named_and_placed(api, fn)
    api.reset_calls()
    answer = send(fn.url, resource(pg, "update"), token=token(api, PODGROUPS))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    assert calls(api) == BOUND_WRITES
    assert status_events(api) == ["GangBound"] and bound_mark(api) is not None
    api.reset_calls()
    again = send(fn.url, resource(api.get(KAI_PG, "PodGroup", NS, pg["metadata"]["name"]), "update"),
                 token=token(api, PODGROUPS))
    assert again.headers.get("X-Kai-Fn-Outcome") == "skipped" and calls(api) == []


UNKNOWN = {
    "its JobSet's add not seen by this process": dict(add_seen=False),
    "a body carrying KAI's reasons (an unschedulable report reads the PodGroup now)": dict(reasons=(OVER_LIMIT,)),
    "delivered by another process": dict(other=True),
}


@pytest.mark.parametrize("case", UNKNOWN.values(), ids=list(UNKNOWN))
def test_a_gang_this_process_did_not_see_named_is_read_before_it_is_reported(api, functions, case):
    fn = functions(KAI_FN_AUDIENCE=AUDIENCE, **CACHED)
    other = functions(KAI_FN_AUDIENCE=AUDIENCE, KAI_FN_THREADS="7", **CACHED) if case.get("other") else fn
    pg = named_and_placed(api, fn, add_seen=case.get("add_seen", True), reasons=case.get("reasons", ()))
    api.reset_calls()
    answer = send(other.url, resource(pg, "update"), token=token(api, PODGROUPS))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    assert set(calls(api)) >= READS
    assert status_events(api) == ["GangBound"] and bound_mark(api) is not None


def test_a_body_of_another_trainjob_s_gang_is_not_taken_for_the_one_remembered(api, functions):
    """The memory is found by the owner's uid in the body; a body naming that uid on a PodGroup that is not the
    TrainJob's main one (here: renamed) is read, and the look finds no such PodGroup."""
    fn = functions(KAI_FN_AUDIENCE=AUDIENCE, **CACHED)
    pg = named_and_placed(api, fn)
    other = copy.deepcopy(pg)
    other["metadata"]["name"] = "pg-someone-else"
    api.reset_calls()
    answer = send(fn.url, resource(other, "update"), token=token(api, PODGROUPS))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "ignored")
    assert calls(api) == [("get", "podgroups")] and status_events(api) == []
