"""The HTTP contract: a CloudEvent in, a status code out, one JSON log line per delivery.

This is an ``@functions_framework.http`` function rather than ``cloud_event``, because only then does it
choose the status: 2xx with an empty body when done, or when a later event will do the work (``waiting``: the
JobSet is not made yet; a Broker turns a non-empty non-CloudEvent body into a redelivery), 503 + Retry-After when
only a retry can help (a direct sink does not retry 500), 400 for a bad event,
413 for an oversized body; with ``KAI_FN_AUDIENCE`` set, 401 / 403 for a sender that is not let in, checked
before the body is read. With ``KAI_FN_BACKGROUND_WORKERS``, an event that needs work on its TrainJob (a pass, a
look at its gang) is answered 202 at once, and the work is done right after as that TrainJob's turn in the work
queue (kai_fn.function.workqueue says why, kai_fn.function.keywork what); each part logs a line of its own
(``work``).
``GET /metrics`` serves the Prometheus metrics and ``GET`` elsewhere the health check (no auth: they hold no secrets).
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

import flask

from kai_fn.function import events, gang_status, inventory, keywork, metrics, reconcile, resync
from kai_fn.function.auth import Authenticator, Denied
from kai_fn.function.cluster import CachedServer, CachedSession
from kai_fn.function.optin import OptIn
from kai_fn.kube import Transient
from kai_fn.function.report import Outcome, configure_logging, log
from kai_fn.settings import Settings, load
from kai_fn.function.workqueue import WorkQueue

RETRY_AFTER_SECONDS = 2
DRAIN_SECONDS = 20  # after SIGTERM's answers (kai_fn.function.serve, 10 s at most): 30 s in all, as gunicorn's was


class App:
    """Settings and the one API client of this process, both made at start-up so a bad one stops it there; and the
    one :class:`OptIn`, the namespaces it may act in, which every event, the resync and the catch-up ask."""

    def __init__(self, settings: Settings | None = None, server: CachedServer | None = None) -> None:
        self.settings = settings or load()
        configure_logging(self.settings.log_level)
        self.server = server or CachedServer.from_settings(self.settings)
        self.optin = OptIn(self.settings)
        self.auth = Authenticator(self.settings.audience, self.settings.senders) if self.settings.audience else None
        self.work: WorkQueue | None = None
        self.resyncs = resync.OneAtATime()
        metrics.BACKING_OFF.set_function(self.server.backoff.waiting)
        self._started_lock, self._caught_up = threading.Lock(), False
        if self.settings.background_workers:
            worker = keywork.Worker(self.server, self.settings, self.optin)
            self.work = WorkQueue(worker, self.settings.background_workers, on_drop=keywork.dropped,
                                  merge=keywork.merge, urgent=keywork.urgent)
            worker.queue = self.work
            metrics.WORK_QUEUE.set_function(self.work.depth)
            metrics.WORK_TIMERS.set_function(self.work.timers)
            atexit.register(self.drain)

    def offer(self, event: events.TrainJobEvent) -> bool:
        """Queue the TrainJob's pass for after the answer; False without workers, or when the queue is full."""
        return self.work is not None and self.work.offer((event.namespace, event.name),
                                                         keywork.Chores(trainjob=event))

    def catch_up(self) -> None:
        """Once, on the first request a started process gets (its readiness probe): a resync's worth of held
        JobSets handed to the work queue, so work owed while no function ran starts now, not at the next ping.
        ``kai_fn_catch_up_total`` counts its end, so a reader knows when what it queued is in the queue."""
        with self._started_lock:
            if self._caught_up:
                return
            self._caught_up = True
        if self.work is None:
            metrics.CATCH_UP.labels("off").inc()
            return
        threading.Thread(target=self._catch_up, name="kai-fn-catch-up", daemon=True).start()

    def _catch_up(self) -> None:
        session = self.server.session()
        try:
            entries = inventory.take(session, self.settings, self.optin)
        except Exception as error:  # the API not reachable yet (or a bug, hence the traceback): the first ping does it
            log.warning("catch-up", exc_info=error, extra={"fields": {"outcome": "retry", "reason": str(error)[:200]}})
            metrics.CATCH_UP.labels("retry").inc()
            return
        owed, backing_off = inventory.due(entries, self.settings, self.server.backoff)
        queued = sum(1 for e in owed if self.offer(resync.as_event(e)))
        log.info("catch-up", extra={"fields": {"outcome": "done", "owed": len(owed), "backing_off": backing_off,
                                                "queued": queued,
                                                "api_calls": session.calls}})
        metrics.CATCH_UP.labels("done").inc()  # after the offers: a reader of it sees them in kai_fn_work_queue

    def drain(self) -> None:
        """At a graceful stop, finishes the passes already answered 202 (their events will not come again)."""
        if self.work is None or not (queued := self.work.depth()):
            return
        left = self.work.drain(DRAIN_SECONDS)
        log.log(logging.WARNING if left else logging.INFO, "drained", extra={"fields": {
            "queued": queued, "left": left,
            "reason": f"{left} left to the resync" if left else "every pass answered 202 is done"}})

    def __call__(self, request: flask.Request) -> flask.Response:
        if not self._caught_up:
            self.catch_up()
        if request.method in ("GET", "HEAD"):
            if request.path == "/metrics" and self.settings.metrics_port:
                return _answer(404, f"/metrics is served on port {self.settings.metrics_port}")
            if request.path == "/metrics":
                body, content_type = metrics.exposition()
                return flask.Response(body, 200, content_type=content_type)
            return flask.Response("ok\n", 200, mimetype="text/plain")
        if request.method != "POST":
            return _answer(405, f"{request.method} is not accepted; POST a CloudEvent")
        started = time.perf_counter()
        done = self.deliver(request)
        seconds = time.perf_counter() - started
        fields = done.fields | {"status": done.status, "reason": done.reason, "outcome": done.outcome,
                                "ms": round(seconds * 1000, 1)}
        metrics.EVENTS.labels(metrics.event_type(fields.get("type")), metrics.event_kind(fields.get("kind")),
                              done.outcome).inc()
        if done.work:
            metrics.RECONCILE_SECONDS.labels(done.work).observe(seconds)
        level = logging.WARNING if done.status >= 500 or done.status in (401, 403) else logging.INFO
        log.log(level, "event", extra={"fields": fields})
        if done.status < 300:
            response = flask.Response(b"", done.status)
            response.headers["X-Kai-Fn-Outcome"] = done.outcome
            return response
        response = _answer(done.status, done.reason)
        if done.status in (429, 503):
            response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        elif done.status == 401:
            response.headers["WWW-Authenticate"] = "Bearer"
        return response

    def deliver(self, request: flask.Request) -> Delivery:
        """Authenticate, read, dispatch: each step may end the delivery with its answer."""
        session = self.server.session()
        sender = self.authenticate(request, session)
        if isinstance(sender, Delivery):
            return sender
        body = self.read(request)
        if isinstance(body, Delivery):
            return body
        fields = {"sender": sender} if sender else {}
        try:
            event = events.parse(dict(request.headers), body)
        except events.BadEvent as error:
            return Delivery(400, str(error), "bad", fields)
        fields |= {"type": event.type, "id": event.id}
        if isinstance(event, events.Ignored):
            return Delivery(200, event.reason, "ignored", fields)
        return self.dispatch(event, session, fields)

    def authenticate(self, request: flask.Request, session: CachedSession) -> str | Delivery | None:
        """The sender's user name (None when delivery is not authenticated), or the refusal."""
        if self.auth is None:
            return None
        try:
            return self.auth.check(request.headers.get("Authorization"), session.review_token,
                                   request.remote_addr or "").username
        except Denied as denied:
            return Delivery(denied.status, denied.reason, "denied", {"api_calls": session.calls})
        except Transient as error:
            return Delivery(503, f"cannot check the sender: {error}", "retry", {"api_calls": session.calls})

    def read(self, request: flask.Request) -> bytes | Delivery:
        """The body, at most ``KAI_FN_MAX_BODY_BYTES``, or the 413."""
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return Delivery(413, f"body of {request.content_length} bytes is over KAI_FN_MAX_BODY_BYTES ({limit})",
                            "too_large")
        body = request.stream.read(limit + 1)
        if len(body) > limit:
            return Delivery(413, f"body is over KAI_FN_MAX_BODY_BYTES ({limit})", "too_large")
        return body

    def dispatch(self, event: events.Work, session: CachedSession, fields: dict[str, Any]) -> Delivery:
        """The work the event asks for: the resync, or its TrainJob's (queued when it can be)."""
        try:
            if isinstance(event, events.Resync):
                work, outcome = "resync", self.resyncs.run(
                    lambda: resync.resync(session, self.settings, self.optin, self.work))
            elif isinstance(event, events.PodGroupEvent):
                fields |= {"kind": "PodGroup", "namespace": event.namespace, "podgroup": event.name,
                           "mode": event.mode}
                work, done = "gang_status", self.gang_status(event, session)
                if isinstance(done, Delivery):
                    return replace(done, fields=fields | done.fields)
                outcome = done
                fields |= {"name": outcome.name, "uid": outcome.uid}
            else:
                fields |= {"kind": event.via, "namespace": event.namespace, "name": event.name, "uid": event.uid,
                           "mode": event.mode}
                work = "trainjob"
                answer = reconcile.answer_without_a_read(event, session, self.settings)
                if answer is None:
                    answer = reconcile.not_opted_in(event, session, self.optin)
                if answer is None and self.offer(event):
                    return Delivery(202, "accepted: reconciled right after this answer", "accepted",
                                    fields | {"api_calls": session.calls})
                outcome = answer if answer is not None else reconcile.pass_of(event, session, self.settings)
        except (Transient, reconcile.Retry) as error:
            return Delivery(503, str(error), "retry", fields | {"api_calls": session.calls})
        return Delivery(200, outcome.reason, outcome.result, fields | _outcome_fields(outcome, session, fields),
                        work)

    def gang_status(self, event: events.PodGroupEvent, session: CachedSession) -> Outcome | Delivery:
        """A PodGroup event: answered from what it says and this process knows (no read), else its gang looked at
        as its TrainJob's work in the queue (202), or here without workers or room."""
        answer = gang_status.precheck(event, session, self.settings, self.optin)
        if answer is not None:
            return answer
        key = gang_status.trainjob_key(event)
        if self.work is not None and key is not None and self.work.offer(key, keywork.Chores(podgroups=(event,))):
            return Delivery(202, "accepted: its gang looked at right after this answer", "accepted",
                            {"name": key[1], "api_calls": session.calls})
        return gang_status.look(event, session, self.settings)


@dataclass(frozen=True)
class Delivery:
    """How one delivery went: its answer and what its log line says; ``work``: the kind of work timed."""

    status: int
    reason: str
    outcome: str
    fields: dict[str, Any] = field(default_factory=dict)
    work: str | None = None


def _outcome_fields(outcome: Outcome, session: CachedSession, fields: dict[str, Any]) -> dict[str, Any]:
    """What a finished pass adds to its log line, the delivery's and the queued pass's alike."""
    out: dict[str, Any] = {"api_calls": session.calls, "uid": outcome.uid or fields.get("uid")}
    if outcome.podgroup:
        out["podgroup"] = outcome.podgroup
    if outcome.phase:
        out["phase"] = outcome.phase
    return out


def _answer(status: int, reason: str) -> flask.Response:
    return flask.Response(reason.replace("\n", " ")[:500] + "\n", status, mimetype="text/plain")
