"""Stale, out-of-order, duplicate and delete events change nothing that was already done.

In the JobSet gate the events are the TrainJob's (Resource or Reference mode) and its held JobSet's (Resource mode);
the TrainJob is never written, and the decision is one write of the JobSet. A process that decided a JobSet answers
the later events of its TrainJob with no call; another process (a replica, a restart) reads, and writes nothing.
"""
from __future__ import annotations

import collections
import copy
import time
import uuid
from typing import Any

import pytest

from kai_fn.local.emulator import Emulator
from kai_fn.local.delivery import Adapter
from tests.ce import ref, resource
from tests.conftest import JOBSET, KAI_PG, TRAINER, opt_in_read, seed
from tests.reliability import (
    DONE, PERIOD, Job, check_answers, deliver_all, gang_events, gate_state_of, make_job, plant, publish,
    safety_violations,
)


def snapshot(api: Emulator, ns: str) -> dict[str, Any]:
    return {kind: api.list(api_version, kind, ns) for api_version, kind in (
        (TRAINER, "TrainJob"), (JOBSET, "JobSet"), (KAI_PG, "PodGroup"), ("v1", "Event"))}


def finish(api: Emulator, url: str, job: Job) -> None:
    assert Adapter(url, period=PERIOD).send(job.event()).statuses == [200]
    assert gate_state_of(api, job) == (DONE, [])


def resuspend(api: Emulator, job: Job) -> None:
    """Its author suspends the TrainJob; Trainer suspends its JobSet with it."""
    for api_version, kind in ((TRAINER, "TrainJob"), (JOBSET, "JobSet")):
        live = api.get(api_version, kind, job.namespace, job.name)
        live["spec"]["suspend"] = True
        api.put(live)


STALE = {
    # name: (the stale event's action, its mode, what happened since the release)
    "old add after the release": ("add", "resource", None),
    "old update after the release": ("update", "resource", None),
    "ref add after the release": ("add", "ref", None),
    "the held JobSet's old update after the release": ("update", "jobset", None),
    "old add after the user re-suspended it": ("add", "resource", resuspend),
    "old update after the user re-suspended it": ("update", "resource", resuspend),
    "ref add after the user re-suspended it": ("add", "ref", resuspend),
    "the held JobSet's old add after the user re-suspended it": ("add", "jobset", resuspend),
}


@pytest.mark.parametrize("replica", [False, True], ids=["the process that decided it", "another process"])
@pytest.mark.parametrize("stale", STALE, ids=list(STALE))
def test_a_stale_event_for_a_released_trainjob_changes_nothing(api, functions, stale, replica):
    action, mode, user = STALE[stale]
    function = functions()
    job = make_job(f"rel-stale-{list(STALE).index(stale)}", "stale",
                   str(uuid.uuid5(uuid.NAMESPACE_OID, f"{stale}-{replica}")), mode=mode, extras=True)
    plant(api, [job])
    finish(api, function.url, job)
    if user:
        user(api, job)
    before = snapshot(api, job.namespace)
    api.reset_calls()
    url = functions(KAI_FN_MAX_BODY_BYTES="4194303").url if replica else function.url
    delivery = Adapter(url, period=PERIOD).send(job.event(action))  # job.trainjob/jobset: the copies before it
    assert delivery.statuses == [200]
    assert api.writes() == []
    assert snapshot(api, job.namespace) == before  # in particular, a re-suspended TrainJob stays suspended
    if not replica and mode != "ref":  # remembered by uid; a Reference-mode event carries none
        assert api.calls == []


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
    assert gate_state_of(api, job) == (DONE, [])
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
    "TrainJob and JobSet deleted, the held JobSet's add": (delete_both, "jobset", [200]),
    "replaced by a new TrainJob of that name, resource add": (replace_with_a_new_trainjob, "resource", [200]),
    "replaced by a new TrainJob of that name, the old held JobSet's add": (replace_with_a_new_trainjob, "jobset",
                                                                           [200]),
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
    calls = [c for c in api.calls if not opt_in_read(c)]  # the opted-in namespaces' LIST is no read of the job
    assert len(calls) <= 3 * len(answers)  # each try is a few reads, no storm of calls
    assert {(c.verb, c.resource) for c in calls} <= {("get", "trainjobs"), ("get", "jobsets")}
    publish(f"Stale add: {gone}", [f"- tries {len(delivery.tries)} ({', '.join(map(str, delivery.statuses))}) in "
                                   f"{elapsed:.2f} s; API calls {len(calls)}, writes 0"])


@pytest.mark.parametrize("mode", ["resource", "jobset"], ids=["TrainJob add", "held JobSet add"])
def test_an_add_for_a_deleted_trainjob_whose_jobset_awaits_garbage_collection_leaves_nothing_behind(api, function,
                                                                                                    mode):
    """Deleting a TrainJob leaves its JobSet (still held) to the garbage collector for a moment. An add arriving
    then reads the TrainJob first (its body is not trusted), finds it gone and makes nothing: nothing outlives the
    TrainJob."""
    job = make_job(f"rel-gone-gc-{mode}", "gone", str(uuid.uuid5(uuid.NAMESPACE_X500, f"gc-{mode}")), mode=mode)
    since = plant(api, [job])
    api.delete(TRAINER, "TrainJob", job.namespace, job.name)
    api.reset_calls()
    delivery = Adapter(function.url, period=PERIOD).send(job.event())
    assert delivery.statuses == [200]
    assert api.writes() == []
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


@pytest.mark.parametrize("mode", ["resource", "jobset"], ids=["TrainJob events", "held JobSet events"])
@pytest.mark.parametrize("duplicates", DUPLICATES, ids=list(DUPLICATES))
def test_duplicates_make_one_podgroup_one_decision_and_one_event(api, function, duplicates, mode):
    ids, at_once = DUPLICATES[duplicates]
    job = make_job(f"rel-dup-{list(DUPLICATES).index(duplicates)}-{mode}", "dup",
                   str(uuid.uuid5(uuid.NAMESPACE_URL, f"dup-{duplicates}-{mode}")), mode=mode)
    since = plant(api, [job])
    adapter = Adapter(function.url, period=PERIOD)
    samples = [job.event(event_id=i) for i in ids]
    deliveries = deliver_all(adapter, samples, budget=30, threads=5 if at_once else 1)
    assert [d.statuses for d in deliveries] == [[200]] * 5
    assert gate_state_of(api, job) == (DONE, [])
    assert [p["metadata"]["name"] for p in api.list(KAI_PG, "PodGroup", job.namespace)] == [job.pg_name]
    assert gang_events(api, job.namespace) == {job.uid: 1}
    assert safety_violations(api, job, since) == []
    succeeded = collections.Counter((c.verb, c.resource) for c in api.writes() if c.status in (200, 201))
    assert succeeded == {("create", "podgroups"): 1, ("patch", "jobsets"): 1, ("create", "events"): 1}
    if not at_once:  # after the first, a duplicate costs no call: this process decided its JobSet
        assert sum(1 for c in api.calls if (c.verb, c.resource) == ("get", "trainjobs")) == 1


def test_a_delete_event_costs_nothing(api, function):
    job = make_job("rel-delete", "deleted", "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d")
    plant(api, [job])
    delete_both(api, job)
    api.reset_calls()
    samples = (resource(job.trainjob, "delete"), ref(job.namespace, job.name, "delete"), resource(job.jobset, "delete"))
    answers = [Adapter(function.url, period=PERIOD).send(sample).statuses for sample in samples]
    assert answers == [[200]] * 3
    assert api.calls == []
