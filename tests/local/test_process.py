"""The function as a local process: it starts on a port of its own, even when another process takes the port it was
given between choosing it and binding it (tests run side by side start functions at once)."""
from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from kai_fn.local.process import FunctionProcess, free_port


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def squatter() -> Iterator[int]:
    """Another process's server on a port, answering every readiness probe with 200."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_squatter() -> Iterator[int]:
    """Another process's socket listening on a port and never answering: the function's bind fails and it exits."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("taker", ["squatter", "silent_squatter"])
def test_a_port_taken_before_the_bind_is_given_up_for_another_and_the_function_answers_there(api, taker, request):
    taken = request.getfixturevalue(taker)
    fn = FunctionProcess({"KUBECONFIG": api.kubeconfig, "KAI_FN_BACKGROUND_WORKERS": "0"})
    fn.port = taken
    with fn:
        assert fn.port != taken
        assert fn.listening()
        assert fn.caught_up()


def test_a_function_that_exits_before_it_answers_is_reported_with_what_it_said(tmp_path):
    fn = FunctionProcess({"KUBECONFIG": str(tmp_path / "missing")})
    with pytest.raises(RuntimeError, match="(?s)exited with 1 before it answered; it said:.*no Kubernetes API"):
        fn.start(ready_timeout=60)


def test_a_started_function_listens_on_its_own_port(api):
    with FunctionProcess({"KUBECONFIG": api.kubeconfig, "KAI_FN_BACKGROUND_WORKERS": "0"}) as fn:
        assert fn.listening()
