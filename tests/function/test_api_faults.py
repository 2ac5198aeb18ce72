"""Under API faults, and after a crash half-way, every TrainJob ends done or in a state the next delivery finishes.

In the JobSet gate: the PodGroups, then one guarded patch that decides the held JobSet (templates, the decision, the
hold's label removed, resumed); the TrainJob is never written (tests/reliability.py ``gate_state_of``).
"""
from __future__ import annotations

import collections
import math
import random
import threading
import time
import uuid

import pytest

from kai_fn.local.emulator import Call, Fault
from kai_fn.local.delivery import Adapter
from tests.ce import ping
from tests.conftest import opt_in_read
from tests.reliability import (
    on_first,
    DONE, GATE_RETRYABLE_STATES, PERIOD, PG_ONLY, SEED, UNTOUCHED, check_answers, deliver_all, gang_events,
    gate_state_of, make_job, plant, publish, safety_violations, settle, shape, uids,
)

FAULT_KINDS: dict[str, tuple[float, Fault]] = {  # share of the faults, and the fault
    "500": (0.20, Fault(status=500)),
    "503": (0.20, Fault(status=503)),
    "429": (0.15, Fault(status=429, retry_after=1)),
    "hang 1.5 s (applied late)": (0.20, Fault(hang=1.5)),
    "lost response (applied, then 500)": (0.25, Fault(status=500, after=True)),
}


class RandomFaults:
    """``api.faults``: a seeded share of all API calls fail, of a kind drawn by FAULT_KINDS' weights."""

    def __init__(self, seed: int, rate: float) -> None:
        self.rng, self.rate, self.lock = random.Random(seed), rate, threading.Lock()
        self.calls = 0
        self.injected: collections.Counter[str] = collections.Counter()
        self.by_call: collections.Counter[str] = collections.Counter()

    def __call__(self, call: Call) -> Fault | None:
        with self.lock:
            self.calls += 1
            if self.rng.random() >= self.rate:
                return None
            kind = self.rng.choices(list(FAULT_KINDS), [w for w, _ in FAULT_KINDS.values()])[0]
            self.injected[kind] += 1
            self.by_call[f"{call.verb} {call.resource}"] += 1
            return FAULT_KINDS[kind][1]


FAULT_JOBS = 200
FAULT_RATE = 0.30


@pytest.mark.slow
def test_under_30_percent_api_faults_every_trainjob_ends_done_or_retryable_and_the_resync_finishes_all(
        api, function):
    rng = random.Random(SEED)
    ns = "rel-faults"
    jobs = [make_job(ns, f"job-{i:03d}", uids(rng), shape="staged" if i % 5 == 4 else "flat",
                     mode="ref" if i % 3 == 0 else "resource", extras=i % 2 == 1, preexisting_podgroup=i % 10 == 7)
            for i in range(FAULT_JOBS)]
    since = plant(api, jobs)
    faults = RandomFaults(SEED, FAULT_RATE)
    adapter = Adapter(function.url, period=PERIOD)
    started = time.perf_counter()

    api.faults = faults
    try:
        deliveries = deliver_all(adapter, [j.event() for j in jobs], budget=120)
        settle(api)
    finally:
        api.faults = None
    faulted_seconds = time.perf_counter() - started

    assert check_answers(deliveries) == []
    states = {}
    assert len(deliveries) == len(jobs) == FAULT_JOBS
    for job, delivery in zip(jobs, deliveries, strict=True):
        state, problems = gate_state_of(api, job)
        assert problems == [], (job.name, problems)
        states[job.name] = state
        if delivery.acked:
            assert state == DONE, f"{job.name} was answered 2xx but is {state}"
        else:
            assert len(delivery.tries) == 6 and state in (DONE, *GATE_RETRYABLE_STATES), (job.name, state, delivery)
    after_faults = collections.Counter(states.values())

    # The resync (PingSource -> the function) picks up the JobSets still held that the adapter gave up on, 50 per run.
    waiting = sum(1 for s in states.values() if s != DONE)
    pings = []
    for _ in range(math.ceil(waiting / 50) + 1):
        pings.append(adapter.send(ping()))
    assert check_answers(pings) == [] and all(p.acked for p in pings)
    final = collections.Counter(gate_state_of(api, j)[0] for j in jobs)
    assert final == {DONE: FAULT_JOBS}

    violations = [v for j in jobs for v in safety_violations(api, j, since)]
    assert violations == []
    events = gang_events(api, ns)
    assert max(events.values()) == 1 and set(events) <= {j.uid for j in jobs}

    # Every original event once more (the TrainJobs as submitted): all 2xx at once, and nothing written.
    api.reset_calls()
    again = deliver_all(adapter, [j.event() for j in jobs], budget=60)
    assert check_answers(again) == [] and all(len(d.tries) == 1 and d.acked for d in again)
    assert api.writes() == []

    tries = [len(d.tries) for d in deliveries]
    statuses = collections.Counter(t.status for d in deliveries for t in d.tries)
    publish("API faults (tests/function/test_api_faults.py::test_under_30_percent_api_faults...)", [
        f"- cases: {FAULT_JOBS} TrainJobs ({sum(j.shape == 'staged' for j in jobs)} staged, "
        f"{sum(j.mode == 'ref' for j in jobs)} in ref mode, {sum(j.podgroup is not None for j in jobs)} with a "
        f"pre-existing PodGroup), delivered by 8 adapter threads, seed {SEED}",
        f"- API calls while faulty: {faults.calls}; faults injected: {sum(faults.injected.values())} "
        f"({sum(faults.injected.values()) / faults.calls:.0%}): "
        + ", ".join(f"{k} {n}" for k, n in sorted(faults.injected.items())),
        "- faults by call: " + ", ".join(f"{k} {n}" for k, n in sorted(faults.by_call.items())),
        f"- tries: {sum(tries)} ({sum(tries) / len(tries):.2f} per event, max {max(tries)}); answers: "
        + ", ".join(f"{k} x{n}" for k, n in sorted(statuses.items(), key=str)),
        f"- acked by the adapter: {sum(d.acked for d in deliveries)}; gave up after 6 tries: "
        f"{sum(not d.acked for d in deliveries)}",
        "- states after the faulty deliveries: " + ", ".join(f"{k} {n}" for k, n in after_faults.most_common()),
        f"- resync: {len(pings)} pings -> done {final[DONE]}/{FAULT_JOBS}; safety violations 0; "
        f"GangCreated Events: {sum(events.values())} for {FAULT_JOBS} TrainJobs (at most 1 each; best effort)",
        f"- redelivery of all {FAULT_JOBS} original events: {FAULT_JOBS} x 2xx at the first try, 0 writes",
        f"- wall clock: {faulted_seconds:.1f} s for the faulty deliveries",
    ])



READ_RT, READ_JS, READ_TJ = ("get", "clustertrainingruntimes", 200), ("get", "jobsets", 200), ("get", "trainjobs", 200)
# Delivery is unauthenticated here, so each pass starts from a GET of the TrainJob, not from the event's copy.
READ_QUEUES = ("list", "queues", 200)  # the queue pre-check before a new gang (no cache in these tests)
DECIDE = ("patch", "jobsets", 200)  # the one patch: templates, decision, the hold's label, resume
FULL_PASS = [READ_TJ, READ_JS, READ_RT, READ_QUEUES, ("create", "podgroups", 201), DECIDE, ("create", "events", 201)]
# The PodGroup of the gang's name exists: it is read, found to be kai_fn's own, and adopted (kai_fn/core/adopt.py).
FINISH_AFTER_PODGROUP = [READ_TJ, READ_JS, READ_RT, READ_QUEUES, ("create", "podgroups", 409), ("get", "podgroups", 200),
                         DECIDE, ("create", "events", 201)]
DECIDED_ALREADY = [READ_TJ, READ_JS]  # the JobSet names its gang: nothing left to do
CRASHES = {
    # name: (the fault on the first delivery, the state it leaves, the calls of the second delivery)
    "the TrainJob GET fails": (on_first("get", "trainjobs", Fault(status=500)), UNTOUCHED, FULL_PASS),
    "the JobSet GET hangs past the timeout": (on_first("get", "jobsets", Fault(hang=1.5)), UNTOUCHED, FULL_PASS),
    "the runtime GET is throttled": (
        on_first("get", "clustertrainingruntimes", Fault(status=429, retry_after=1)), UNTOUCHED, FULL_PASS),
    "after the PodGroup POST, the JobSet PATCH fails": (
        on_first("patch", "jobsets", Fault(status=503)), PG_ONLY, FINISH_AFTER_PODGROUP),
    "the PodGroup POST is applied but its answer is lost": (
        on_first("create", "podgroups", Fault(status=503, after=True)), PG_ONLY, FINISH_AFTER_PODGROUP),
    "the PodGroup POST hangs past the timeout and lands late": (
        on_first("create", "podgroups", Fault(hang=1.5)), PG_ONLY, FINISH_AFTER_PODGROUP),
    "the JobSet PATCH is applied but its answer is lost": (
        on_first("patch", "jobsets", Fault(status=500, after=True)), DONE, DECIDED_ALREADY),
    "the JobSet PATCH hangs past the timeout and lands late": (
        on_first("patch", "jobsets", Fault(hang=1.5)), DONE, DECIDED_ALREADY),
}


@pytest.mark.parametrize("crash", CRASHES, ids=list(CRASHES))
def test_after_a_crash_half_way_the_next_delivery_finishes_with_exactly_the_missing_calls(api, function, crash):
    fault, left, second_calls = CRASHES[crash]
    job = make_job(f"rel-crash-{list(CRASHES).index(crash)}", "crash",
                   str(uuid.uuid5(uuid.NAMESPACE_DNS, f"gate {crash}")), extras=True)
    since = plant(api, [job])
    adapter = Adapter(function.url, period=PERIOD)
    api.faults = fault
    first = adapter.post(job.event())
    settle(api)
    api.faults = None
    assert first.status == 503 and first.retry_after, first
    assert gate_state_of(api, job) == (left, [])
    assert safety_violations(api, job, since) == []

    api.reset_calls()
    second = adapter.post(job.event())
    assert (second.status, second.body) == (200, b"")
    assert [shape(c) for c in api.calls if not opt_in_read(c)] == second_calls
    assert gate_state_of(api, job) == (DONE, [])
    assert safety_violations(api, job, since) == []
    # Events are best effort: the pass whose JobSet PATCH answer was lost wrote none, and the next had no news.
    assert gang_events(api, job.namespace) == ({} if left == DONE else {job.uid: 1})
