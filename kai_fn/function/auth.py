"""Who sent this event: the token a Knative source sends as itself (authentication-oidc), checked by a TokenReview.

With ``KAI_FN_AUDIENCE`` set, every POST must carry ``Authorization: Bearer <token>``, a ServiceAccount token for
that audience, of one of ``KAI_FN_SENDERS`` (by default knative/base's sources): an audience alone would let in any
ServiceAccount, whose token for it any pod can request. The answer of each review is cached until the token
expires, at most ``MAX_AGE_SECONDS``, so a steady stream of events costs one TokenReview per token, not per event.
The token itself is never kept or logged: entries are keyed, and log lines name, a short SHA-256 of it.

Garbage costs little and evicts nothing (docs/security.md, the token flood): good answers and refusals are kept in
two caches, so no number of refused tokens can push a sender's answer out, and each client (the peer's address) may
cost at most ``FAILED_REVIEWS_BURST`` refused reviews, then ``FAILED_REVIEWS_PER_SECOND``: beyond that an unknown
token is answered 429 without a review. A review that lets a sender in costs its client nothing.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kai_fn.function.ratelimit import Buckets

MAX_AGE_SECONDS = 600.0
MAX_ENTRIES = 1024
FAILED_REVIEWS_BURST = 20
FAILED_REVIEWS_PER_SECOND = 1.0
# A JWT in compact form: three base64url segments. Anything else is not a ServiceAccount token.
_JWT = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")

Review = Callable[[str, str], Mapping[str, Any]]
"""(token, audience) -> the TokenReview's ``status``; raises (e.g. ``Transient``) when the API cannot answer."""


class Denied(Exception):
    """The sender is refused: 401 (no valid token for the audience) or 403 (a sender not allowed)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class Sender:
    username: str
    token_sha: str


def token_sha(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def bearer(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header; :class:`Denied` (401) for anything else."""
    if authorization is None:
        raise Denied(401, "no Authorization header")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise Denied(401, f"Authorization scheme {scheme[:20]!r} is not Bearer")
    token = token.strip()
    if not token:
        raise Denied(401, "empty bearer token")
    if not _JWT.fullmatch(token):
        raise Denied(401, f"malformed bearer token (sha256 {token_sha(token)}): not a JWT")
    return token


def expiry(token: str) -> float | None:
    """The ``exp`` claim, unverified: used only to bound how long a review's answer is kept."""
    try:
        segment = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
        exp = claims.get("exp") if isinstance(claims, dict) else None
    except (IndexError, ValueError, binascii.Error, UnicodeDecodeError):
        return None
    return float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None


class _Answers:
    """Answers of reviews by token hash, each until its time; the least recently used dropped beyond ``size``."""

    def __init__(self, size: int, clock: Callable[[], float]) -> None:
        self.size, self.clock = size, clock
        self._entries: OrderedDict[str, tuple[float, str | tuple[int, str]]] = OrderedDict()

    def get(self, key: str) -> str | tuple[int, str] | None:
        hit = self._entries.get(key)
        if hit is None:
            return None
        if hit[0] <= self.clock():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return hit[1]

    def put(self, key: str, until: float, answer: str | tuple[int, str]) -> None:
        self._entries[key] = (until, answer)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class Authenticator:
    """Thread-safe; one per process. ``clock`` is wall-clock seconds (``exp`` is a Unix time)."""

    def __init__(self, audience: str, senders: tuple[str, ...], *, clock: Callable[[], float] = time.time,
                 max_age: float = MAX_AGE_SECONDS, max_entries: int = MAX_ENTRIES,
                 failed_burst: int = FAILED_REVIEWS_BURST, failed_rate: float = FAILED_REVIEWS_PER_SECOND) -> None:
        if not senders:
            raise ValueError("an audience without senders would accept any ServiceAccount's token")
        self.audience, self.senders = audience, frozenset(senders)
        self.clock, self.max_age, self.max_entries = clock, max_age, max_entries
        self._good = _Answers(max_entries, clock)
        self._bad = _Answers(max_entries, clock)
        self._failures = Buckets(failed_burst, failed_rate, clock=clock, max_clients=max_entries)
        self._lock = threading.Lock()
        self._reviewing: dict[str, threading.Lock] = {}

    def check(self, authorization: str | None, review: Review, client: str = "") -> Sender:
        """The sender, or :class:`Denied`. A review the API cannot answer raises what ``review`` raises. ``client``:
        who is asking (the peer's address), whose refused reviews are limited."""
        token = bearer(authorization)
        key = token_sha(token)
        answer = self._cached(key)
        if answer is None:
            with self._review_lock(key):
                answer = self._cached(key)
                if answer is None:
                    answer = self._limited_review(token, key, review, client)
            with self._lock:
                self._reviewing.pop(key, None)
        if isinstance(answer, tuple):
            raise Denied(*answer)
        if answer not in self.senders:
            raise Denied(403, f"sender {answer} is not in KAI_FN_SENDERS")
        return Sender(answer, key)

    def _limited_review(self, token: str, key: str, review: Review, client: str) -> str | tuple[int, str]:
        """A review, if ``client`` may still cost one that fails; its token back when it let a sender in (or the
        API could not answer)."""
        if not self._failures.take(client):
            return (429, f"too many refused tokens from {client or 'this client'}: token (sha256 {key}) not reviewed")
        answer: str | tuple[int, str] | None = None
        try:
            answer = self._review(token, key, review)
        finally:
            if not isinstance(answer, tuple):
                self._failures.give_back(client)
        return answer

    def _review(self, token: str, key: str, review: Review) -> str | tuple[int, str]:
        """Ask, and remember the answer: a valid token until it expires, a refused one (which stays refused)
        for the full ``max_age``, so a sender repeating a bad token costs one review per ``max_age``."""
        status = review(token, self.audience)
        user = status.get("user") or {}
        username = user.get("username") if isinstance(user, Mapping) else None
        until = self.clock() + self.max_age
        if status.get("authenticated") is not True or not isinstance(username, str) or not username:
            error = str(status.get("error") or "not authenticated")[:200]
            return self._remember_refusal(key, until, f"token (sha256 {key}) rejected by TokenReview: {error}")
        if self.audience not in (status.get("audiences") or []):
            return self._remember_refusal(key, until, f"token (sha256 {key}) is not for audience {self.audience!r}")
        with self._lock:
            self._good.put(key, min(until, expiry(token) or until), username)
        return username

    def _remember_refusal(self, key: str, until: float, reason: str) -> tuple[int, str]:
        with self._lock:
            self._bad.put(key, until, (401, reason))
        return (401, reason)

    def _cached(self, key: str) -> str | tuple[int, str] | None:
        with self._lock:
            good = self._good.get(key)
            return good if good is not None else self._bad.get(key)

    def _review_lock(self, key: str) -> threading.Lock:
        """One review per token at a time: concurrent first events with one token wait for one TokenReview."""
        with self._lock:
            return self._reviewing.setdefault(key, threading.Lock())
