"""The function's HTTP server: waitress serving functions-framework's Flask app of ``main.py`` on ``$PORT``.

``python -m kai_fn.function.serve`` is the container's command. Not functions-framework's own CLI: that runs
gunicorn's gthread worker, which gives a connection one of its threads as soon as its first bytes arrive and reads
the headers and the body there, blocking, with no deadline, so 8 clients dripping a byte every 10 s held all 8
threads and nothing else was answered, ``/healthz`` included (issue 39, attack 2). No gunicorn setting bounds that
read. waitress reads every connection on one I/O loop into a buffer and gives a thread only a request that is whole:
a slow client costs a socket and what it sent, never a thread. Its ``channel_timeout`` counts silence only, which
one byte resets; :class:`Server` adds the deadline for the whole request. The bounds, with knative/base's values:

- threads: ``KAI_FN_THREADS`` (8), knative/base's ``containerConcurrency``;
- a request: whole within ``KAI_FN_REQUEST_SECONDS`` (30) of its connection's opening, or on a kept-alive connection
  of its first byte; a connection silent that long is closed too (checked every second: closed within T + 1 s);
- its headers: 64 KiB; its body: ``KAI_FN_MAX_BODY_BYTES`` (4 MiB) + 64 KiB, refused (413) by waitress as soon as
  its Content-Length says more; a body in between gets the handler's own 413, logged. Bodies are buffered in memory,
  never in /tmp: an in-memory emptyDir of 16 MiB, which, overfilled, has the pod evicted;
- connections: as many as 256 MiB of buffered bodies allow (63 at 4 MiB; waitress counts its listener and wake-up pipe
  among them: 61 clients), and never fewer than the threads + 8; past that waitress accepts none until one closes, so
  a client holding them all delays new ones by T at most at a time (and waitress logs a warning).

SIGTERM (Knative's stop): no connection is accepted any more, and the loop goes on until the requests in hand are
answered, ``ANSWER_SECONDS`` at most; waitress's own shutdown then waits up to 5 s for a thread still running (its
answer is lost: the sender retries), and ``App.drain`` (atexit) finishes the passes answered 202 within
``DRAIN_SECONDS`` (20): 30 s at most, gunicorn's graceful timeout before, under the pod's grace (``timeoutSeconds``).
One process, no fork: main.py starts the metrics server once, at import.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import time
from typing import Any, cast

import functions_framework
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer

from kai_fn.function.report import log
from kai_fn.settings import Settings, load

HEADER_BYTES = 64 * 1024
BODY_SLACK = 64 * 1024  # past KAI_FN_MAX_BODY_BYTES, so that a body a little over gets the handler's logged 413
BUFFERED_BYTES = 256 * 1024 * 1024  # bodies held at once, at most: KAI_FN_MAX_BODY_BYTES x connections
ANSWER_SECONDS = 5.0  # at SIGTERM, for the requests in hand; + waitress's 5 s + DRAIN_SECONDS: 30 s at most


class Channel(HTTPChannel):
    """A connection that knows since when it owes a whole request: its opening, then each request's first byte."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.owed_since: float | None = self.creation_time

    def received(self, data: bytes) -> bool:
        began = self.owed_since or time.time()
        done: bool = super().received(data)
        self.owed_since = began if self.request is not None else None  # a request part-read, or none owed
        return done


class Server(TcpWSGIServer):
    """waitress's server, whose once-a-second maintenance also closes each connection owing a request past its
    deadline, and which stops (SIGTERM) once the requests in hand are answered. Subclassed, not patched: it uses
    waitress 3.0.2's ``channel_class``, ``maintenance``, ``active_channels`` and a channel's ``request``/``requests``
    (pinned; tests/function/test_slow_clients.py fails if they change)."""

    channel_class = Channel
    stop_by: float | None = None

    def maintenance(self, now: float) -> None:
        super().maintenance(now)  # type: ignore[arg-type]  # waitress passes time.time(); types-waitress says int
        late = now - self.adj.channel_timeout
        channels = self.channels()
        for channel in channels:
            if not channel.requests and channel.owed_since is not None and channel.owed_since < late:
                channel.will_close = True  # closed by the loop's next pass; nothing reached the application
        busy = any(c.requests or c.total_outbufs_len for c in channels)
        if self.stop_by is not None and (not busy or now >= self.stop_by):
            raise SystemExit(0)  # ends waitress's loop, which then stops its threads

    def channels(self) -> list[Channel]:
        """The open connections: waitress's ``active_channels`` is a dict of them by file descriptor (types-waitress
        says one channel), each made by :attr:`channel_class`."""
        return list(cast("dict[int, Channel]", self.active_channels).values())

    def stop(self, *_: object) -> None:
        """SIGTERM's handler: accept no more, and stop once the requests in hand are answered."""
        self.accepting = False
        self.stop_by = time.time() + ANSWER_SECONDS


def adjustments(settings: Settings) -> dict[str, Any]:
    """waitress's settings, from kai_fn's (the module's docstring says why each)."""
    body = settings.max_body_bytes + BODY_SLACK
    return {
        "threads": settings.threads, "connection_limit": max(settings.threads + 8, BUFFERED_BYTES // body),
        "channel_timeout": settings.request_seconds, "cleanup_interval": 1,
        "max_request_header_size": HEADER_BYTES, "max_request_body_size": body, "inbuf_overflow": body,
        "asyncore_use_poll": True, "ident": "kai-fn",
    }


def serve(host: str, port: int, source: str = "main.py", target: str = "handle") -> None:
    """Serve ``target`` of ``source`` until SIGTERM or SIGINT; a bad setting stops it before it listens."""
    settings = load()
    app = functions_framework.create_app(  # type: ignore[no-untyped-call]  # functions-framework: unannotated
        target=target, source=source, signature_type="http")
    limits = adjustments(settings)
    server = Server(app, host=host, port=port, **limits)
    signal.signal(signal.SIGTERM, server.stop)
    _json_lines(logging.getLogger("waitress"))
    listening = server.effective_port  # type: ignore[attr-defined]  # waitress sets it; types-waitress leaves it out
    log.info("serving", extra={"fields": {"port": listening, "threads": limits["threads"],
                                          "connections": limits["connection_limit"],
                                          "request_seconds": settings.request_seconds}})
    try:
        server.run()
    finally:
        server.close()


def _json_lines(logger: logging.Logger) -> None:
    """waitress's warnings (a connection limit reached, a queue of requests) as kai_fn's JSON lines, not plain text
    amid them."""
    logger.handlers[:] = log.handlers
    logger.setLevel(logging.WARNING)
    logger.propagate = False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kai_fn.function.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0", help="default: every interface")  # noqa: S104 - a pod's port
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8080")), help="default: $PORT, 8080")
    parser.add_argument("--source", default="main.py")
    parser.add_argument("--target", default="handle")
    args = parser.parse_args(argv)
    serve(args.host, args.port, args.source, args.target)


if __name__ == "__main__":
    main()
