"""Authenticated delivery, end to end: the real function server, its TokenReviews answered by the emulator.

With KAI_FN_AUDIENCE set, a POST without a valid ServiceAccount token for that audience is 401, one from a sender
outside KAI_FN_SENDERS is 403, and neither costs any API call but the TokenReview. Without it, an event's body is
never what the function acts on: it reads the TrainJob first (a held JobSet's event carries no TrainJob: it is
always read).
"""
from __future__ import annotations

import base64
import json
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from kai_fn.local.process import FunctionProcess
from tests.ce import ping, resource, send
from tests.conftest import JOBSET, KAI_PG, TRAINER, opt_in_read, sample_object, seed
from tests.builders import held_by_0_2

NS, NAME = "team-a", "llama-finetune"
AUDIENCE = "kai-fn"
SOURCE = ("kai-fn", "kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource")
SENDER = f"system:serviceaccount:{SOURCE[0]}:{SOURCE[1]}"
REVIEW = ("create", "tokenreviews")


# A test that decides llama-finetune's JobSet restarts the servers after it (fixture forgetful): the next test seeds
# the same uid, and a process remembers the uids whose JobSet it decided.
forgetful = pytest.mark.usefixtures("forgetful")


@pytest.fixture
def secured(functions, api):
    return functions(KAI_FN_AUDIENCE=AUDIENCE, KAI_FN_SENDERS=SENDER)


def seed_llama(api) -> dict:
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         sample_object("trainjob-llama-finetune"), held_by_0_2(sample_object("jobset-llama-finetune")))
    return api.get(TRAINER, "TrainJob", NS, NAME)


def still_held(api) -> bool:
    """As the admission policy left llama-finetune's JobSet, and its TrainJob never written."""
    js = api.get(JOBSET, "JobSet", NS, NAME)
    return (js["spec"]["suspend"] is True and js["metadata"]["labels"].get("kai-fn/held") == "true"
            and "kai-fn/podgroup" not in (js["metadata"].get("annotations") or {})
            and not [c for c in api.writes() if c.resource == "trainjobs"])


def decided(api) -> bool:
    js = api.get(JOBSET, "JobSet", NS, NAME)
    return (js["spec"]["suspend"] is False and "kai-fn/held" not in js["metadata"]["labels"]
            and "kai-fn/podgroup" in (js["metadata"].get("annotations") or {})
            and not [c for c in api.writes() if c.resource == "trainjobs"])


def verbs(api) -> list[tuple[str, str]]:
    """The calls made since the log was reset, but the opted-in namespaces' LIST (no read of the event's object)."""
    return [(c.verb, c.resource) for c in api.calls if not opt_in_read(c)]


def forged_jwt() -> str:
    """JWT-shaped, so only a TokenReview can tell it is not a real token; fresh, so no cache has seen it."""
    return f"eyJhbGciOiJSUzI1NiJ9.{uuid.uuid4().hex}.{uuid.uuid4().hex}"


AUTHORIZATIONS = [
    # (id, Authorization header or a recipe for it, status, calls)
    ("missing", None, 401, []),
    ("bearer-alone", "Bearer", 401, []),
    ("bearer-blank", "Bearer  ", 401, []),
    ("basic", "Basic x", 401, []),
    ("garbage", "Bearer !!not a token!!", 401, []),
    ("forged-jwt", lambda api: f"Bearer {forged_jwt()}", 401, [REVIEW]),
    ("wrong-audience", lambda api: f"Bearer {api.issue_token(*SOURCE, audiences=['other'])}", 401, [REVIEW]),
    ("expired", lambda api: f"Bearer {api.issue_token(*SOURCE, audiences=[AUDIENCE], seconds=-1)}", 401, [REVIEW]),
    ("other-sender", lambda api: f"Bearer {api.issue_token('team-a', 'default', audiences=[AUDIENCE])}", 403,
     [REVIEW]),
]


@pytest.mark.parametrize("header,status,calls", [a[1:] for a in AUTHORIZATIONS], ids=[a[0] for a in AUTHORIZATIONS])
@pytest.mark.parametrize("event", ["trainjob", "jobset", "resync"])
def test_a_sender_not_let_in_gets_401_or_403_and_costs_no_call_but_the_review(api, secured, header, status, calls,
                                                                              event):
    tj = seed_llama(api)
    events = {"trainjob": resource(tj), "jobset": resource(api.get(JOBSET, "JobSet", NS, NAME)), "resync": ping()}
    api.reset_calls()
    authorization = header(api) if callable(header) else header
    answer = send(secured.url, events[event], authorization=authorization)
    assert answer.status == status
    assert answer.body.count("\n") == 1 and "Bearer ey" not in answer.body
    named = {name.lower(): value for name, value in answer.headers.items()}  # a header's name has no case
    assert (named.get("www-authenticate") == "Bearer") is (status == 401)
    assert verbs(api) == calls
    assert still_held(api)


@forgetful
def test_the_right_sender_is_served_from_the_trainjob_read_with_kai_fns_identity_not_from_its_body(api, secured):
    tj = seed_llama(api)
    api.reset_calls()
    answer = send(secured.url, resource(tj), token=api.issue_token(*SOURCE, audiences=[AUDIENCE]))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "done")
    calls = verbs(api)  # the reads are made at once (kai_fn/function/first_reads.py): in any order
    assert calls[0] == REVIEW and sorted(calls[1:5]) == [
        ("get", "clustertrainingruntimes"), ("get", "jobsets"), ("get", "trainjobs"), ("list", "queues")]
    assert calls[5:] == [("create", "podgroups"), ("patch", "jobsets"), ("create", "events")]
    assert decided(api)


@forgetful
def test_the_right_sender_of_a_held_jobsets_event_is_served_after_one_read_of_its_trainjob(api, secured):
    """A JobSet event carries no TrainJob: the pass reads it, whoever sent the event."""
    seed_llama(api)
    api.reset_calls()
    answer = send(secured.url, resource(api.get(JOBSET, "JobSet", NS, NAME)),
                  token=api.issue_token(*SOURCE, audiences=[AUDIENCE]))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "done")
    calls = verbs(api)  # its TrainJob and itself, read at once
    assert calls[0] == REVIEW and sorted(calls[1:3]) == [("get", "jobsets"), ("get", "trainjobs")]
    assert decided(api)


@forgetful
def test_with_no_senders_listed_only_knative_bases_sources_are_served_and_any_other_service_account_is_403(
        api, functions):
    fn = functions(KAI_FN_AUDIENCE=AUDIENCE)
    tj = seed_llama(api)
    api.reset_calls()
    answer = send(fn.url, resource(tj), token=api.issue_token("team-a", "default", audiences=[AUDIENCE]))
    assert answer.status == 403 and "not in KAI_FN_SENDERS" in answer.body
    assert verbs(api) == [REVIEW] and still_held(api)
    assert send(fn.url, resource(tj), token=api.issue_token(*SOURCE, audiences=[AUDIENCE])).status == 200
    assert decided(api)


@forgetful
def test_a_stream_of_events_with_one_token_costs_one_review(api, secured):
    tj = seed_llama(api)
    token = api.issue_token(*SOURCE, audiences=[AUDIENCE])
    for action in ["add"] + ["update"] * 9:
        assert send(secured.url, resource(tj, action), token=token).status == 200
    assert verbs(api).count(REVIEW) == 1


def test_a_cached_token_is_reviewed_again_once_it_expires(api, secured, monkeypatch):
    """The emulator's TokenReviews run 10 s in the past: a token it issued for 5 s is valid to it, and already
    expired to the function, which must not keep the answer past the token's ``exp``."""
    tj = seed_llama(api)
    then = time.time() - 10
    monkeypatch.setattr(api._server.tokens, "clock", lambda: then)
    token = api.issue_token(*SOURCE, audiences=[AUDIENCE], seconds=5)
    assert json.loads(_claims(token))["exp"] < time.time()
    assert send(secured.url, ping(), token=token).status == 200
    monkeypatch.setattr(api._server.tokens, "clock", time.time)  # the emulator's clock catches up: expired
    api.reset_calls()
    assert send(secured.url, resource(tj), token=token).status == 401
    assert verbs(api) == [REVIEW]


def _claims(token: str) -> str:
    segment = token.split(".")[1]
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)).decode()


def test_a_refusal_is_logged_with_its_reason_and_never_the_token(api, emulator):
    token = api.issue_token(*SOURCE, audiences=["other"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log"
        env = {"KUBECONFIG": emulator.kubeconfig, "KAI_FN_AUDIENCE": AUDIENCE, "KAI_FN_BACKGROUND_WORKERS": "0"}
        with path.open("wb") as log, FunctionProcess(env, log=log) as fn:
            assert send(fn.url, ping(), token=token).status == 401
            assert send(fn.url, ping(), authorization="Basic x").status == 401
        text = path.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    denied = [line for line in lines if line.get("outcome") == "denied"]
    assert [(d["status"], d["level"]) for d in denied] == [(401, "warning"), (401, "warning")]
    assert "TokenReview" in denied[0]["reason"] and "not Bearer" in denied[1]["reason"]
    assert token not in text and token.split(".")[2] not in text


# -- without KAI_FN_AUDIENCE: the body is a hint, never a source of truth -----------------------------------------

def test_unauthenticated_a_forged_body_cannot_bring_a_trainjob_into_scope(api, function):
    seed(api, sample_object("clustertrainingruntime-torch"), sample_object("trainjob-resnet-eval"),
         sample_object("queue-team-a"))
    forged = api.get(TRAINER, "TrainJob", NS, "resnet-eval")
    forged["metadata"]["labels"] = {"kai.scheduler/queue": "team-a"}  # not what the cluster holds
    api.reset_calls()
    assert send(function.url, resource(forged)).status == 200
    assert verbs(api) == [("get", "trainjobs"), ("get", "jobsets"), ("get", "clustertrainingruntimes")]
    assert api.list(KAI_PG, "PodGroup", NS) == [] and api.writes() == []


def test_unauthenticated_a_forged_body_of_a_trainjob_that_does_not_exist_costs_one_get(api, function):
    forged = sample_object("trainjob-llama-finetune")
    assert send(function.url, resource(forged)).status == 200
    assert verbs(api) == [("get", "trainjobs")]


@forgetful
def test_unauthenticated_a_body_claiming_the_work_done_is_not_taken_for_it(api, function):
    """The decision lives on the JobSet: a TrainJob body carrying a (legacy) marker is read again, and the held
    JobSet the live objects show is decided."""
    seed_llama(api)
    forged = api.get(TRAINER, "TrainJob", NS, NAME)
    forged["metadata"]["annotations"] = {"kai-fn/podgroup": "pg"}
    api.reset_calls()
    answer = send(function.url, resource(forged))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "done")
    assert verbs(api)[:2] == [("get", "trainjobs"), ("get", "jobsets")]
    assert decided(api)


@forgetful
def test_unauthenticated_the_delete_of_a_decided_jobset_costs_nothing(api, function):
    """Its decision took the label off, so the JobSet left the source's selector: that comes as a delete."""
    seed_llama(api)
    assert send(function.url, resource(api.get(JOBSET, "JobSet", NS, NAME))).status == 200
    api.reset_calls()
    answer = send(function.url, resource(api.get(JOBSET, "JobSet", NS, NAME), "delete"))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "ignored")
    assert api.calls == []


def test_a_flood_of_distinct_forged_tokens_costs_a_burst_of_reviews_and_the_sender_is_still_served_from_its_cache(
        api, secured):
    """Issue 39, attack 3: 300 POSTs with distinct JWT-shaped tokens were 300 TokenReviews, and after 1,100 the
    sender's cached answer was gone. Now the flood is answered 401, then 429 without a review, and the sender's next
    event costs no review at all."""
    tj = seed_llama(api)
    token = api.issue_token(*SOURCE, audiences=[AUDIENCE])
    assert send(secured.url, resource(tj), token=token).status == 200
    api.reset_calls()
    statuses = [send(secured.url, ping(), authorization=f"Bearer {forged_jwt()}").status for _ in range(300)]
    reviews = verbs(api).count(REVIEW)
    assert set(statuses) == {401, 429} and statuses.count(401) == reviews
    assert reviews <= 20 + 10  # the burst, and what it refilled while the flood ran (1 a second, 10 s at most)
    api.reset_calls()
    assert send(secured.url, resource(tj, "update"), token=token).status == 200
    assert REVIEW not in verbs(api)
