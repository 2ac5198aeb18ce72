"""What Knative's own ApiServerSource adapter does with each answer of its sink, pinned by count and order (never
by time) on the real API server: the behaviours kai_fn's answers rely on. bench/adapter.py runs the same scenarios
with timings, for the table in knative/README.md."""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from bench.adapter import Lab, answered, burst, restart, sink_down
from kai_fn.local.sink import Answer
from tests.testbed.adapters import install

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster


@pytest.fixture(scope="module")
def lab(testbed: LiveCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    install(testbed)
    lab = Lab(testbed.api, tmp_path_factory.mktemp("adapter-lab"))
    yield lab
    lab.cleanup()


ANSWERS = [
    # (id, the sink's answer to every try of one event, tries the adapter makes)
    ("2xx-once", Answer(200), 1),
    ("503-six-tries", Answer(503), 6),
    ("429-retry-after-ignored", Answer(429, headers={"Retry-After": "30"}), 6),
    ("404-six-tries", Answer(404), 6),
    ("500-once", Answer(500), 1),
    ("400-once", Answer(400), 1),
    ("401-once", Answer(401), 1),
]


@pytest.mark.parametrize("answer, tries", [a[1:] for a in ANSWERS], ids=[a[0] for a in ANSWERS])
def test_an_answer_gets_its_tries_then_the_event_is_dropped_and_the_next_one_goes(lab: Lab, answer, tries):
    got = answered(lab, answer)
    assert got.tries == tries
    assert got.dropped is (answer.status != 200)
    assert got.next_delivered and got.next_behind


def test_a_slow_answer_holds_the_namespaces_next_event_without_a_timeout(lab: Lab):
    got = answered(lab, Answer(200, delay=3.0))
    assert (got.tries, got.dropped, got.next_delivered, got.next_behind) == (1, False, True, True)


def test_one_namespace_gets_one_event_at_a_time_in_order(lab: Lab):
    got = burst(lab, 6, namespaces=1, delay=0.1)
    assert (got.delivered, got.max_in_flight, got.in_order) == (6, 1, True)


def test_each_namespace_has_a_watch_of_its_own_so_two_deliver_at_once(lab: Lab):
    got = burst(lab, 6, namespaces=2, delay=0.3)
    assert (got.delivered, got.max_in_flight, got.in_order) == (6, 2, True)


def test_while_the_sink_refuses_connections_each_event_is_dropped_after_its_own_tries(lab: Lab):
    """3 TrainJobs while nothing listens for 5 s: the first is dropped after 6 tries (3.1 s); the second is still
    being retried when the sink comes back, so it and the third arrive."""
    got = sink_down(lab, 3, down=5.0)
    assert got.failures_logged == [5]  # one event given up, after 5 retries
    assert got.delivered == ["down-1", "down-2", "after"]


def test_a_restarted_adapter_sends_no_add_for_objects_that_exist(lab: Lab):
    got = restart(lab)
    assert got.received == [("add", "after"), ("update", "before"), ("update", "while-down")]
