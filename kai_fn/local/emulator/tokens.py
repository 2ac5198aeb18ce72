"""ServiceAccount tokens and the TokenReview API, for the emulator.

``issue`` is the emulator's TokenRequest: a JWT-shaped token with the claims a real one has (``aud``, ``exp``,
``sub``, ``kubernetes.io``), whose signature is random, so only a token this issuer handed out is valid.
``review`` answers ``POST /apis/authentication.k8s.io/v1/tokenreviews`` the way kube-apiserver does
(pkg/registry/authentication/tokenreview): 400 without a token; 201 with the review echoed and a ``status`` that is
``{authenticated, user{username, uid, groups, extra}, audiences}`` for a valid token (``audiences`` being the
intersection of the token's and the requested ones) and ``{user: {}, error}`` for anything else: unknown, expired,
or for none of the requested audiences. tests/testbed checks these shapes against a real API server.
"""
from __future__ import annotations

import base64
import json
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

API_AUDIENCES = ("https://kubernetes.default.svc.cluster.local",)
ISSUER = "https://kubernetes.default.svc.cluster.local"
# Who a request without a token is: the emulator's kubeconfig carries no credentials, like a client-certificate admin.
ADMIN = "emulator-admin"


@dataclass(frozen=True)
class _Issued:
    namespace: str
    name: str
    uid: str
    audiences: tuple[str, ...]
    expires: float
    jti: str


def _go_quoted(values: tuple[str, ...]) -> str:
    """A string slice as Go's %q prints it: ["a" "b"]."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def _b64(obj: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()


class Tokens:
    """Tokens handed out and the reviews of them; thread-safe. ``clock`` is wall-clock seconds."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._issued: dict[str, _Issued] = {}
        self._accounts: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def issue(self, namespace: str, name: str, audiences: list[str] | tuple[str, ...] = API_AUDIENCES,
              seconds: int = 3600) -> str:
        """A token for ServiceAccount ``namespace/name``, as a TokenRequest with these audiences returns it."""
        now = int(self.clock())
        with self._lock:
            uid = self._accounts.setdefault((namespace, name), str(uuid.uuid4()))
        issued = _Issued(namespace, name, uid, tuple(audiences), now + seconds, str(uuid.uuid4()))
        claims = {"aud": list(audiences), "exp": now + seconds, "iat": now, "nbf": now, "iss": ISSUER,
                  "jti": issued.jti, "sub": f"system:serviceaccount:{namespace}:{name}",
                  "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}}}
        token = f"{_b64({'alg': 'RS256', 'kid': 'emulator'})}.{_b64(claims)}.{secrets.token_urlsafe(32)}"
        with self._lock:
            self._issued[token] = issued
        return token

    def review(self, body: Any) -> tuple[int, dict[str, Any]]:
        found = body.get("spec") if isinstance(body, dict) else None
        spec: dict[str, Any] = found if isinstance(found, dict) else {}
        token = spec.get("token")
        if not isinstance(token, str) or not token:
            return 400, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": "token is required for TokenReview in authentication", "reason": "BadRequest",
                         "code": 400}
        wanted = tuple(spec.get("audiences") or API_AUDIENCES)
        with self._lock:
            issued = self._issued.get(token)
        status: dict[str, Any]
        if issued is None:  # not from this issuer: no authenticator claims it
            status = {"user": {}, "error": "invalid bearer token"}
        elif issued.expires <= self.clock():
            status = {"user": {}, "error": "[invalid bearer token, service account token has expired]"}
        elif not (common := [a for a in issued.audiences if a in wanted]):
            status = {"user": {}, "error": f"[invalid bearer token, token audiences {_go_quoted(issued.audiences)} "
                                           f"is invalid for the target audiences {_go_quoted(wanted)}]"}
        else:
            status = {
                "authenticated": True,
                "user": {
                    "username": f"system:serviceaccount:{issued.namespace}:{issued.name}",
                    "uid": issued.uid,
                    "groups": ["system:serviceaccounts", f"system:serviceaccounts:{issued.namespace}",
                               "system:authenticated"],
                    "extra": {"authentication.kubernetes.io/credential-id": [f"JTI={issued.jti}"]},
                },
                "audiences": common,
            }
        return 201, {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                     "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}

    def self_review(self, token: str | None) -> tuple[int, dict[str, Any]]:
        """``POST .../selfsubjectreviews``: who the caller is. No token: the emulator's admin; a token this issuer
        handed out and still valid: its ServiceAccount; any other token: 401, as for any request that carries it."""
        if token is None:
            user: dict[str, Any] = {"username": ADMIN, "groups": ["system:masters", "system:authenticated"]}
        else:
            with self._lock:
                issued = self._issued.get(token)
            if issued is None or issued.expires <= self.clock():
                return 401, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                             "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
            user = {"username": f"system:serviceaccount:{issued.namespace}:{issued.name}", "uid": issued.uid,
                    "groups": ["system:serviceaccounts", f"system:serviceaccounts:{issued.namespace}",
                               "system:authenticated"]}
        return 201, {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                     "metadata": {"creationTimestamp": None}, "status": {"userInfo": user}}
