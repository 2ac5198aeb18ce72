"""Authenticated delivery with real ServiceAccount tokens from TokenRequest, checked by the real TokenReview; and
the emulator's TokenReview (kai_fn/local/emulator/tokens.py) answers in the same shape for the same cases."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from kai_fn.local.emulator.tokens import Tokens
from tests.ce import resource, send
from tests.conftest import sample_object
from tests.testbed.kai_fn_install import AUDIENCE, NAMESPACE, SOURCE, SOURCE_SA, function_process

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

OTHER_NS, OTHER_SA = "adm-senders", "default"
FORGED = "eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJzdWIiOiJub2JvZHkifQ.c2lnbmF0dXJl"


def delete_event():
    """A valid event the function answers 2xx without an API call, once the sender is let in."""
    tj = sample_object("trainjob-llama-finetune")
    return resource(tj, "delete")


@pytest.fixture(scope="module")
def function(testbed: LiveCluster) -> Iterator[Any]:
    with function_process(testbed, KAI_FN_AUDIENCE=AUDIENCE, KAI_FN_SENDERS=SOURCE) as fn:
        yield fn


TOKENS = [
    # (id, how to get the Authorization header, status)
    ("right-audience", lambda tb: "Bearer " + tb.sa_token(NAMESPACE, SOURCE_SA, [AUDIENCE]), 200),
    ("wrong-audience", lambda tb: "Bearer " + tb.sa_token(NAMESPACE, SOURCE_SA, ["not-kai-fn"]), 401),
    ("api-server-audience", lambda tb: "Bearer " + tb.sa_token(NAMESPACE, SOURCE_SA), 401),
    ("other-service-account", lambda tb: "Bearer " + tb.sa_token(OTHER_NS, OTHER_SA, [AUDIENCE]), 403),
    ("garbage", lambda tb: "Bearer garbage", 401),
    ("forged-jwt", lambda tb: f"Bearer {FORGED}", 401),
    ("none", lambda tb: None, 401),
]


@pytest.mark.parametrize("header,status", [t[1:] for t in TOKENS], ids=[t[0] for t in TOKENS])
def test_real_tokens_get_their_answer(testbed: LiveCluster, function, header, status):
    answer = send(function.url, delete_event(), authorization=header(testbed))
    assert answer.status == status, answer.body


# -- parity: the emulator's TokenReview against the real one ------------------------------------------------------

def review(testbed: LiveCluster, token: str, audiences: list[str] | None) -> tuple[int, dict[str, Any]]:
    spec: dict[str, Any] = {"token": token}
    if audiences is not None:
        spec["audiences"] = audiences
    api = testbed.api
    request = api.param_serialize(
        "POST", "/apis/authentication.k8s.io/v1/tokenreviews",
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec},
        auth_settings=["BearerToken"])
    response = api.call_api(*request)
    response.read()
    return response.status, json.loads(response.data)


def shape(status_code: int, body: dict[str, Any]) -> dict[str, Any]:
    """What kai_fn (and any client) may rely on: keys, types, and the values that carry meaning."""
    if status_code >= 400:
        return {"code": status_code, "kind": body.get("kind"), "reason": body.get("reason")}
    status = body["status"]
    user = status.get("user", {})
    return {
        "code": status_code, "kind": body["kind"], "apiVersion": body["apiVersion"],
        "status keys": sorted(status), "user keys": sorted(user),
        "authenticated": status.get("authenticated", False),
        "username": user.get("username"), "audiences": status.get("audiences"),
        "groups": sorted(g for g in user.get("groups", []) if g.startswith("system:serviceaccounts")),
        "error": status.get("error"),
        "extra keys": sorted(user.get("extra", {})),
    }


PARITY = [
    # (id, the token's ServiceAccount and audiences (None: not a real token), the review's audiences)
    ("valid", (NAMESPACE, SOURCE_SA, [AUDIENCE]), [AUDIENCE]),
    ("valid-two-audiences", (NAMESPACE, SOURCE_SA, [AUDIENCE, "x"]), ["x", "y"]),
    ("wrong-audience", (NAMESPACE, SOURCE_SA, ["not-kai-fn"]), [AUDIENCE]),
    ("forged-jwt", None, [AUDIENCE]),
    ("garbage", "garbage", [AUDIENCE]),
    ("empty", "", [AUDIENCE]),
]


@pytest.mark.parametrize("token_of,audiences", [p[1:] for p in PARITY], ids=[p[0] for p in PARITY])
def test_the_emulators_tokenreview_answers_like_the_real_one(testbed: LiveCluster, token_of, audiences):
    emulator = Tokens()
    if isinstance(token_of, tuple):
        namespace, name, token_audiences = token_of
        real_token = testbed.sa_token(namespace, name, token_audiences)
        emulated_token = emulator.issue(namespace, name, token_audiences)
    else:
        real_token = emulated_token = FORGED if token_of is None else token_of
    real = shape(*review(testbed, real_token, audiences))
    emulated = shape(*emulator.review({"spec": {"token": emulated_token, "audiences": audiences}}))
    assert emulated == real



def test_an_audience_without_senders_lets_in_knative_bases_sources_only_not_any_service_account(
        testbed: LiveCluster):
    """On the real TokenReview: any pod may request a token for the audience; only the sources' identities pass."""
    with function_process(testbed, KAI_FN_AUDIENCE=AUDIENCE) as fn:
        other = send(fn.url, delete_event(), authorization="Bearer " + testbed.sa_token(OTHER_NS, OTHER_SA, [AUDIENCE]))
        source = send(fn.url, delete_event(), authorization="Bearer " + testbed.sa_token(NAMESPACE, SOURCE_SA,
                                                                                          [AUDIENCE]))
    assert (other.status, source.status) == (403, 200), (other.body, source.body)
    assert "not in KAI_FN_SENDERS" in other.body
