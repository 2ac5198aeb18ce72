"""Slow and hostile clients (issue 39, attack 2): connections that drip a request's headers or body a byte at a time
cost the real server a socket each, never one of its 8 threads, and one that has not delivered its whole request by
``KAI_FN_REQUEST_SECONDS`` is closed (kai_fn/serve.py). Loopback only; every wait is bounded by a socket timeout."""
from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.ce import ping, send

AUDIENCE = "kai-fn"
SOURCE = ("kai-fn", "kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource")
SENDER = f"system:serviceaccount:{SOURCE[0]}:{SOURCE[1]}"
DRIPPERS = 8 + 4  # the server's threads, and more
PATIENCE = 20.0  # a socket timeout no healthy answer comes near: a thread held is a failure, never a slow pass


def opening(port: int, kind: str, token: str) -> bytes:
    """What a dripper sends at once: part of a header line, or whole headers promising a body of 1 MB."""
    head = f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
    if kind == "header":
        return (head + "X-Drip: ").encode()
    return (head + "Content-Type: application/json\r\nCe-Id: slow\r\nCe-Specversion: 1.0\r\n"
            "Ce-Type: dev.knative.sources.ping\r\nCe-Source: /slow\r\nContent-Length: 1000000\r\n\r\n{").encode()


@contextmanager
def dripping(port: int, kind: str, token: str, count: int = DRIPPERS) -> Iterator[list[socket.socket]]:
    """``count`` connections that send their opening, then one byte each every 0.2 s until the block ends."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=PATIENCE) for _ in range(count)]
    stop = threading.Event()

    def drip() -> None:
        while not stop.wait(0.2):
            for s in socks:
                try:
                    s.send(b"a")
                except OSError:
                    pass

    for s in socks:
        s.sendall(opening(port, kind, token))
    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    try:
        yield socks
    finally:
        stop.set()
        dripper.join(5)
        for s in socks:
            s.close()


def still_open(s: socket.socket) -> bool:
    """Neither an answer nor the end of the stream has come: the server holds the connection, waiting for more."""
    s.setblocking(False)
    try:
        return not s.recv(1)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)


def healthz(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"{url}/healthz", timeout=PATIENCE) as response:
        return response.status, response.read()


@pytest.fixture
def secured(functions, api):
    """Authenticated delivery, as knative/base runs it, and a deadline far past the test's own length."""
    return functions(KAI_FN_AUDIENCE=AUDIENCE, KAI_FN_SENDERS=SENDER, KAI_FN_REQUEST_SECONDS="120")


@pytest.mark.parametrize("kind", ["header", "body"])
def test_clients_dripping_a_request_hold_no_thread_healthz_and_an_authenticated_ping_are_answered(api, secured, kind):
    token = api.issue_token(*SOURCE, audiences=[AUDIENCE])
    with dripping(secured.port, kind, token) as socks:
        time.sleep(0.5)  # each dripper's opening is in; a thread-per-connection server has given each a thread
        assert healthz(secured.url) == (200, b"ok\n")
        answer = send(secured.url, ping(), timeout=PATIENCE, token=token)
        assert answer.status == 200
        assert [still_open(s) for s in socks] == [True] * DRIPPERS  # the drippers were held, not turned away


@pytest.mark.parametrize("kind", ["silent", "header", "body"])
def test_a_connection_that_does_not_deliver_its_whole_request_in_time_is_closed(api, functions, kind):
    fn = functions(KAI_FN_REQUEST_SECONDS="2")
    with socket.create_connection(("127.0.0.1", fn.port), timeout=30) as s:
        began = time.monotonic()
        if kind != "silent":
            s.sendall(opening(fn.port, kind, "no-token"))
        try:
            got = s.recv(4096)
        except ConnectionResetError:
            got = b""
        waited = time.monotonic() - began
    assert got == b""  # closed, no answer: nothing of the request reached the application
    assert waited >= 1.5  # not before its deadline (the 30 s socket timeout would have raised)
    assert healthz(fn.url) == (200, b"ok\n")
