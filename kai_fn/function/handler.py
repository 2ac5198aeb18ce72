"""The HTTP contract: a CloudEvent in, a status code out, one JSON log line per delivery.

This is an ``@functions_framework.http`` function rather than ``cloud_event``, because only then does it
choose the status: 2xx with an empty body when done, or when a later event will do the work (``waiting``: the
JobSet is not made yet; a Broker turns a non-empty non-CloudEvent body into a redelivery), 503 + Retry-After when
only a retry can help (a direct sink does not retry 500), 400 for a bad event,
413 for an oversized body; with ``KAI_FN_AUDIENCE`` set, 401 / 403 for a sender that is not let in, checked
before the body is read. ``GET /metrics`` serves the Prometheus metrics and ``GET`` elsewhere the health check
(no auth: they hold no secrets).
"""
from __future__ import annotations

import logging
import time
from typing import Any

import flask

from kai_fn.function import events, gang_status, metrics, reconcile
from kai_fn.function.auth import Authenticator, Denied
from kai_fn.function.cluster import Cluster, Transient
from kai_fn.function.report import configure_logging, log
from kai_fn.function.settings import Settings, load

RETRY_AFTER_SECONDS = 2


class App:
    """Settings and the one API client of this process, both made at start-up so a bad one stops it there."""

    def __init__(self, settings: Settings | None = None, cluster: Cluster | None = None) -> None:
        self.settings = settings or load()
        configure_logging(self.settings.log_level)
        self.cluster = cluster or Cluster.from_settings(self.settings)
        self.auth = Authenticator(self.settings.audience, self.settings.senders) if self.settings.audience else None

    def __call__(self, request: flask.Request) -> flask.Response:
        if request.method in ("GET", "HEAD"):
            if request.path == "/metrics":
                body, content_type = metrics.exposition()
                return flask.Response(body, 200, content_type=content_type)
            return flask.Response("ok\n", 200, mimetype="text/plain")
        if request.method != "POST":
            return _answer(405, f"{request.method} is not accepted; POST a CloudEvent")
        started = time.perf_counter()
        fields: dict[str, Any] = {}
        status, reason = self.deliver(request, fields)
        seconds = time.perf_counter() - started
        fields |= {"status": status, "reason": reason, "ms": round(seconds * 1000, 1)}
        outcome = fields.get("outcome") or ("too_large" if status == 413 else "bad")
        metrics.EVENTS.labels(metrics.event_type(fields.get("type")), metrics.event_kind(fields.get("kind")),
                              outcome).inc()
        if "work" in fields:
            metrics.RECONCILE_SECONDS.labels(fields.pop("work")).observe(seconds)
        level = logging.WARNING if status >= 500 or status in (401, 403) else logging.INFO
        log.log(level, "event", extra={"fields": fields})
        if status < 300:
            response = flask.Response(b"", status)
            response.headers["X-Kai-Fn-Outcome"] = fields.get("outcome", "")
            return response
        response = _answer(status, reason)
        if status == 503:
            response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        elif status == 401:
            response.headers["WWW-Authenticate"] = "Bearer"
        return response

    def deliver(self, request: flask.Request, fields: dict[str, Any]) -> tuple[int, str]:
        session = self.cluster.session()
        if self.auth is not None:
            try:
                sender = self.auth.check(request.headers.get("Authorization"), session.review_token)
            except Denied as denied:
                fields |= {"outcome": "denied", "api_calls": session.calls}
                return denied.status, denied.reason
            except Transient as error:
                fields |= {"outcome": "retry", "api_calls": session.calls}
                return 503, f"cannot check the sender: {error}"
            fields["sender"] = sender.username
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return 413, f"body of {request.content_length} bytes is over KAI_FN_MAX_BODY_BYTES ({limit})"
        body = request.stream.read(limit + 1)
        if len(body) > limit:
            return 413, f"body is over KAI_FN_MAX_BODY_BYTES ({limit})"
        try:
            event = events.parse(request.headers, body)
        except events.BadEvent as error:
            fields["outcome"] = "bad"
            return 400, str(error)
        fields |= {"type": event.type, "id": event.id}
        if isinstance(event, events.Ignored):
            fields["outcome"] = "ignored"
            return 200, event.reason
        try:
            if isinstance(event, events.Resync):
                fields["work"] = "resync"
                outcome = reconcile.resync(session, self.settings)
            elif isinstance(event, events.PodGroupEvent):
                fields |= {"kind": "PodGroup", "work": "gang_status", "namespace": event.namespace,
                           "podgroup": event.name, "mode": event.mode}
                outcome = gang_status.observe(event, session, self.settings)
                fields |= {"name": outcome.name, "uid": outcome.uid}
            else:
                fields |= {"kind": "TrainJob", "work": "trainjob", "namespace": event.namespace, "name": event.name,
                           "uid": event.uid, "mode": event.mode}
                outcome = reconcile.reconcile(event, session, self.settings)
        except (Transient, reconcile.Retry) as error:
            fields |= {"outcome": "retry", "api_calls": session.calls}
            return 503, str(error)
        fields |= {"outcome": outcome.result, "api_calls": session.calls, "uid": outcome.uid or fields.get("uid")}
        if outcome.podgroup:
            fields["podgroup"] = outcome.podgroup
        return 200, outcome.reason


def _answer(status: int, reason: str) -> flask.Response:
    return flask.Response(reason.replace("\n", " ")[:500] + "\n", status, mimetype="text/plain")
