"""Ports held by another process, for the harness's servers to meet: one answering every GET with 200 (a readiness
probe fooled), one listening and never answering (a bind that fails)."""
from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def answering() -> Iterator[int]:
    """A server on loopback answering every GET with 200 (a stand-in for a readiness probe's target, too)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent(host: str = "127.0.0.1") -> Iterator[int]:
    """A socket listening on ``host`` and never answering; ``""``: every interface, as Knative's servers bind."""
    with socket.socket() as s:
        s.bind((host, 0))
        s.listen()
        yield s.getsockname()[1]
