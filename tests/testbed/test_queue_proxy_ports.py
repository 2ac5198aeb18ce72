"""Knative Serving's real queue-proxy (kai_fn/local/queue_proxy.py) starts on ports of its own even when another
process takes one between choosing it and binding it: the tiers run side by side, and each starts servers."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from kai_fn.local.process import REPO
from kai_fn.local.queue_proxy import QueueProxy, service_settings
from tests import ports

SERVICE = yaml.safe_load((REPO / "knative" / "base" / "service.yaml").read_text())


@pytest.fixture
def user_port() -> Iterator[int]:
    """A stand-in for the function: its readiness probe is answered 200."""
    with ports.answering() as port:
        yield port


@pytest.fixture
def taken() -> Iterator[int]:
    with ports.silent("") as port:
        yield port


@pytest.mark.parametrize("port", ["admin_port", "metrics_port", "request_metrics_port"])
def test_a_port_taken_before_the_bind_is_given_up_for_another_and_queue_proxy_is_ready(user_port, taken, port):
    qp = QueueProxy(service_settings([SERVICE]), user_port)
    setattr(qp, port, taken)
    with qp:
        assert qp.ready()
        assert taken not in (qp.port, qp.admin_port, qp.metrics_port, qp.request_metrics_port)


def test_a_serving_port_the_caller_fixed_and_another_process_holds_is_reported_not_waited_on(user_port, taken):
    qp = QueueProxy(service_settings([SERVICE]), user_port, port=taken)
    with pytest.raises(RuntimeError, match="ports were taken by other processes three times"):
        qp.start(ready_timeout=30)
    assert not qp.running
