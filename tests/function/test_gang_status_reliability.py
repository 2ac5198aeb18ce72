"""The gang's status under faults, duplicates and reordering: never a wrong report, never the same one twice.

Deliveries go through :class:`kai_fn.local.delivery.Adapter` (the ApiServerSource's retries for a direct sink). The test
plays KAI: it writes the PodGroup's conditions and binds pods, then delivers the PodGroup updates a watch would
have seen, in order, shuffled, duplicated or all at once. In the JobSet gate the bound mark goes on the gang's main
PodGroup (a merge patch), never on the TrainJob.
"""
from __future__ import annotations

import copy
import random
import threading

import pytest

from kai_fn.local.emulator import Call, Fault
from kai_fn.local.delivery import Adapter, Delivery
from tests.ce import ping, resource, send
from tests.conftest import KAI_PG, TRAINER
from tests.function.test_function import NAME, NS
from tests.function.test_gang_status import (
    NO_ROOM, OVER_LIMIT, bound_mark, fresh, kai_says, pg_of, place, released, status_events, trainjob_writes,
)
from tests.reliability import PERIOD, SEED, check_answers, settle

FAULTS = {"503": Fault(status=503), "hang 1.5 s": Fault(hang=1.5), "lost response": Fault(status=500, after=True)}
STEPS = [("get", "trainjobs"), ("get", "jobsets"), ("list", "pods"), ("get", "podgroups"), ("create", "events"),
         ("patch", "podgroups")]


def once(verb: str, resource_: str, fault: Fault):
    """Fail the first call of that verb and resource, then let everything through."""
    lock, fired = threading.Lock(), []

    def faults(call: Call) -> Fault | None:
        with lock:
            if not fired and (call.verb, call.resource) == (verb, resource_):
                fired.append(call)
                return fault
        return None
    return faults, fired


@pytest.mark.parametrize("fault", FAULTS.values(), ids=list(FAULTS))
@pytest.mark.parametrize("step", STEPS, ids=[f"{v} {r}" for v, r in STEPS])
@pytest.mark.parametrize("bound", [False, True], ids=["unschedulable", "bound"])
def test_a_fault_on_any_call_of_the_status_path_ends_in_exactly_the_one_right_report(api, function, bound, step,
                                                                                       fault):
    released(api, function.url, fresh())
    pg = kai_says(api, *([] if bound else [OVER_LIMIT]))
    place(api, 4, 4 if bound else 0)
    api.reset_calls()
    api.faults, fired = once(*step, fault)
    delivery = Adapter(function.url, period=PERIOD).send(resource(pg, "update"))
    settle(api)
    api.faults = None
    assert check_answers([delivery]) == []
    if not delivery.acked:  # the adapter gave up: the resync is what repairs it
        assert Adapter(function.url, period=PERIOD).send(ping()).acked
    expected = ["GangBound"] if bound else ["GangUnschedulable"]
    assert status_events(api) == expected, (delivery.statuses, fired)
    assert (bound_mark(api) is not None) == bound
    assert trainjob_writes(api) == []


def test_every_step_of_the_status_paths_is_faulted_by_some_case(api, function):
    """The table above is not vacuous: each of its calls is made by the unschedulable or the bound path."""
    made = set()
    for bound in (False, True):
        released(api, function.url, fresh())
        pg = kai_says(api, *([] if bound else [OVER_LIMIT]))
        place(api, 4, 4 if bound else 0)
        api.reset_calls()
        assert send(function.url, resource(pg, "update")).status == 200
        made |= {(c.verb, c.resource) for c in api.calls}
        api.delete(TRAINER, "TrainJob", NS, NAME)
        api.collect_garbage()
        for p in api.list("v1", "Pod", NS):
            api.delete("v1", "Pod", NS, p["metadata"]["name"])
    assert set(STEPS) <= made, set(STEPS) - made


def test_thirty_simultaneous_deliveries_of_the_bound_update_post_one_gang_bound(api, function):
    pg = released(api, function.url, fresh())
    place(api, 4, 4)
    adapter = Adapter(function.url, period=PERIOD)
    barrier = threading.Barrier(30, timeout=30)
    answers: list[Delivery] = []

    def one() -> None:
        barrier.wait()
        answers.append(adapter.send(resource(pg, "update")))

    threads = [threading.Thread(target=one) for _ in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "wall-clock guard: deliveries still running after 60 s"
    assert check_answers(answers) == [] and all(d.acked for d in answers)
    assert status_events(api) == ["GangBound"] and bound_mark(api) is not None


@pytest.mark.parametrize("seed", range(6))
def test_the_updates_of_a_gangs_life_in_any_order_and_repeated_report_nothing_wrong_and_nothing_twice(
        api, function, seed):
    """KAI says NO_ROOM, then OVER_LIMIT, then allocates; the binder binds. The watch's updates arrive shuffled,
    some twice. Whatever the order: GangBound once at the end, and no GangUnschedulable after it."""
    rng = random.Random(SEED + seed)
    released(api, function.url, fresh())
    place(api, 4, 0)
    history = [copy.deepcopy(kai_says(api, NO_ROOM)), copy.deepcopy(kai_says(api, OVER_LIMIT)),
               copy.deepcopy(kai_says(api))]
    place(api, 4, 4)
    updates = history + rng.sample(history, 2)
    rng.shuffle(updates)
    adapter = Adapter(function.url, period=PERIOD)
    deliveries = [adapter.send(resource(u, "update")) for u in updates]
    assert check_answers(deliveries) == []
    events = sorted((e for e in api.list("v1", "Event", NS)), key=lambda e: int(e["metadata"]["resourceVersion"]))
    reasons = [e["reason"] for e in events if e["reason"] in ("GangUnschedulable", "GangBound")]
    assert reasons == ["GangBound"], "KAI's reasons had passed by the time any update arrived: pods were bound"
    assert bound_mark(api) is not None


@pytest.mark.parametrize("seed", range(4))
def test_while_the_gang_waits_late_updates_never_bring_back_a_reason_kai_no_longer_gives(api, function, seed):
    rng = random.Random(SEED + 100 + seed)
    released(api, function.url, fresh())
    pg_name = pg_of(api)
    place(api, 4, 0)
    first, second = copy.deepcopy(kai_says(api, NO_ROOM)), copy.deepcopy(kai_says(api, OVER_LIMIT))
    updates = [first, second, first, second]
    rng.shuffle(updates)
    for update in updates:
        Adapter(function.url, period=PERIOD).send(resource(update, "update"))
    messages = {e["message"] for e in api.list("v1", "Event", NS) if e["reason"] == "GangUnschedulable"}
    assert messages == {f"PodGroup {pg_name}: OverLimit (queue team-a): {OVER_LIMIT['message']}."}
    assert api.get(KAI_PG, "PodGroup", NS, pg_name)["status"]["schedulingConditions"][0]["reasons"] == [OVER_LIMIT]


GONE_BEFORE_THE_MARK = {"the TrainJob deleted": (TRAINER, "TrainJob"), "the PodGroup deleted": (KAI_PG, "PodGroup")}


@pytest.mark.parametrize("kind", GONE_BEFORE_THE_MARK.values(), ids=list(GONE_BEFORE_THE_MARK))
def test_a_gang_deleted_between_the_read_and_the_bound_mark_is_ignored_not_a_500(api, function, kind):
    """Deleting the TrainJob takes its PodGroup with it (garbage collection): either way the mark's PATCH gets 404."""
    pg = released(api, function.url, fresh())
    name = pg["metadata"]["name"]
    place(api, 4, 4)

    def delete_before_the_mark(call: Call) -> Fault | None:
        if call.verb == "patch" and call.resource == "podgroups":
            if kind[1] == "TrainJob":
                api.delete(TRAINER, "TrainJob", NS, NAME)
            api.delete(KAI_PG, "PodGroup", NS, name)  # with the TrainJob, as its garbage collector would
        return None

    api.faults = delete_before_the_mark
    answer = Adapter(function.url, period=PERIOD).send(resource(pg, "update"))
    api.faults = None
    assert answer.statuses == [200] and answer.tries[0].body == b""
    assert status_events(api) == ["GangBound"]  # posted before the mark, on the TrainJob as it was
    assert api.get(KAI_PG, "PodGroup", NS, name) is None
