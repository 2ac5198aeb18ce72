"""A pass's first reads (kai_fn/function/first_reads.py): with delivery authenticated, the TrainJob, its JobSet and
the cold caches' reads are made at once, so the PodGroup's create waits for the slowest of them, not their sum;
unauthenticated, one at a time. The body only warms caches: the plan is the live TrainJob's."""
from __future__ import annotations

import threading
import time

import pytest

from kai_fn.local.emulator.faults import Fault
from tests.ce import resource, send
from tests.conftest import KAI_PG, TRAINER, opt_in_read, sample_object, seed

pytestmark = pytest.mark.usefixtures("forgetful")

NS, NAME = "team-a", "llama-finetune"
AUDIENCE = "kai-fn"
SOURCE = ("kai-fn", "kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource")
HELD_READ = ("get", "trainjobs")
BESIDE = {("get", "jobsets"), ("get", "clustertrainingruntimes"), ("list", "queues")}


def seed_new(api) -> dict:
    """llama-finetune just submitted: Trainer has not made its JobSet yet."""
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         sample_object("trainjob-llama-finetune"))
    return api.get(TRAINER, "TrainJob", NS, NAME)


def seen_while_held(api, event, url, token) -> tuple[set[tuple[str, str]], object]:
    """What the pass asked for while its TrainJob GET was held (up to 10 s for the reads beside it), then its
    answer once let go."""
    release = threading.Event()
    api.faults = lambda call: Fault(until=release) if (call.verb, call.resource) == HELD_READ else None
    answers: list[object] = []
    sender = threading.Thread(target=lambda: answers.append(send(url, event, token=token)))
    sender.start()
    seen: set[tuple[str, str]] = set()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not seen >= BESIDE:
            seen = {(c.verb, c.resource) for c in api.calls
                    if not opt_in_read(c) and c.resource != "tokenreviews"}
            time.sleep(0.05)
    finally:
        release.set()
        sender.join(30)
        api.faults = None
    assert not sender.is_alive(), "wall-clock guard: the delivery still running 30 s after its read was let go"
    return seen, answers[0]


def test_an_authenticated_pass_reads_its_jobset_and_cold_caches_while_its_trainjob_read_is_in_flight(api, functions):
    fn = functions(KAI_FN_AUDIENCE=AUDIENCE, KAI_FN_RUNTIME_CACHE_SECONDS="30")
    tj = seed_new(api)
    api.reset_calls()
    seen, answer = seen_while_held(api, resource(tj), fn.url, api.issue_token(*SOURCE, audiences=[AUDIENCE]))
    assert seen == BESIDE | {HELD_READ}  # all four asked for before the TrainJob's answer; no write yet
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    assert [p["metadata"]["name"] for p in api.list(KAI_PG, "PodGroup", NS)] == [
        f"pg-{NAME}-{tj['metadata']['uid']}"]


def test_an_unauthenticated_pass_reads_nothing_else_until_its_trainjob_is_read(api, functions):
    """Anyone may send a body there: one forged event buys one read, not several."""
    fn = functions(KAI_FN_RUNTIME_CACHE_SECONDS="30")
    tj = seed_new(api)
    api.reset_calls()
    answer = send(fn.url, resource(tj))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    calls = [(c.verb, c.resource) for c in api.calls if not opt_in_read(c)]
    assert calls[0] == HELD_READ and set(calls[1:4]) == BESIDE  # the TrainJob's answer first, then the rest


def test_a_body_naming_another_runtime_warms_that_runtime_and_the_gang_is_planned_from_the_live_trainjob(
        api, functions):
    fn = functions(KAI_FN_AUDIENCE=AUDIENCE, KAI_FN_RUNTIME_CACHE_SECONDS="30")
    tj = seed_new(api)
    forged = {**tj, "spec": {**tj["spec"], "runtimeRef": {**tj["spec"]["runtimeRef"], "name": "torch-elsewhere"}}}
    api.reset_calls()
    answer = send(fn.url, resource(forged), token=api.issue_token(*SOURCE, audiences=[AUDIENCE]))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    runtimes = [c.name for c in api.calls if c.resource == "clustertrainingruntimes"]
    assert sorted(runtimes) == sorted(["torch-elsewhere", tj["spec"]["runtimeRef"]["name"]])  # warmed; the live one
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    assert pg["spec"]["minMember"] == 4 and pg["spec"]["queue"] == "team-a"


def test_with_its_runtime_cached_a_pass_warms_nothing(api, functions):
    fn = functions(KAI_FN_AUDIENCE=AUDIENCE, KAI_FN_RUNTIME_CACHE_SECONDS="30")
    tj = seed_new(api)
    token = api.issue_token(*SOURCE, audiences=[AUDIENCE])
    assert send(fn.url, resource(tj), token=token).status == 200
    again = {**sample_object("trainjob-llama-finetune"),
             "metadata": {**tj["metadata"], "name": "llama-2", "uid": "0a1b2c3d-0000-4000-8000-000000000002"}}
    for key in ("resourceVersion", "creationTimestamp"):
        again["metadata"].pop(key, None)
    seed(api, again)
    api.reset_calls()
    assert send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, "llama-2")), token=token).status == 200
    reads = sorted((c.verb, c.resource) for c in api.calls if c.verb in ("get", "list") and not opt_in_read(c))
    assert reads == [("get", "jobsets"), ("get", "trainjobs")]
