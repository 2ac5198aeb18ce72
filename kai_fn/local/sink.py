"""A scripted sink on loopback, for watching what a real adapter does with each answer (tests, bench.adapter): it
records every POST as it arrived (header names in the sender's case, body, when it started and ended) and answers
what the script says.

``script(request, n)`` gets the parsed request and its 0-based arrival number and returns an :class:`Answer`
(or a bare status code). The server is threaded, so concurrent deliveries show as overlapping requests.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from kai_fn.local.process import Started


@dataclass(frozen=True)
class Answer:
    status: int = 200
    delay: float = 0.0  # seconds before answering
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    n: int
    headers: list[tuple[str, str]]  # as sent, names in the sender's case
    body: bytes
    started: float  # time.monotonic()
    ended: float = 0.0
    status: int = 0

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    @property
    def ce(self) -> dict[str, str]:
        """The CloudEvent attributes from ``Ce-*`` headers, by lower-case name."""
        return {k[3:].lower(): v for k, v in self.headers if k.lower().startswith("ce-")}

    @property
    def data(self) -> Any:
        return json.loads(self.body)

    @property
    def key(self) -> tuple[str, str, str]:
        """(type, namespace, name) of the event."""
        ce = self.ce
        return ce.get("type", ""), ce.get("namespace", ""), ce.get("name", "")


Script = Callable[[Request, int], "Answer | int"]


class ScriptedSink(Started):
    def __init__(self, script: Script = lambda request, n: 200, port: int = 0) -> None:
        self.script = script
        self.requests: list[Request] = []
        self.lock = threading.Condition()
        self.in_flight = self.max_in_flight = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the adapter's Go client expects

            def do_POST(self) -> None:  # noqa: N802
                started = time.monotonic()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with sink.lock:
                    request = Request(len(sink.requests), list(self.headers.items()), body, started)
                    sink.requests.append(request)
                    sink.in_flight += 1
                    sink.max_in_flight = max(sink.max_in_flight, sink.in_flight)
                answer = sink.script(request, request.n)
                answer = answer if isinstance(answer, Answer) else Answer(answer)
                if answer.delay:
                    time.sleep(answer.delay)
                try:
                    self.send_response(answer.status)
                    for k, v in answer.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the client gave up
                with sink.lock:
                    request.ended, request.status = time.monotonic(), answer.status
                    sink.in_flight -= 1
                    sink.lock.notify_all()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="scripted-sink", daemon=True)

    def wait(self, predicate: Callable[[list[Request]], bool], timeout: float) -> bool:
        """Until ``predicate(requests answered so far)``; False at ``timeout`` (the caller's bound on a hang)."""
        with self.lock:
            return self.lock.wait_for(lambda: predicate([r for r in self.requests if r.ended]), timeout)

    def settle(self, quiet: float, timeout: float) -> list[Request]:
        """The requests, once none arrived for ``quiet`` seconds (or at ``timeout``)."""
        end = time.monotonic() + timeout
        seen = -1
        while time.monotonic() < end:
            with self.lock:
                count = len(self.requests)
                idle = self.in_flight == 0
            if count == seen and idle:
                break
            seen = count
            time.sleep(quiet)
        return list(self.requests)

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

