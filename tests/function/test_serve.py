"""The function's server (kai_fn/function/serve.py): its bounds follow the settings, a body too large is refused from
its Content-Length before any of it is read, a client holding every connection is cut off at the deadline, and
SIGTERM answers the requests in hand before the process exits."""
from __future__ import annotations

import json
import signal
import socket
import threading
import time
import urllib.request
from contextlib import ExitStack

from kai_fn.function.serve import BODY_SLACK, BUFFERED_BYTES, adjustments
from kai_fn.local.emulator.faults import Fault
from kai_fn.local.process import FunctionProcess
from kai_fn.settings import load
from tests.ce import Answer, ping, send


def test_the_servers_bounds_follow_the_settings():
    limits = adjustments(load(KAI_FN_THREADS="8", KAI_FN_REQUEST_SECONDS="30", KAI_FN_MAX_BODY_BYTES="4194304"))
    body = 4194304 + BODY_SLACK
    assert (limits["threads"], limits["channel_timeout"], limits["max_request_body_size"]) == (8, 30, body)
    assert limits["connection_limit"] == 63 and limits["connection_limit"] * body <= BUFFERED_BYTES
    assert limits["inbuf_overflow"] >= body, "bodies stay in memory, never in /tmp (a 16 MiB emptyDir)"
    few = adjustments(load(KAI_FN_THREADS="64", KAI_FN_MAX_BODY_BYTES=str(BUFFERED_BYTES)))
    assert few["connection_limit"] == 64 + 8  # never fewer than the threads and a few to spare


def test_a_body_over_the_servers_cap_is_refused_from_its_content_length_before_it_is_sent(functions, api):
    fn = functions(KAI_FN_MAX_BODY_BYTES="2048")
    with socket.create_connection(("127.0.0.1", fn.port), timeout=30) as s:
        s.sendall(f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {100 * 1024 * 1024}\r\n\r\n".encode())
        answer = s.recv(4096).decode()
    assert answer.startswith("HTTP/1.1 413 ")
    assert api.calls == []


def test_a_request_in_hand_at_sigterm_is_answered_then_the_process_exits(api, emulator):
    held = threading.Event()
    api.faults = lambda call: Fault(until=held) if call.verb == "list" else None
    answers: list[Answer] = []
    with FunctionProcess({"KUBECONFIG": emulator.kubeconfig, "KAI_FN_BACKGROUND_WORKERS": "0"}) as fn:
        sender = threading.Thread(target=lambda: answers.append(send(fn.url, ping(), timeout=30)))
        sender.start()
        end = time.monotonic() + 30
        while not [c for c in api.calls if c.verb == "list"]:
            assert time.monotonic() < end, "wall-clock guard: the ping's resync made no LIST in 30 s"
            time.sleep(0.05)
        fn.proc.send_signal(signal.SIGTERM)  # as Knative stops the pod, the resync's LIST still held
        time.sleep(2)  # past the loop's next maintenance (every second): a server that stopped there lost the answer
        held.set()
        sender.join(30)
        code = fn.proc.wait(30)
    api.faults = None
    assert [a.status for a in answers] == [200] and code == 0


def test_a_client_holding_every_connection_is_cut_off_at_the_deadline_and_the_log_says_so(emulator, tmp_path):
    """The residual cost of a slow client (docs/security.md): with every connection held, a new one waits in the
    listen backlog until the deadline frees the held ones, and waitress's warning is one of kai_fn's JSON lines."""
    settings = {"KUBECONFIG": emulator.kubeconfig, "KAI_FN_THREADS": "2", "KAI_FN_REQUEST_SECONDS": "2",
                "KAI_FN_MAX_BODY_BYTES": str(BUFFERED_BYTES)}  # connections: 2 threads + 8
    path = tmp_path / "log"
    with path.open("wb") as log, FunctionProcess(settings, log=log) as fn, ExitStack() as held:
        for _ in range(2 + 8):
            held.enter_context(socket.create_connection(("127.0.0.1", fn.port), timeout=30)).sendall(b"GET / HTTP/1.1\r\n")
        with urllib.request.urlopen(f"{fn.url}/healthz", timeout=30) as response:
            answer = (response.status, response.read())
    assert answer == (200, b"ok\n")
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    assert any(line["level"] == "warning" and "connection limit" in line["msg"] for line in lines)
