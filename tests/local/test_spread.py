"""The chain's spreading sink (kai_fn/local/spread.py): round-robin over the replicas, each answer passed back whole,
a replica that does not answer a 502 the sender retries."""
from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kai_fn.local.spread import Spreader


@contextmanager
def replica(name: str, seen: list[tuple[str, bytes]]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_POST(self) -> None:
            seen.append((name, self.rfile.read(int(self.headers["Content-Length"]))))
            body = f"{name} {self.headers['Ce-Id']}".encode()
            self.send_response(202)
            self.send_header("X-Kai-Fn-Outcome", "accepted")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def post(url: str, event_id: str) -> tuple[int, str, str]:
    request = urllib.request.Request(url, data=b'{"id": "%s"}' % event_id.encode(), method="POST",
                                     headers={"Ce-Id": event_id, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers.get("X-Kai-Fn-Outcome", ""), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, "", error.read().decode()


def test_deliveries_go_round_robin_and_each_answer_comes_back_whole():
    seen: list[tuple[str, bytes]] = []
    with replica("a", seen) as a, replica("b", seen) as b, Spreader([a, b]) as sink:
        answers = [post(sink.url, f"e{i}") for i in range(4)]
    assert answers == [(202, "accepted", f"{name} e{i}") for i, name in enumerate("abab")]
    assert seen == [(name, b'{"id": "e%d"}' % i) for i, name in enumerate("abab")]
    assert sink.counts == [2, 2]


def test_a_replica_that_does_not_answer_is_a_502_and_the_others_still_serve():
    seen: list[tuple[str, bytes]] = []
    with replica("a", seen) as a:
        gone = a
    with replica("b", seen) as b, Spreader([gone, b]) as sink:
        first, second = post(sink.url, "e0"), post(sink.url, "e1")
    assert first[0] == 502 and "replica 0 did not answer" in first[2]
    assert second == (202, "accepted", "b e1")
