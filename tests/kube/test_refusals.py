"""The kube layer's one status-to-exception table (kai_fn/kube/errors.py), on the emulator: each refusal provoked
for real (tests/kube/refusals.py, the same table the real tier runs), each fault the emulator injects, and the
bodies the table reads."""
from __future__ import annotations

import json

import pytest

from kai_fn.kube import (
    AlreadyExists, ApiError, ApiServer, Conflict, Forbidden, NotFound, Terminating, Transient, Unauthorized, api_client,
)
from kai_fn.kube.errors import kind_of
from kai_fn.kube.session import path
from kai_fn.local.emulator import Fault
from kai_fn.local.emulator.errors import terminating
from kai_fn.local.emulator.kinds import KINDS
from tests.kube.refusals import CASES


def session(api, timeout: float = 5.0):
    return ApiServer(api_client(str(api.kubeconfig)), timeout).session()


@pytest.mark.parametrize("provoke, raised, status", CASES.values(), ids=CASES.keys())
def test_each_refusal_the_server_gives_is_its_exception(api, provoke, raised, status):
    with pytest.raises(raised, match=f"^API {status} ") as caught:
        provoke(session(api), "team-a")
    assert (type(caught.value), caught.value.status) == (raised, status)


@pytest.mark.parametrize("fault, raised, match", [
    (Fault(status=403), Forbidden, "^API 403 Forbidden$"), (Fault(status=401), Unauthorized, "^API 401 "),
    (Fault(status=429), Transient, "^API 429 "), (Fault(status=500), Transient, "^API 500 "),
    (Fault(status=503), Transient, "^API 503 "), (Fault(status=504), Transient, "^API 504 "),
    (Fault(status=400), Transient, "^API 400 "), (Fault(hang=1.5), Transient, "^API unreachable or too slow: "),
], ids=["403", "401", "429", "500", "503", "504", "400-any-other", "no-answer"])
def test_faults_a_retry_may_fix_are_transient(api, fault, raised, match):
    api.faults = lambda call: fault
    with pytest.raises(raised, match=match) as caught:
        session(api, timeout=1).request("GET", path("v1", "configmaps", "team-a", "x"), namespace="team-a", name="x")
    assert type(caught.value) is raised and isinstance(caught.value, Transient)


@pytest.mark.parametrize("status, body, kind", [
    (404, {"reason": "NotFound"}, NotFound),
    (409, {"reason": "AlreadyExists"}, AlreadyExists),
    (409, {"reason": "Conflict"}, Conflict),
    (409, "not a Status", Conflict),
    (403, {"reason": "Forbidden", "details": {"causes": [{"reason": "NamespaceTerminating"}]}}, Terminating),
    (403, {"reason": "Forbidden", "message": "... because it is being terminated"}, Forbidden),
    (403, terminating(KINDS["v1", "Pod"], "p", "team-a").body(), Terminating),
    (418, {}, Transient),
    (None, None, Transient),
], ids=["404", "409-exists", "409-conflict", "409-no-status", "403-terminating-cause", "403-message-is-not-read",
        "403-the-emulator's-terminating", "any-other-status", "no-answer"])
def test_the_table_reads_the_status_code_then_its_reason_and_causes_never_the_message(status, body, kind):
    assert kind_of(status, json.dumps(body) if isinstance(body, dict) else body) is kind


def test_every_exception_is_an_api_error_of_one_line(api):
    with pytest.raises(ApiError, match="^API 404 Not Found$"):
        session(api).request("GET", path("v1", "configmaps", "team-a", "x"), namespace="team-a", name="x")
