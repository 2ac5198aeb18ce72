"""Stale, out-of-order, duplicate and delete events change nothing that was already done."""
from __future__ import annotations

import copy
import time
import uuid
from typing import Any

import pytest

from kai_fn.local.emulator import Emulator
from kai_fn.local.delivery import Adapter
from tests.ce import ref, resource
from tests.conftest import JOBSET, KAI_PG, TRAINER, seed
from tests.reliability import (
    DONE, PERIOD, Job, check_answers, deliver_all, gang_events, make_job, plant, publish, safety_violations,
    state_of,
)


def snapshot(api: Emulator, ns: str) -> dict[str, Any]:
    return {kind: api.list(api_version, kind, ns) for api_version, kind in (
        (TRAINER, "TrainJob"), (JOBSET, "JobSet"), (KAI_PG, "PodGroup"), ("v1", "Event"))}


def finish(api: Emulator, url: str, job: Job) -> None:
    assert Adapter(url, period=PERIOD).send(job.event()).statuses == [200]
    assert state_of(api, job) == (DONE, [])


def resuspend(api: Emulator, job: Job) -> None:
    live = api.get(TRAINER, "TrainJob", job.namespace, job.name)
    live["spec"]["suspend"] = True
    api.put(live)


STALE = {
    "old add after the release": ("add", "resource", None),
    "old update after the release": ("update", "resource", None),
    "ref add after the release": ("add", "ref", None),
    "old add after the user re-suspended it": ("add", "resource", resuspend),
    "old update after the user re-suspended it": ("update", "resource", resuspend),
    "ref add after the user re-suspended it": ("add", "ref", resuspend),
}


@pytest.mark.parametrize("stale", STALE, ids=list(STALE))
def test_a_stale_event_for_a_released_trainjob_changes_nothing(api, function, stale):
    action, mode, user = STALE[stale]
    job = make_job(f"rel-stale-{list(STALE).index(stale)}", "stale", str(uuid.uuid5(uuid.NAMESPACE_OID, stale)),
                   mode=mode, extras=True)
    plant(api, [job])
    finish(api, function.url, job)
    if user:
        user(api, job)
    before = snapshot(api, job.namespace)
    api.reset_calls()
    delivery = Adapter(function.url, period=PERIOD).send(job.event(action))  # job.trainjob: the unmarked copy
    assert delivery.statuses == [200]
    assert api.writes() == []
    assert snapshot(api, job.namespace) == before  # in particular, a re-suspended TrainJob stays suspended


def test_an_update_that_overtakes_its_add_is_done_once(api, function):
    job = make_job("rel-overtaken", "overtaken", "7d1e2c3b-4a5f-4e6d-9c8b-0a1b2c3d4e5f", extras=True)
    since = plant(api, [job])
    update = copy.deepcopy(job.trainjob)
    update["status"] = {"conditions": [{"type": "Suspended", "status": "True", "reason": "Suspended"}]}
    adapter = Adapter(function.url, period=PERIOD)
    assert adapter.send(resource(update, "update")).statuses == [200]
    api.reset_calls()
    assert adapter.send(job.event("add")).statuses == [200]
    assert api.writes() == []
    assert state_of(api, job) == (DONE, [])
    assert len(api.list(KAI_PG, "PodGroup", job.namespace)) == 1
    assert gang_events(api, job.namespace) == {job.uid: 1}
    assert safety_violations(api, job, since) == []


def delete_both(api: Emulator, job: Job) -> None:
    api.delete(TRAINER, "TrainJob", job.namespace, job.name)
    api.delete(JOBSET, "JobSet", job.namespace, job.name)


def replace_with_a_new_trainjob(api: Emulator, job: Job) -> None:
    delete_both(api, job)
    new = make_job(job.namespace, job.name, "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b", jobset_uid=str(uuid.uuid4()))
    seed(api, new.trainjob, new.jobset)


GONE = {
    # name: (what happens before the add arrives, its mode, the adapter's answers)
    "TrainJob and JobSet deleted, resource add": (delete_both, "resource", [200]),
    "TrainJob and JobSet deleted, ref add": (delete_both, "ref", [200]),
    "replaced by a new TrainJob of that name, resource add": (replace_with_a_new_trainjob, "resource", [200]),
}


@pytest.mark.parametrize("gone", GONE, ids=list(GONE))
def test_an_add_arriving_after_its_trainjob_was_deleted_writes_nothing(api, function, gone):
    change, mode, answers = GONE[gone]
    job = make_job(f"rel-gone-{list(GONE).index(gone)}", "gone", str(uuid.uuid5(uuid.NAMESPACE_X500, gone)),
                   mode=mode)
    plant(api, [job])
    change(api, job)
    api.reset_calls()
    started = time.perf_counter()
    delivery = Adapter(function.url, period=PERIOD).send(job.event())
    elapsed = time.perf_counter() - started
    assert delivery.statuses == answers and check_answers([delivery]) == []
    assert api.writes() == []
    assert api.get(KAI_PG, "PodGroup", job.namespace, job.pg_name) is None
    assert len(api.calls) <= 3 * len(answers)  # each try is a few reads, no storm of calls
    publish(f"Stale add: {gone}", [f"- tries {len(delivery.tries)} ({', '.join(map(str, delivery.statuses))}) in "
                                   f"{elapsed:.2f} s; API calls {len(api.calls)}, writes 0"])


def test_an_add_for_a_deleted_trainjob_whose_jobset_awaits_garbage_collection_leaves_nothing_behind(api, function):
    """Deleting a TrainJob leaves its JobSet to the garbage collector for a moment. An add arriving then may
    create a PodGroup (kai_fn cannot tell the TrainJob is gone until its PATCH gets 404), but that PodGroup is
    owned by the deleted TrainJob, so the collector removes it with the JobSet: nothing outlives the TrainJob."""
    job = make_job("rel-gone-gc", "gone", "0d9c8b7a-6f5e-4d4c-8b3a-291807f6e5d4")
    since = plant(api, [job])
    api.delete(TRAINER, "TrainJob", job.namespace, job.name)
    delivery = Adapter(function.url, period=PERIOD).send(job.event())
    assert delivery.statuses == [200]
    assert safety_violations(api, job, since) == []
    assert api.get(TRAINER, "TrainJob", job.namespace, job.name) is None
    api.collect_garbage()
    assert api.list(KAI_PG, "PodGroup", job.namespace) == [] and api.list(JOBSET, "JobSet", job.namespace) == []


DUPLICATES = {
    # name: (event ids of five deliveries, delivered at once?)
    "same id, one after another": (["dup"] * 5, False),
    "fresh ids, one after another": ([None] * 5, False),
    "same id, all at once": (["dup"] * 5, True),
    "fresh ids, all at once": ([None] * 5, True),
}


@pytest.mark.parametrize("duplicates", DUPLICATES, ids=list(DUPLICATES))
def test_duplicates_make_one_podgroup_and_one_event(api, function, duplicates):
    ids, at_once = DUPLICATES[duplicates]
    job = make_job(f"rel-dup-{list(DUPLICATES).index(duplicates)}", "dup",
                   str(uuid.uuid5(uuid.NAMESPACE_URL, duplicates)))
    since = plant(api, [job])
    adapter = Adapter(function.url, period=PERIOD)
    samples = [job.event(event_id=i) for i in ids]
    deliveries = deliver_all(adapter, samples, budget=30, threads=5 if at_once else 1)
    assert [d.statuses for d in deliveries] == [[200]] * 5
    assert state_of(api, job) == (DONE, [])
    assert [p["metadata"]["name"] for p in api.list(KAI_PG, "PodGroup", job.namespace)] == [job.pg_name]
    assert gang_events(api, job.namespace) == {job.uid: 1}
    assert safety_violations(api, job, since) == []
    if not at_once:  # after the first, a duplicate only reads
        assert sum(c.verb in ("create", "patch") and c.status in (200, 201) for c in api.writes()) == 4


def test_a_delete_event_costs_nothing(api, function):
    job = make_job("rel-delete", "deleted", "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d")
    plant(api, [job])
    delete_both(api, job)
    api.reset_calls()
    for sample in (resource(job.trainjob, "delete"), ref(job.namespace, job.name, "delete")):
        assert Adapter(function.url, period=PERIOD).send(sample).statuses == [200]
    assert api.calls == []
