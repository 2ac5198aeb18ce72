"""KAI_FN_BACKGROUND_WORKERS (knative/base sets it): TrainJob events answered 202 before any API call, reconciled
right after by the function's work queue, with the guarantees of the per-delivery contract: one gang per
TrainJob however many deliveries, nothing ever naming a PodGroup that does not exist, every held JobSet decided (and
the TrainJob never written) once the queue is idle or after the resync, under API faults too. The events are the
TrainJob's and its held JobSet's; the resync offers every held JobSet to the queue, and a started process queues
them on its first request (its catch-up). Real function server, kmock emulator; every wait bounded.
"""
from __future__ import annotations

import collections
import json
import math
import random
import threading
import time
import uuid

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kai_fn.local.delivery import Adapter, Delivery
from kai_fn.local.emulator import Fault
from kai_fn.local.process import FunctionProcess
from tests.ce import ping, resource, send
from tests.builders import owned_by
from tests.conftest import JOBSET, KAI_PG, TRAINER, opt_in_read, sample_object, seed
from tests.function.test_api_faults import RandomFaults
from tests.function.test_function import NAME, NS, verbs
from tests.function.test_gang_status import fresh, seed_held_llama
from tests.reliability import (
    DONE, PERIOD, SEED, check_answers, deliver_all, gang_events, gate_state_of, make_job, plant, publish,
    safety_violations, settle, uids, versions_since,
)
from tests.builders import held_by_0_2

WORKERS = {"KAI_FN_BACKGROUND_WORKERS": "4"}


@pytest.fixture
def worked(functions, api):
    return functions(**WORKERS)


@pytest.fixture
def patient(functions, api):
    """With workers and an API timeout longer than the passes are held back in the test (Fault.until)."""
    return functions(**WORKERS, KAI_FN_API_TIMEOUT_SECONDS="60")


def work_metrics(url: str) -> dict[str, float]:
    text = requests.get(f"{url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kai_fn_work_queue":
                out["queue"] = sample.value
            elif sample.name == "kai_fn_work_total":
                out[sample.labels["outcome"]] = sample.value
    return out


def idle(url: str, timeout: float = 60.0) -> None:
    """Until the function's work queue is empty (nothing queued, waiting to retry, or running)."""
    end = time.monotonic() + timeout
    while work_metrics(url).get("queue", 0) != 0:
        assert time.monotonic() < end, f"wall-clock guard: the work queue not idle after {timeout} s"
        time.sleep(0.02)


def assert_decided(api, uid: str) -> None:
    """The llama's held JobSet decided and released with its gang; its TrainJob never written."""
    pg = f"pg-{NAME}-{uid}"
    js = api.get(JOBSET, "JobSet", NS, NAME)
    assert [p["metadata"]["name"] for p in api.list(KAI_PG, "PodGroup", NS)] == [pg]
    assert js["metadata"]["annotations"]["kai-fn/podgroup"] == pg and "kai-fn/held" not in js["metadata"]["labels"]
    assert js["spec"]["suspend"] is False
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    assert "kai-fn/podgroup" not in (tj["metadata"].get("annotations") or {})
    assert not [c for c in api.writes() if c.resource == "trainjobs"]


def held_jobset(api) -> dict:
    return api.get(JOBSET, "JobSet", NS, NAME)


@pytest.mark.parametrize("trigger", ["TrainJob", "JobSet"])
def test_a_new_trainjob_is_answered_202_before_any_api_call_and_reconciled_right_after(api, worked, trigger):
    uid = fresh()
    tj = seed_held_llama(api, uid)
    api.reset_calls()
    answer = send(worked.url, resource(tj if trigger == "TrainJob" else held_jobset(api)))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome"), answer.body) == (202, "accepted", "")
    idle(worked.url)
    assert ("create", "podgroups") in verbs(api) and ("patch", "jobsets") in verbs(api)
    assert_decided(api, uid)


def test_an_event_of_a_trainjob_this_process_decided_costs_no_call_and_is_not_queued(api, worked):
    tj = seed_held_llama(api, fresh())
    held = held_jobset(api)
    send(worked.url, resource(tj))
    idle(worked.url)
    before = work_metrics(worked.url)
    api.reset_calls()
    answers = [send(worked.url, resource(body, "update")) for body in (tj, held)]  # the copies before the decision
    assert [(a.status, a.headers.get("X-Kai-Fn-Outcome")) for a in answers] == [(200, "skipped")] * 2
    assert api.calls == []
    assert work_metrics(worked.url) == before


def test_an_add_before_its_jobset_makes_the_gang_first_and_writes_nothing_else(api, worked):
    """The PodGroup exists before Trainer makes the JobSet (and so before any pod): a JobSet the earlier version's
    policy held is then decided by its own event, one named at admission needs nothing more."""
    uid = fresh()
    tj = seed_held_llama(api, uid)
    api.delete(JOBSET, "JobSet", NS, NAME)  # Trainer has not made it yet
    api.reset_calls()
    assert send(worked.url, resource(tj)).status == 202
    idle(worked.url)
    assert [(c.method, c.resource) for c in api.writes()] == [("POST", "podgroups"), ("POST", "events")]
    assert [p["metadata"]["name"] for p in api.list(KAI_PG, "PodGroup", NS)] == [f"pg-{NAME}-{uid}"]
    (js,) = seed(api, owned_by(held_by_0_2(sample_object("jobset-llama-finetune")), uid))  # held as it is made
    assert send(worked.url, resource(js)).status == 202  # the JobSet source's event
    idle(worked.url)
    assert_decided(api, uid)


@pytest.mark.parametrize("mode", ["resource", "ref", "jobset"])
def test_fifty_simultaneous_deliveries_make_one_podgroup_one_jobset_write_and_one_event(api, patient, mode):
    worked = patient
    job = make_job("bg-concurrent-" + mode, "burst", str(uuid.uuid5(uuid.NAMESPACE_URL, "bg" + mode)), mode=mode,
                   extras=True)
    since = plant(api, [job])
    # Every API call waits until all 50 are answered (they need none but the opted-in namespaces' LIST, cached for
    # KAI_FN_NAMESPACE_CACHE_SECONDS but for these tests): the deliveries all land while the first pass runs, however
    # the machine's load spreads them, so the queue coalesces them into one more pass at most.
    answered = threading.Event()
    api.faults = lambda call: None if opt_in_read(call) else Fault(until=answered)
    adapter = Adapter(worked.url, period=PERIOD)
    barrier = threading.Barrier(50, timeout=30)
    answers: list[Delivery] = []

    def one() -> None:
        barrier.wait()
        answers.append(Delivery([adapter.post(job.event())]))

    threads = [threading.Thread(target=one) for _ in range(50)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join(60)
    finally:
        answered.set()
        api.faults = None
    assert not any(t.is_alive() for t in threads), "wall-clock guard: deliveries still running after 60 s"
    idle(worked.url)
    assert check_answers(answers) == [] and {d.status for d in answers} <= {200, 202}
    assert gate_state_of(api, job) == (DONE, [])
    assert [p["metadata"]["name"] for p in api.list(KAI_PG, "PodGroup", job.namespace)] == [job.pg_name]
    assert safety_violations(api, job, since) == []
    assert len(versions_since(api, JOBSET, "JobSet", job.namespace, job.name, since)) == 2  # seeded + one patch
    assert gang_events(api, job.namespace) == {job.uid: 1}
    passes = sum(1 for c in api.calls if (c.verb, c.resource) == ("get", "jobsets"))
    assert passes <= 2, f"{passes} passes for one TrainJob: queued events did not coalesce into one running, one next"


def test_a_failed_pass_is_tried_again_by_the_function_without_a_redelivery(api, worked):
    uid = fresh()
    tj = seed_held_llama(api, uid)
    failures = {"left": 2}

    def faults(call):
        if (call.verb, call.resource) == ("patch", "jobsets") and failures["left"]:
            failures["left"] -= 1
            return Fault(status=503)
        return None

    before = work_metrics(worked.url)
    api.faults = faults
    assert send(worked.url, resource(tj)).status == 202
    idle(worked.url, timeout=30)
    api.faults = None
    assert_decided(api, uid)
    after = work_metrics(worked.url)
    assert after.get("retry", 0) - before.get("retry", 0) == 2
    assert after.get("done", 0) - before.get("done", 0) == 1


BG_JOBS = 80


@pytest.mark.slow
def test_under_30_percent_api_faults_every_trainjob_ends_done_once_idle_or_after_the_resync(api, worked):
    rng = random.Random(SEED + 1)
    ns = "bg-faults"
    jobs = [make_job(ns, f"job-{i:03d}", uids(rng), shape="staged" if i % 5 == 4 else "flat",
                     mode="ref" if i % 3 == 0 else "resource", extras=i % 2 == 1, preexisting_podgroup=i % 10 == 7)
            for i in range(BG_JOBS)]
    since = plant(api, jobs)
    faults = RandomFaults(SEED + 1, 0.30)
    adapter = Adapter(worked.url, period=PERIOD)
    started = time.perf_counter()
    api.faults = faults
    try:
        deliveries = deliver_all(adapter, [j.event() for j in jobs], budget=60)
        idle(worked.url, timeout=120)
        settle(api)
    finally:
        api.faults = None
    faulted = time.perf_counter() - started
    assert check_answers(deliveries) == []
    after_faults = collections.Counter()
    for job in jobs:
        state, problems = gate_state_of(api, job)
        assert problems == [], (job.name, problems)
        after_faults[state] += 1
    assert sum(after_faults.values()) == BG_JOBS
    counts = work_metrics(worked.url)

    pings = [adapter.send(ping()) for _ in range(math.ceil(BG_JOBS / 50) + 1)]
    idle(worked.url)
    assert check_answers(pings) == [] and all(p.acked for p in pings)
    assert collections.Counter(gate_state_of(api, j)[0] for j in jobs) == {DONE: BG_JOBS}
    assert [v for j in jobs for v in safety_violations(api, j, since)] == []
    events = gang_events(api, ns)
    assert max(events.values()) == 1

    api.reset_calls()
    again = deliver_all(adapter, [j.event() for j in jobs], budget=60)
    idle(worked.url)
    assert check_answers(again) == [] and api.writes() == []
    statuses = collections.Counter(t.status for d in deliveries for t in d.tries)
    publish("API faults with KAI_FN_BACKGROUND_WORKERS=4 (tests/function/test_background_work.py)", [
        f"- cases: {BG_JOBS} TrainJobs, 30% of API calls faulty ({sum(faults.injected.values())} of {faults.calls}), "
        f"seed {SEED + 1}; answers: " + ", ".join(f"{k} x{n}" for k, n in sorted(statuses.items(), key=str)),
        "- passes after the answer so far: " + ", ".join(f"{k} {int(v)}" for k, v in sorted(counts.items())
                                                          if k != "queue"),
        "- states once the queue was idle: " + ", ".join(f"{k} {n}" for k, n in after_faults.most_common()),
        f"- resync: {len(pings)} pings -> done {BG_JOBS}/{BG_JOBS}; safety violations 0; wall clock {faulted:.1f} s",
        f"- redelivery of all {BG_JOBS} stale events: 0 writes",
    ])


def test_the_answer_and_the_work_after_it_each_log_one_json_line(api, emulator, tmp_path):
    path = tmp_path / "log"
    with path.open("wb") as log, FunctionProcess({"KUBECONFIG": emulator.kubeconfig, **WORKERS}, log=log) as fn:
        assert work_metrics(fn.url).get("queue", 0) == 0  # its catch-up has ended (start), on an empty cluster
        tj = seed_held_llama(api, fresh())
        assert send(fn.url, resource(tj, event_id="id-1")).status == 202
        idle(fn.url)
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    (answer,) = [line for line in lines if line.get("msg") == "event"]
    (work,) = [line for line in lines if line.get("msg") == "work"]
    assert (answer["status"], answer["outcome"], answer["api_calls"], answer["id"]) == (202, "accepted", 0, "id-1")
    assert (work["outcome"], work["attempt"], work["id"], work["name"]) == ("done", 1, "id-1", "llama-finetune")
    assert work["api_calls"] >= 5 and work["waited_ms"] >= 0 and work["ms"] > 0 and work["podgroup"].startswith("pg-")


def test_a_graceful_stop_finishes_the_passes_already_answered_202(api, emulator, tmp_path):
    uid = fresh()
    path = tmp_path / "log"
    with path.open("wb") as log:
        fn = FunctionProcess({"KUBECONFIG": emulator.kubeconfig, **WORKERS}, log=log).start()
        try:
            tj = seed_held_llama(api, uid)  # once its catch-up has ended: only the event's pass is queued
            api.faults = lambda call: Fault(hang=1.5) if (call.verb, call.resource) == ("get", "jobsets") else None
            assert send(fn.url, resource(tj)).status == 202
            fn.stop()  # SIGTERM, as Knative stops a pod; the pass is still waiting for its JobSet GET
        finally:
            fn.kill()
    api.faults = None
    assert_decided(api, uid)
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    assert [(e["queued"], e["left"]) for e in lines if e.get("msg") == "drained"] == [(1, 0)]


def test_the_resync_offers_every_held_jobset_to_the_queue_at_once(api, worked):
    """More held JobSets than KAI_FN_RESYNC_LIMIT (no event brought them): one ping queues them all."""
    rng = uuid.UUID(int=SEED).int
    jobs = [make_job("bg-resync", f"held-{i}", str(uuid.UUID(int=rng + i, version=4))) for i in range(12)]
    since = plant(api, jobs)
    answer = send(worked.url, ping())
    assert answer.status == 200
    idle(worked.url)
    assert collections.Counter(gate_state_of(api, j)[0] for j in jobs) == {DONE: len(jobs)}
    assert [v for j in jobs for v in safety_violations(api, j, since)] == []


def test_a_started_process_queues_the_held_jobsets_owed_on_its_first_request(api, emulator):
    """Its catch-up: work owed while no function ran starts at once, not at the next ping. The readiness probe is
    the first request (FunctionProcess.start polls /healthz)."""
    uid = fresh()
    seed_held_llama(api, uid)
    with FunctionProcess({"KUBECONFIG": emulator.kubeconfig, **WORKERS}) as fn:
        end = time.monotonic() + 30
        while (held_jobset(api)["metadata"].get("annotations") or {}).get("kai-fn/podgroup") is None:
            assert time.monotonic() < end, "wall-clock guard: the catch-up did not decide the held JobSet in 30 s"
            time.sleep(0.05)
        idle(fn.url)
    assert_decided(api, uid)
