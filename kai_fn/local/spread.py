"""A sink that spreads deliveries over several function replicas, round-robin, as a Knative Service scaled to N pods
spreads its requests: the chain's stand-in for the Service's load balancing when knative/base lets it scale to 3.

Each request goes to the next replica whole and its answer comes back unchanged (status, headers, body); a replica
that does not answer gets the request's 502, as Knative's activator answers for a pod that is gone, and the sender
retries it (knative/README.md). Loopback only.
"""
from __future__ import annotations

import http.client
import itertools
import threading
import urllib.parse
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class Spreader:
    """``url``: where the sources deliver; ``counts``: requests each replica got."""

    def __init__(self, upstreams: Sequence[str], timeout: float = 60.0) -> None:
        self.upstreams = list(upstreams)
        self.counts = [0] * len(self.upstreams)
        self._next = itertools.cycle(range(len(self.upstreams)))
        self._lock = threading.Lock()
        spreader = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # the replicas log each delivery
                return

            def _forward(self) -> None:
                with spreader._lock:
                    index = next(spreader._next)
                    spreader.counts[index] += 1
                target = urllib.parse.urlsplit(spreader.upstreams[index])
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                try:
                    conn = http.client.HTTPConnection(target.hostname or "", target.port, timeout=timeout)
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    status, reply, out = answer.status, answer.getheaders(), answer.read()
                    conn.close()
                except OSError as error:
                    status, reply, out = 502, [], f"replica {index} did not answer: {error}\n".encode()
                self.send_response(status)
                for key, value in reply:
                    if key.lower() not in _HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_POST = do_GET = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="spreader", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Spreader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
