"""The function as a local process: it starts on a port of its own, even when another process takes the port it was
given between choosing it and binding it (tests run side by side start functions at once)."""
from __future__ import annotations

import pytest

from kai_fn.local.process import FunctionProcess
from tests import ports


@pytest.mark.parametrize("taker", [ports.answering, ports.silent], ids=["answering-its-probe", "silent"])
def test_a_port_taken_before_the_bind_is_given_up_for_another_and_the_function_answers_there(api, taker):
    fn = FunctionProcess({"KUBECONFIG": api.kubeconfig, "KAI_FN_BACKGROUND_WORKERS": "0"})
    with taker() as taken:
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
