"""One worker at a time on a TrainJob (kai_fn/function/keylocks.py): work on one key waits for the work under way on
it, work on another key does not, and the map keeps no lock once no one holds or waits for it."""
from __future__ import annotations

import threading

from kai_fn.function.keylocks import KeyLocks


def test_work_on_one_trainjob_waits_for_the_work_under_way_and_another_trainjob_does_not():
    locks = KeyLocks()
    inside, release = threading.Event(), threading.Event()
    order: list[str] = []

    def first() -> None:
        with locks.hold(("team-a", "llama")):
            inside.set()
            assert release.wait(30)
            order.append("first done")

    def same() -> None:
        with locks.hold(("team-a", "llama")):
            order.append("same key")

    worker = threading.Thread(target=first)
    worker.start()
    assert inside.wait(30)
    waiting = threading.Thread(target=same)
    waiting.start()
    with locks.hold(("team-b", "llama")):
        order.append("other key")  # not held up by the first
    release.set()
    for thread in (worker, waiting):
        thread.join(30)
    assert order == ["other key", "first done", "same key"]


def test_no_lock_is_kept_once_no_one_holds_or_waits_for_it():
    locks = KeyLocks()
    with locks.hold(("team-a", "x")), locks.hold(("team-a", "y")):
        assert len(locks) == 2
    assert len(locks) == 0


def test_a_podgroup_event_waits_for_the_pass_of_its_trainjob_under_way(api, function, emulator):
    """In process: the gang's status of a PodGroup event is looked at only once the pass holding its TrainJob ends
    (on main it ran in the request thread beside the pass)."""
    from kai_fn.function import events, gang_status
    from kai_fn.function.cluster import CachedServer
    from kai_fn.function.optin import OptIn
    from kai_fn.settings import load
    from tests.ce import resource, send
    from tests.conftest import KAI_PG, TRAINER
    from tests.function.test_named_at_admission import NAME, NS, seed_named

    tj = seed_named(api)
    assert send(function.url, resource(tj)).headers.get("X-Kai-Fn-Outcome") == "done"
    (made,) = api.list(KAI_PG, "PodGroup", NS)
    made["status"] = {"phase": "Pending"}
    sample = resource(made, "update")
    event = events.parse(sample.headers, sample.body)
    settings = load(KUBECONFIG=emulator.kubeconfig)
    cluster = CachedServer.from_settings(settings, emulator.kubeconfig)
    outcomes: list = []
    with cluster.locks.hold((NS, NAME)):  # a pass of llama-finetune under way
        looking = threading.Thread(target=lambda: outcomes.append(
            gang_status.observe(event, cluster.session(), settings, OptIn(settings))))
        looking.start()
        looking.join(1.0)
        assert looking.is_alive() and outcomes == []
    looking.join(30)
    assert [o.name for o in outcomes] == [NAME] and api.get(TRAINER, "TrainJob", NS, NAME) is not None
