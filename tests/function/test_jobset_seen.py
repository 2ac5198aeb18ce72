"""A named JobSet's add after this process made its gang from the TrainJob's event (kai_fn/function/jobset_seen.py):
with delivery authenticated and the body the plan's, it costs no read; anything else is the pass's, which reads."""
from __future__ import annotations

import pytest

from tests.builders import named_jobset_for
from tests.ce import resource, send
from tests.conftest import JOBSET, KAI_PG, TRAINER, sample_object, seed

pytestmark = pytest.mark.usefixtures("forgetful")

NS, NAME = "team-a", "llama-finetune"
AUDIENCE = "kai-fn"
TRAINJOBS = ("kai-fn", "kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource")
JOBSETS = ("kai-fn", "kai-fn-jobsets-oidc-sources.knative.dev-apiserversource")
PASS_READS = [("get", "jobsets"), ("get", "podgroups"), ("get", "trainjobs")]


def gang_made_before_its_jobset(api, fn, token: str | None) -> dict:
    """llama-finetune's gang, made from its add before Trainer made the JobSet; then Trainer makes it, named."""
    runtime = sample_object("clustertrainingruntime-torch-kai")
    seed(api, sample_object("queue-team-a"), runtime, sample_object("trainjob-llama-finetune"))
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    answer = send(fn.url, resource(tj), token=token)
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    seed(api, named_jobset_for(tj, runtime))
    return api.get(JOBSET, "JobSet", NS, NAME)


def calls(api) -> list[tuple[str, str]]:
    return sorted((c.verb, c.resource) for c in api.calls if c.resource not in ("tokenreviews", "namespaces"))


def object_reads(api) -> list[tuple[str, str]]:
    """The pass's reads of the TrainJob, its JobSet and its PodGroup (a runtime is read when a cache is cold)."""
    return [c for c in calls(api) if c[1] in ("trainjobs", "jobsets", "podgroups")]


CACHED = {"KAI_FN_RUNTIME_CACHE_SECONDS": "30"}  # as deployed: a runtime is read once, not per pass


def test_its_add_is_answered_from_the_pass_that_made_the_gang_with_no_call(api, functions):
    fn = functions(KAI_FN_AUDIENCE=AUDIENCE, **CACHED)
    jobset = gang_made_before_its_jobset(api, fn, api.issue_token(*TRAINJOBS, audiences=[AUDIENCE]))
    api.reset_calls()
    answer = send(fn.url, resource(jobset), token=api.issue_token(*JOBSETS, audiences=[AUDIENCE]))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped")
    assert calls(api) == []
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    assert pg["metadata"]["name"] == f"pg-{NAME}-{jobset['metadata']['ownerReferences'][0]['uid']}"
    again = send(fn.url, resource(jobset, "update"), token=api.issue_token(*JOBSETS, audiences=[AUDIENCE]))
    assert again.headers.get("X-Kai-Fn-Outcome") == "skipped" and calls(api) == []  # remembered as decided


def test_a_body_unlike_the_plan_goes_to_the_pass_which_reads_and_warns(api, functions):
    fn = functions(KAI_FN_AUDIENCE=AUDIENCE, **CACHED)
    jobset = gang_made_before_its_jobset(api, fn, api.issue_token(*TRAINJOBS, audiences=[AUDIENCE]))
    unlike = api.get(JOBSET, "JobSet", NS, NAME)
    unlike["spec"]["replicatedJobs"][0]["replicas"] = 7  # as the API server has it now, and as the body says
    api.put(unlike)
    api.reset_calls()
    answer = send(fn.url, resource(api.get(JOBSET, "JobSet", NS, NAME)),
                  token=api.issue_token(*JOBSETS, audiences=[AUDIENCE]))
    assert answer.status == 200 and object_reads(api) == PASS_READS
    assert [e["reason"] for e in api.list("v1", "Event", NS) if e.get("type") == "Warning"] == ["JobSetMismatch"]
    assert jobset["metadata"]["uid"] == unlike["metadata"]["uid"]


@pytest.mark.parametrize("who", ["unauthenticated", "another process"])
def test_without_the_memory_or_an_authenticated_sender_its_add_is_the_pass_s_reads(api, functions, who):
    if who == "unauthenticated":
        fn = other = functions(**CACHED)
        token = None
    else:
        fn = functions(KAI_FN_AUDIENCE=AUDIENCE, **CACHED)
        other = functions(KAI_FN_AUDIENCE=AUDIENCE, KAI_FN_THREADS="7", **CACHED)  # its own process
        token = api.issue_token(*TRAINJOBS, audiences=[AUDIENCE])
    jobset = gang_made_before_its_jobset(api, fn, token)
    api.reset_calls()
    sender = api.issue_token(*JOBSETS, audiences=[AUDIENCE]) if token else None
    answer = send(other.url, resource(jobset), token=sender)
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped")
    assert object_reads(api) == PASS_READS
    assert [c for c in api.writes() if c.resource != "tokenreviews"] == []
