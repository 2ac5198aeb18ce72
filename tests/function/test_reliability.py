"""Reliability (issue 5): API faults, concurrent and duplicate deliveries, crashes half-way, bad input, stale events.

Everything runs against the real function server (functions-framework, gunicorn, 8 threads) and the kmock API
emulator over loopback HTTP, with the function's API timeout at 1 s (the ``functions`` fixture). Deliveries go
through :class:`tests.adapter.Adapter`, which retries exactly as the ApiServerSource adapter does for a direct
sink (FACTS §4), with its backoff period shortened from 50 ms to 5 ms to fit the time budget.

What every test here holds the function to:

* **Safety**: no version of a JobSet ever names a PodGroup that did not exist when that version was written
  (checked on the emulator's history, ordered by its global resourceVersion counter), and kai_fn overwrites
  nothing: a pre-existing PodGroup stays byte-identical, the TrainJob only gains its marker and loses
  ``spec.suspend: true``, the JobSet only gains kai_fn's own keys where they were absent.
* **Liveness**: every TrainJob ends done, or in a state a later delivery (or the resync) finishes.
* **Contract**: 2xx with an empty body when done, skipped or ignored; 503 with Retry-After for what a retry can
  fix, never 500 (a direct sink's adapter does not retry 500); 400/413 for bad input, with no API call.

Figures (cases, faults by kind, tries, final states) are printed (``-s``) and appended to
``$KAI_FN_RELIABILITY_REPORT`` when that is set, ready to paste into BENCHMARKS.md.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import json
import math
import os
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_fn.local.emulator import Call, Emulator, Fault
from kai_fn.local.invoke import Sample
from tests.adapter import Adapter, Delivery
from tests.ce import ping, ref, resource
from tests.conftest import JOBSET, KAI_PG, TRAINER, sample_object, seed

SEED = 20261202
PERIOD = 0.005  # the adapter's backoff period, shortened from 50 ms: tries 10, 20, 40, 80, 160 ms apart
MARKER = "kai-fn/podgroup"
POD_GROUP = "pod-group-name"
QUEUE = "kai.scheduler/queue"
SUBGROUP = "kai.scheduler/subgroup-name"
SKIP = "kai.scheduler/skip-podgrouper"
MISSING = object()


def publish(title: str, lines: list[str]) -> None:
    """Print figures for BENCHMARKS.md and append them to $KAI_FN_RELIABILITY_REPORT when set."""
    text = "\n".join([f"#### {title}", "", *lines, ""])
    print("\n" + text)
    if path := os.environ.get("KAI_FN_RELIABILITY_REPORT"):
        with open(path, "a", encoding="utf-8") as out:
            out.write(text + "\n")


# -- the TrainJobs under test ----------------------------------------------------------------------------------

@dataclasses.dataclass
class Job:
    """One TrainJob with the JobSet Trainer made for it (and maybe a PodGroup someone else made), as seeded."""

    namespace: str
    name: str
    uid: str
    shape: str  # "flat" (ClusterTrainingRuntime, one replicatedJob) or "staged" (initializers, three)
    mode: str  # the event mode: "resource" or "ref"
    trainjob: dict[str, Any]
    jobset: dict[str, Any]
    podgroup: dict[str, Any] | None = None  # a PodGroup of kai_fn's name that was there before kai_fn

    @property
    def pg_name(self) -> str:
        return f"pg-{self.name}-{self.uid}"

    def event(self, action: str = "add", event_id: str | None = None) -> Sample:
        if self.mode == "ref":
            return ref(self.namespace, self.name, action, event_id=event_id)
        return resource(self.trainjob, action, event_id=event_id)


def make_job(namespace: str, name: str, uid: str, *, shape: str = "flat", mode: str = "resource",
             extras: bool = False, preexisting_podgroup: bool = False, jobset_uid: str | None = None) -> Job:
    """A TrainJob shaped like a sample; ``extras`` gives it (and its JobSet) keys of other owners to keep."""
    stem = "llama-finetune" if shape == "flat" else "bert-pretrain"
    tj = sample_object(f"trainjob-{stem}")
    js = sample_object(f"jobset-{stem}")
    tj["metadata"].update(name=name, namespace=namespace, uid=uid)
    js["metadata"].update(name=name, namespace=namespace, uid=jobset_uid or str(uuid.uuid5(uuid.UUID(uid), "js")))
    js["metadata"]["labels"]["trainer.kubeflow.org/trainjob-name"] = name
    js["metadata"]["ownerReferences"][0].update(name=name, uid=uid)
    if extras:
        tj["metadata"].setdefault("labels", {})["example.com/team"] = "vision"
        tj["metadata"]["annotations"] = {"example.com/owner": "alice", "example.com/ticket": "ML-42"}
        js["metadata"]["annotations"] = {"example.com/note": "set by trainer"}
        pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        pod.setdefault("metadata", {}).setdefault("annotations", {})["example.com/keep"] = "yes"
        pod["metadata"].setdefault("labels", {})["example.com/app"] = "train"
    job = Job(namespace, name, uid, shape, mode, tj, js)
    if preexisting_podgroup:
        job.podgroup = {
            "apiVersion": KAI_PG, "kind": "PodGroup",
            "metadata": {"name": job.pg_name, "namespace": namespace, "labels": {"made-by": "someone-else"}},
            "spec": {"minMember": 7, "queue": "someone-elses-queue"},
        }
    return job


def runtimes(namespace: str) -> list[dict[str, Any]]:
    staged = sample_object("trainingruntime-torch-llm-kai")
    staged["metadata"]["namespace"] = namespace
    return [sample_object("clustertrainingruntime-torch-kai"), staged]


def plant(api: Emulator, jobs: list[Job]) -> int:
    """Seed runtimes and jobs; keep the stored copies on each Job; return the first resourceVersion seeded."""
    namespaces = sorted({j.namespace for j in jobs})
    stored = seed(api, *[rt for ns in namespaces for rt in runtimes(ns)])
    since = min(int(o["metadata"]["resourceVersion"]) for o in stored)
    for job in jobs:
        job.trainjob, job.jobset = seed(api, job.trainjob, job.jobset)
        if job.podgroup is not None:
            (job.podgroup,) = seed(api, job.podgroup)
    return since


def uids(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


# -- reading the outcome ---------------------------------------------------------------------------------------

def leaves(obj: Any, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    """Every scalar of a document by path; the server-owned resourceVersion/generation are left out."""
    out: dict[tuple[Any, ...], Any] = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            if path == ("metadata",) and key in ("resourceVersion", "generation", "managedFields"):
                continue
            out |= leaves(value, (*path, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out |= leaves(value, (*path, i))
    else:
        out[path] = obj
    return out


def diff(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[tuple[Any, ...], tuple[Any, Any]]:
    old, new = leaves(before or {}), leaves(after or {})
    return {p: (old.get(p, MISSING), new.get(p, MISSING)) for p in old.keys() | new.keys()
            if old.get(p, MISSING) != new.get(p, MISSING)}


def kai_fn_jobset_key(path: tuple[Any, ...]) -> bool:
    """Keys kai_fn may add to a JobSet: the skip annotation and, on pod templates, the gang's labels/annotation."""
    if path == ("metadata", "annotations", SKIP):
        return True
    return (len(path) == 9 and path[:2] == ("spec", "replicatedJobs")
            and path[3:7] == ("template", "spec", "template", "metadata")
            and (path[7], path[8]) in {("annotations", POD_GROUP), ("labels", QUEUE), ("labels", SUBGROUP)})


def pod_templates(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    return [rj["template"]["spec"]["template"].get("metadata") or {} for rj in jobset["spec"]["replicatedJobs"]]


def named_podgroups(jobset: dict[str, Any]) -> set[str]:
    return {m.get("annotations", {}).get(POD_GROUP) for m in pod_templates(jobset)} - {None}


DONE, UNTOUCHED, PG_ONLY, JS_PATCHED, INCONSISTENT = (
    "done", "untouched", "podgroup created, JobSet untouched", "JobSet patched, TrainJob not yet released",
    "inconsistent")
# States a TrainJob may be left in when its deliveries ran out of tries. Each is safe and finishes on the next
# delivery or resync, because the TrainJob is still suspended, unmarked (the resync picks exactly those), and
# its JobSet is suspended so no pod exists yet:
#   untouched - nothing written (a PodGroup that was there before kai_fn stays as it was);
#   podgroup created, JobSet untouched - the crash came after the POST: a PodGroup that no pod names yet, owned
#       by the TrainJob (so garbage-collected with it); the next pass gets 409 on it and carries on;
#   JobSet patched, TrainJob not yet released - pod templates name a PodGroup that exists; the next pass sees
#       the JobSet carries the plan and only marks and resumes the TrainJob.
RETRYABLE_STATES = (UNTOUCHED, PG_ONLY, JS_PATCHED)


def state_of(api: Emulator, job: Job) -> tuple[str, list[str]]:
    """The job's state, and every way it breaks the no-overwrite rule (which makes it inconsistent)."""
    ns, name = job.namespace, job.name
    tj = api.get(TRAINER, "TrainJob", ns, name)
    js = api.get(JOBSET, "JobSet", ns, name)
    pg = api.get(KAI_PG, "PodGroup", ns, job.pg_name)
    problems = []
    for path, (old, new) in sorted(diff(job.jobset, js).items(), key=str):
        if old is not MISSING or not kai_fn_jobset_key(path):
            problems.append(f"JobSet {'/'.join(map(str, path))}: {old!r} -> {new!r}")
    tj_diff = diff(job.trainjob, tj)
    released = {("metadata", "annotations", MARKER): (MISSING, job.pg_name), ("spec", "suspend"): (True, False)}
    if tj_diff and tj_diff != released:
        problems.append(f"TrainJob changed beyond marker and resume: {tj_diff}")
    if job.podgroup is not None and pg != job.podgroup:
        problems.append("the PodGroup that was there before kai_fn was changed")
    if pg is not None and job.podgroup is None:
        owner = pg["metadata"].get("ownerReferences") or [{}]
        if owner[0].get("uid") != job.uid or not owner[0].get("controller"):
            problems.append("kai_fn's PodGroup is not owned by its TrainJob")
    if problems:
        return INCONSISTENT, problems
    carries = pg is not None and js is not None and js["metadata"].get("annotations", {}).get(SKIP) == "true" and all(
        m.get("annotations", {}).get(POD_GROUP) == job.pg_name and QUEUE in m.get("labels", {})
        for m in pod_templates(js))
    if carries and tj_diff == released:
        return DONE, []
    if not tj_diff and js is not None and not diff(job.jobset, js):
        return (UNTOUCHED if pg is None or job.podgroup is not None else PG_ONLY), []
    if not tj_diff and carries:
        return JS_PATCHED, []
    return INCONSISTENT, [f"TrainJob changes {tj_diff}; JobSet names {named_podgroups(js) if js else 'n/a (gone)'}; "
                          f"PodGroup {'exists' if pg else 'missing'}"]


def versions_since(api: Emulator, api_version: str, kind: str, ns: str, name: str, since: int) -> list[dict]:
    """The stored versions written at or after resourceVersion ``since`` (the session's emulator keeps history)."""
    return [v for v in api.history(api_version, kind, ns, name)
            if v is not None and int(v["metadata"]["resourceVersion"]) >= since]


def first_revision(api: Emulator, api_version: str, kind: str, ns: str, name: str, since: int) -> int | None:
    revisions = [int(v["metadata"]["resourceVersion"]) for v in versions_since(api, api_version, kind, ns, name, since)]
    return min(revisions) if revisions else None


def safety_violations(api: Emulator, job: Job, since: int, jobset_writes: int = 1) -> list[str]:
    """Every JobSet version (since ``since``) that names a PodGroup not yet created when it was written, and every
    PodGroup write after its creation (kai_fn never updates a PodGroup), and a JobSet written more than once."""
    out = []
    for version in versions_since(api, JOBSET, "JobSet", job.namespace, job.name, since):
        rv = int(version["metadata"]["resourceVersion"])
        for pg in named_podgroups(version):
            born = first_revision(api, KAI_PG, "PodGroup", job.namespace, pg, since)
            if born is None or born > rv:
                out.append(f"JobSet {job.name} at resourceVersion {rv} names PodGroup {pg}, created at {born}")
    if len(versions_since(api, KAI_PG, "PodGroup", job.namespace, job.pg_name, since)) > 1:
        out.append(f"PodGroup {job.pg_name} was written after its creation")
    if len(versions_since(api, JOBSET, "JobSet", job.namespace, job.name, since)) > 1 + jobset_writes:
        out.append(f"JobSet {job.name} was written more than once")
    return out


def settle(api: Emulator, timeout: float = 5.0) -> None:
    """Wait for requests still in the emulator (a hung write lands after the function gave up on it)."""
    deadline = time.monotonic() + timeout
    while any(c.status is None for c in api.calls):
        assert time.monotonic() < deadline, "emulator requests still pending after the settle timeout"
        time.sleep(0.05)


def gang_events(api: Emulator, ns: str) -> collections.Counter[str]:
    """GangScheduled Events per TrainJob uid."""
    return collections.Counter(e["involvedObject"]["uid"] for e in api.list("v1", "Event", ns)
                               if e.get("reason") == "GangScheduled")


def shape(call: Call) -> tuple[str, str, int | None]:
    return call.verb, call.resource, call.status


def check_answers(deliveries: list[Delivery]) -> list[str]:
    """The HTTP contract on every try: 2xx with an empty body, or 503 with Retry-After; nothing else."""
    out = []
    for d in deliveries:
        for t in d.tries:
            if t.status is not None and 200 <= t.status < 300:
                if t.body:
                    out.append(f"2xx with a body: {t.body[:80]!r}")
            elif t.status == 503:
                if not t.retry_after or int(t.retry_after) <= 0:
                    out.append("503 without Retry-After")
            else:
                out.append(f"answer {t.status} ({t.error or t.body[:80]!r})")
    return out


def deliver_all(adapter: Adapter, samples: list[Sample], budget: float, threads: int = 8) -> list[Delivery]:
    """Deliver concurrently; fail (after stopping the adapter) if the lot takes longer than ``budget`` seconds."""
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(adapter.send, s) for s in samples]
        finished, pending = wait(futures, timeout=budget)
        if pending:
            adapter.stop.set()
            for f in pending:
                f.cancel()
            pytest.fail(f"wall-clock guard: {len(pending)} of {len(samples)} deliveries unfinished after {budget} s")
    return [f.result() for f in futures]


# -- the checks themselves can fail --------------------------------------------------------------------------

def rewrite(api: Emulator, api_version: str, kind: str, ns: str, name: str, change) -> None:
    obj = api.get(api_version, kind, ns, name)
    del obj["metadata"]["resourceVersion"]
    change(obj)
    api.put(obj)


def first_pod(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


TAMPERING = {
    "a container image changed": (JOBSET, "JobSet", lambda o: first_pod(o)["spec"]["containers"][0].update(
        image="other")),
    "another owner's JobSet annotation replaced": (JOBSET, "JobSet", lambda o: o["metadata"].update(
        annotations={SKIP: "true"})),
    "another owner's TrainJob annotation dropped": (TRAINER, "TrainJob", lambda o: o["metadata"]["annotations"].pop(
        "example.com/owner")),
    "TrainJob resumed without the marker": (TRAINER, "TrainJob", lambda o: o["spec"].update(suspend=False)),
    "the pre-existing PodGroup changed": (KAI_PG, "PodGroup", lambda o: o["spec"].update(minMember=1)),
}


@pytest.mark.parametrize("tampering", TAMPERING, ids=list(TAMPERING))
def test_the_state_check_calls_any_overwrite_inconsistent(api, tampering):
    api_version, kind, change = TAMPERING[tampering]
    job = make_job("rel-checks", "tampered", "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f", extras=True,
                   preexisting_podgroup=True)
    plant(api, [job])
    assert state_of(api, job) == (UNTOUCHED, [])
    rewrite(api, api_version, kind, job.namespace, job.pg_name if kind == "PodGroup" else job.name, change)
    state, problems = state_of(api, job)
    assert state == INCONSISTENT and problems


def test_the_safety_check_catches_a_jobset_naming_a_podgroup_before_it_exists(api):
    job = make_job("rel-checks", "early", "2d3e4f5a-6b7c-4d8e-9f0a-1b2c3d4e5f6a")
    since = plant(api, [job])
    rewrite(api, JOBSET, "JobSet", job.namespace, job.name, lambda o: first_pod(o).setdefault(
        "metadata", {}).setdefault("annotations", {}).update({POD_GROUP: job.pg_name}))
    seed(api, {"apiVersion": KAI_PG, "kind": "PodGroup", "metadata": {"name": job.pg_name, "namespace": job.namespace},
               "spec": {"minMember": 4, "queue": "team-a"}})
    (violation,) = safety_violations(api, job, since)
    assert f"names PodGroup {job.pg_name}, created at" in violation


# == 1. API faults ==============================================================================================

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
    for job, delivery in zip(jobs, deliveries):
        state, problems = state_of(api, job)
        assert problems == [], (job.name, problems)
        states[job.name] = state
        if delivery.acked:
            assert state == DONE, f"{job.name} was answered 2xx but is {state}"
        else:
            assert len(delivery.tries) == 6 and state in (DONE, *RETRYABLE_STATES), (job.name, state, delivery)
    after_faults = collections.Counter(states.values())

    # The resync (PingSource -> the function) picks up what the adapter gave up on, 50 per run.
    waiting = sum(1 for s in states.values() if s != DONE)
    pings = []
    for _ in range(math.ceil(waiting / 50) + 1):
        pings.append(adapter.send(ping()))
    assert check_answers(pings) == [] and all(p.acked for p in pings)
    final = collections.Counter(state_of(api, j)[0] for j in jobs)
    assert final == {DONE: FAULT_JOBS}

    violations = [v for j in jobs for v in safety_violations(api, j, since)]
    assert violations == []
    events = gang_events(api, ns)
    assert max(events.values()) == 1 and set(events) <= {j.uid for j in jobs}

    # Every original event once more (stale copies without the marker): all 2xx at once, and nothing written.
    api.reset_calls()
    again = deliver_all(adapter, [j.event() for j in jobs], budget=60)
    assert check_answers(again) == [] and all(len(d.tries) == 1 and d.acked for d in again)
    assert api.writes() == []

    tries = [len(d.tries) for d in deliveries]
    statuses = collections.Counter(t.status for d in deliveries for t in d.tries)
    publish("API faults (tests/test_reliability.py::test_under_30_percent_api_faults...)", [
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
        f"GangScheduled Events: {sum(events.values())} for {FAULT_JOBS} TrainJobs (at most 1 each; best effort)",
        f"- redelivery of all {FAULT_JOBS} stale events: {FAULT_JOBS} x 2xx at the first try, 0 writes",
        f"- wall clock: {faulted_seconds:.1f} s for the faulty deliveries",
    ])


# == 2. Concurrent duplicates ===================================================================================

@pytest.mark.parametrize("mode", ["resource", "ref"])
def test_fifty_simultaneous_deliveries_of_one_event_make_one_podgroup_and_one_jobset_write(api, function, mode):
    job = make_job("rel-concurrent-" + mode, "burst", str(uuid.uuid5(uuid.NAMESPACE_URL, mode)), mode=mode,
                   extras=True)
    since = plant(api, [job])
    sample = job.event()
    adapter = Adapter(function.url, period=PERIOD)
    barrier = threading.Barrier(50, timeout=30)
    answers: list[Delivery] = []

    def one() -> None:
        barrier.wait()
        answers.append(Delivery([adapter.post(sample)]))  # one try each: any 5xx counts

    threads = [threading.Thread(target=one) for _ in range(50)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "wall-clock guard: deliveries still running after 60 s"
    elapsed = time.perf_counter() - started

    assert check_answers(answers) == [] and [d.status for d in answers] == [200] * 50
    assert state_of(api, job) == (DONE, [])
    assert [p["metadata"]["name"] for p in api.list(KAI_PG, "PodGroup", job.namespace)] == [job.pg_name]
    assert safety_violations(api, job, since) == []
    created = [c for c in api.calls if c.verb == "create" and c.resource == "podgroups"]
    assert sum(c.status == 201 for c in created) == 1
    assert len(versions_since(api, JOBSET, "JobSet", job.namespace, job.name, since)) == 2  # seeded + one patch
    assert gang_events(api, job.namespace) == {job.uid: 1}
    calls = collections.Counter(f"{c.verb} {c.resource} {c.status}" for c in api.calls)
    publish(f"50 simultaneous deliveries of one {mode}-mode event", [
        f"- answers: 50 x 200 in {elapsed:.2f} s; PodGroups 1; JobSet versions written 1; GangScheduled Events 1",
        "- API calls: " + ", ".join(f"{k} x{n}" for k, n in sorted(calls.items())),
    ])


def test_keys_another_writer_adds_between_kai_fns_read_and_its_patch_survive(api, function):
    job = make_job("rel-interleaved", "interleaved", "3b2a1f0e-9d8c-4b7a-a695-8f7e6d5c4b3a", shape="staged")
    since = plant(api, [job])
    assert "annotations" not in job.jobset["metadata"] and pod_templates(job.jobset)[0] == {}

    def someone_else_writes_first(call: Call) -> Fault | None:
        if call.verb == "patch" and call.resource == "jobsets" and api.faults is someone_else_writes_first:
            api.faults = None  # once
            live = api.get(JOBSET, "JobSet", job.namespace, job.name)
            del live["metadata"]["resourceVersion"]  # a write: the server gives it a new one
            live["metadata"]["annotations"] = {"example.com/late": "kept?"}
            live["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {
                "labels": {"example.com/late": "kept?"}}
            api.put(live)
        return None

    api.faults = someone_else_writes_first
    assert Adapter(function.url, period=PERIOD).send(job.event()).statuses == [200]
    js = api.get(JOBSET, "JobSet", job.namespace, job.name)
    assert safety_violations(api, job, since, jobset_writes=2) == []  # the other writer's and kai_fn's
    assert js["metadata"]["annotations"].get("example.com/late") == "kept?"
    assert pod_templates(js)[0].get("labels", {}).get("example.com/late") == "kept?"


# == 3. A crash half-way ========================================================================================

def on_first(verb: str, resource_: str, fault: Fault):
    """``api.faults`` that fails only the first call of (verb, resource)."""
    fired = threading.Event()

    def faults(call: Call) -> Fault | None:
        if call.verb == verb and call.resource == resource_ and not fired.is_set():
            fired.set()
            return fault
        return None
    return faults


READ_RT, READ_JS, READ_TJ = ("get", "clustertrainingruntimes", 200), ("get", "jobsets", 200), ("get", "trainjobs", 200)
FINISH_AFTER_PODGROUP = [READ_RT, READ_JS, ("create", "podgroups", 409), ("patch", "jobsets", 200),
                         ("patch", "trainjobs", 200), ("create", "events", 201)]
FINISH_AFTER_JOBSET = [READ_RT, READ_JS, READ_TJ, ("patch", "trainjobs", 200), ("create", "events", 201)]
CRASHES = {
    # name: (the fault on the first delivery, the state it leaves, the calls of the second delivery)
    "after the PodGroup POST, the JobSet PATCH fails": (
        on_first("patch", "jobsets", Fault(status=503)), PG_ONLY, FINISH_AFTER_PODGROUP),
    "the PodGroup POST is applied but its answer is lost": (
        on_first("create", "podgroups", Fault(status=503, after=True)), PG_ONLY, FINISH_AFTER_PODGROUP),
    "the PodGroup POST hangs past the timeout and lands late": (
        on_first("create", "podgroups", Fault(hang=1.5)), PG_ONLY, FINISH_AFTER_PODGROUP),
    "after the JobSet PATCH, the TrainJob PATCH fails": (
        on_first("patch", "trainjobs", Fault(status=503)), JS_PATCHED, FINISH_AFTER_JOBSET),
    "the JobSet PATCH is applied but its answer is lost": (
        on_first("patch", "jobsets", Fault(status=500, after=True)), JS_PATCHED, FINISH_AFTER_JOBSET),
    "the JobSet PATCH hangs past the timeout and lands late": (
        on_first("patch", "jobsets", Fault(hang=1.5)), JS_PATCHED, FINISH_AFTER_JOBSET),
    "the TrainJob PATCH is applied but its answer is lost": (
        on_first("patch", "trainjobs", Fault(status=503, after=True)), DONE, [READ_RT, READ_JS, READ_TJ]),
}


@pytest.mark.parametrize("crash", CRASHES, ids=list(CRASHES))
def test_after_a_crash_half_way_the_next_delivery_finishes_with_exactly_the_missing_calls(api, function, crash):
    fault, left, second_calls = CRASHES[crash]
    job = make_job(f"rel-crash-{list(CRASHES).index(crash)}", "crash", str(uuid.uuid5(uuid.NAMESPACE_DNS, crash)),
                   extras=True)
    since = plant(api, [job])
    adapter = Adapter(function.url, period=PERIOD)
    api.faults = fault
    first = adapter.post(job.event())
    settle(api)
    api.faults = None
    assert first.status == 503 and first.retry_after, first
    assert state_of(api, job) == (left, [])
    assert safety_violations(api, job, since) == []

    api.reset_calls()
    second = adapter.post(job.event())
    assert (second.status, second.body) == (200, b"")
    assert [shape(c) for c in api.calls] == second_calls
    assert state_of(api, job) == (DONE, [])
    assert safety_violations(api, job, since) == []
    # Events are best effort: the pass whose TrainJob PATCH answer was lost wrote none, and the next had no news.
    assert gang_events(api, job.namespace) == ({} if left == DONE else {job.uid: 1})


# == 4. Bad input ===============================================================================================

FUZZ_LIMIT = 65536  # KAI_FN_MAX_BODY_BYTES of the fuzzed server, so "just under the limit" stays cheap
FUZZ_NS = "rel-fuzz"
FUZZ_UID = "0f0f0f0f-1111-4222-8333-444455556666"


def fuzz_trainjob(marked: bool) -> dict[str, Any]:
    """The base TrainJob: ``marked`` ones are done already, so a valid event for them costs no API call."""
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"].update(namespace=FUZZ_NS, name="fuzz", uid=FUZZ_UID, resourceVersion="7")
    if marked:
        tj["metadata"]["annotations"] = {MARKER: f"pg-fuzz-{FUZZ_UID}"}
    return tj


MARKED_ADD = resource(fuzz_trainjob(True), event_id="fuzz-1")
UNMARKED_ADD = resource(fuzz_trainjob(False), event_id="fuzz-2")
REF_ADD = ref(FUZZ_NS, "fuzz", event_id="fuzz-3")


@dataclasses.dataclass(frozen=True)
class Case:
    family: str
    what: str
    headers: dict[str, str]
    body: bytes | Any  # bytes, or an iterator of chunks (sent chunked, without Content-Length)
    statuses: frozenset[int]
    calls_allowed: bool = False  # False: the function must not call the API at all

    def __repr__(self) -> str:
        return f"Case({self.family}: {self.what}; statuses {sorted(self.statuses)})"


HEADER_TEXT = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
NOT_A_STRING = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.lists(
    st.integers(), max_size=2) | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
NOT_A_DNS_NAME = NOT_A_STRING | st.sampled_from(
    ["", "Upper", "under_score", "-leading", "trailing-", "dots..dots", "x" * 254, "spa ce", "ünï"])
NOT_A_DNS_LABEL = NOT_A_DNS_NAME | st.sampled_from(["a.b", "x" * 64])


def body_of(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@st.composite
def garbage_bodies(draw) -> Case:
    """Valid Ce-* headers of a resource add, a body that is not a TrainJob."""
    if draw(st.booleans()):
        body = draw(st.binary(max_size=2048))
        what = f"{len(body)} random bytes"
    else:
        value = draw(JSON)
        body, what = body_of(value), f"random JSON {type(value).__name__}"
    return Case("garbage body", what, dict(MARKED_ADD.headers), body, frozenset({400}))


IDENTITY_FIELDS = {  # path in the resource-mode data -> values that make the event unusable
    ("kind",): NOT_A_STRING | st.sampled_from(["", "trainjob", "Pod", "JobSet"]),
    ("apiVersion",): NOT_A_STRING | st.sampled_from(["", "trainer.kubeflow.org/v1", "v1", "kubeflow.org/v1"]),
    ("metadata",): NOT_A_STRING.filter(lambda v: not isinstance(v, dict)) | st.just("metadata"),
    ("metadata", "name"): NOT_A_DNS_NAME,
    ("metadata", "namespace"): NOT_A_DNS_LABEL,
    ("metadata", "uid"): NOT_A_STRING | st.just(""),
}
REF_FIELDS = {("kind",): IDENTITY_FIELDS[("kind",)], ("apiVersion",): IDENTITY_FIELDS[("apiVersion",)],
              ("name",): NOT_A_DNS_NAME, ("namespace",): NOT_A_DNS_LABEL}


def set_path(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        doc = doc[part]
    if value is MISSING:
        del doc[path[-1]]
    else:
        doc[path[-1]] = value


@st.composite
def broken_identities(draw) -> Case:
    """A TrainJob (or ref) with one identifying field removed or given a value of the wrong type or syntax."""
    is_ref = draw(st.booleans())
    sample = REF_ADD if is_ref else MARKED_ADD
    fields = REF_FIELDS if is_ref else IDENTITY_FIELDS
    path = draw(st.sampled_from(sorted(fields)))
    value = draw(st.just(MISSING) | fields[path])
    data = json.loads(sample.body)
    set_path(data, path, value)
    what = f"{'ref' if is_ref else 'resource'} data.{'.'.join(path)} " + (
        "removed" if value is MISSING else f"= {json.dumps(value)[:40]}")
    return Case("broken identity", what, dict(sample.headers), body_of(data), frozenset({400}))


REQUIRED = ("Ce-Specversion", "Ce-Id", "Ce-Source", "Ce-Type")
OPTIONAL = ("Ce-Subject", "Ce-Time", "Ce-Kind", "Ce-Apiversion", "Ce-Name", "Ce-Namespace", "Content-Type")
NEAR_MISS_TYPES = ["dev.knative.apiserver.resource.patch", "dev.knative.apiserver.pod.add",
                   "dev.knative.apiserver.resource", "dev.knative.apiserver.", "dev.knative.sources.pingx",
                   "DEV.KNATIVE.APISERVER.RESOURCE.ADD", "dev.knative.apiserver.resource.add.extra"]


def header_expectation(name: str, value: str | None) -> frozenset[int]:
    """What the CloudEvents contract says of one header changed on a valid event for a marked TrainJob."""
    if value is not None:
        value = value.strip()  # HTTP trims optional whitespace around a header value
    if name in REQUIRED and value is None:
        return frozenset({400})  # a required attribute missing
    if name == "Ce-Specversion":
        return frozenset({200} if value in ("1.0", "0.3") else {400})
    if name in ("Ce-Id", "Ce-Type") and not value:
        return frozenset({400})
    if name == "Content-Type" and value and value.startswith("application/cloudevents+json"):
        return frozenset({400})  # structured mode, but the body is a bare TrainJob
    return frozenset({200})  # other types and kinds are ignored; the rest is not read (valid: marked -> skipped)


@st.composite
def mangled_headers(draw) -> Case:
    """One Ce-* header dropped, emptied or garbled (type and kind also set to near misses)."""
    headers = {**MARKED_ADD.headers, "Content-Type": "application/json"}
    name = draw(st.sampled_from(REQUIRED + OPTIONAL))
    choices = st.none() | st.just("") | HEADER_TEXT
    if name == "Ce-Type":
        choices = choices.filter(lambda v: v is None or not v.startswith("dev.knative")) | st.sampled_from(
            NEAR_MISS_TYPES)
    if name == "Ce-Specversion":
        choices = choices | st.sampled_from(["1.0", "0.3", "1", "2.0", "1.0.0"])
    if name == "Content-Type":
        choices = choices | st.sampled_from(["application/cloudevents+json", "text/plain",
                                             "application/cloudevents-batch+json"])
    value = draw(choices)
    if value is None:
        del headers[name]
    else:
        headers[name] = value
    if draw(st.booleans()):  # header names are case-insensitive
        headers = {k.lower(): v for k, v in headers.items()}
    return Case("mangled header", f"{name} {'dropped' if value is None else '= ' + repr(value)}", headers,
                MARKED_ADD.body, header_expectation(name, value))


@st.composite
def ignorable(draw) -> Case:
    """Valid events kai_fn has nothing to do for: deletes, other kinds, other sources' types: 2xx, no call."""
    which = draw(st.sampled_from(["delete", "kind", "type"]))
    sample = draw(st.sampled_from([MARKED_ADD, UNMARKED_ADD, REF_ADD]))
    headers, data = dict(sample.headers), json.loads(sample.body)
    if which == "delete":
        headers["Ce-Type"] = headers["Ce-Type"].rsplit(".", 1)[0] + ".delete"
        what = headers["Ce-Type"]
    elif which == "kind":
        kind = draw(st.sampled_from(["Pod", "JobSet", "TrainingRuntime", "trainjob"]) | HEADER_TEXT.filter(
            lambda k: k != "TrainJob"))
        headers["Ce-Kind"] = data["kind"] = kind
        what = f"kind {kind!r}"
    else:
        headers["Ce-Type"] = draw(HEADER_TEXT.filter(lambda t: not t.startswith("dev.knative")))
        what = f"type {headers['Ce-Type']!r}"
    return Case("ignorable", what, headers, body_of(data), frozenset({200}))


def padded(sample: Sample, size: int) -> bytes:
    """The sample's TrainJob with a padding annotation making the body exactly ``size`` bytes (if it can)."""
    data = json.loads(sample.body)
    data["metadata"].setdefault("annotations", {})["example.com/padding"] = ""
    room = size - len(body_of(data))
    data["metadata"]["annotations"]["example.com/padding"] = "p" * max(room, 0)
    body = body_of(data)
    assert len(body) == size, (len(body), size)
    return body


@st.composite
def sizes(draw) -> Case:
    """Bodies at the limit: just under it (valid or not), over it, and over it in chunks with no Content-Length."""
    kind = draw(st.sampled_from(["valid under", "garbage under", "over", "chunked over"]))
    headers = dict(MARKED_ADD.headers)
    if kind == "valid under":
        size = FUZZ_LIMIT - draw(st.integers(0, 64))
        return Case("size", f"valid {size} bytes", headers, padded(MARKED_ADD, size), frozenset({200}))
    if kind == "garbage under":
        size = FUZZ_LIMIT - draw(st.integers(0, 64))
        body = (b'{"kind": "TrainJob", "x": "' + b"y" * FUZZ_LIMIT)[:size]  # cut short: not JSON
        return Case("size", f"truncated JSON {size} bytes", headers, body, frozenset({400}))
    size = FUZZ_LIMIT + draw(st.integers(1, 4096))
    body = padded(MARKED_ADD, size)
    if kind == "over":
        return Case("size", f"valid but {size} bytes", headers, body, frozenset({413}))
    chunk = draw(st.integers(1024, 16384))
    chunks = [body[i:i + chunk] for i in range(0, len(body), chunk)]
    return Case("size", f"{size} bytes in {len(chunks)} chunks", headers, iter(chunks), frozenset({413}))


SPEC_PATHS = st.sampled_from([
    ("spec",), ("spec", "runtimeRef"), ("spec", "runtimeRef", "name"), ("spec", "runtimeRef", "kind"),
    ("spec", "runtimeRef", "apiGroup"), ("spec", "trainer"), ("spec", "trainer", "numNodes"),
    ("spec", "trainer", "resourcesPerNode"), ("spec", "trainer", "resourcesPerNode", "requests"),
    ("spec", "trainer", "resourcesPerNode", "requests", "nvidia.com/gpu"), ("spec", "suspend"),
    ("metadata", "labels"), ("metadata", "labels", QUEUE), ("metadata", "annotations"),
    ("metadata", "annotations", "kai-fn/hold"), ("metadata", "deletionTimestamp"), ("status",),
])


@st.composite
def mangled_specs(draw) -> Case:
    """A well-formed event whose TrainJob has a field removed or replaced by any JSON: the planner must cope."""
    data = json.loads(UNMARKED_ADD.body)
    path = draw(SPEC_PATHS)
    value = draw(st.just(MISSING) | JSON | NOT_A_STRING)
    parent = data
    for part in path[:-1]:
        parent = parent.setdefault(part, {}) if isinstance(parent, dict) else parent
    if value is MISSING:
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = value
    what = f"data.{'.'.join(path)} " + ("removed" if value is MISSING else f"= {json.dumps(value)[:40]}")
    # No JobSet exists: a plannable TrainJob is 503 (JobSet not created yet), anything else 2xx (ignored or warned);
    # labels and annotations that are not maps of strings are refused at the door.
    allowed = {200, 503} | ({400} if path[:2] in (("metadata", "labels"), ("metadata", "annotations")) else set())
    return Case("mangled TrainJob", what, dict(UNMARKED_ADD.headers), body_of(data), frozenset(allowed),
                calls_allowed=True)


@pytest.mark.parametrize("annotations", [True, 5, 0.5, "kai-fn/podgroup", "kai-fn/skipped"],
                         ids=["true", "int", "float", "marker-string", "skipped-string"])
def test_a_trainjob_whose_annotations_are_not_a_map_is_refused_not_a_500(api, function, annotations):
    data = json.loads(UNMARKED_ADD.body)
    data["metadata"]["annotations"] = annotations
    api.reset_calls()
    answer = requests.post(function.url, data=body_of(data), headers=UNMARKED_ADD.headers, timeout=10)
    assert answer.status_code == 400, answer.text[:200]
    assert answer.text.strip() == "data.metadata.annotations: must be a map of strings"
    assert api.calls == []


FUZZ_CASES = 1200
CASES = st.one_of(garbage_bodies(), broken_identities(), mangled_headers(), ignorable(), sizes(), mangled_specs())


@pytest.mark.slow
def test_fuzzed_headers_and_bodies_get_their_status_and_only_a_warning_event_is_ever_written(api, functions):
    """1,200 hypothesis cases (derandomized) against the real server with a 64 KiB body limit, on a cluster
    holding only the runtime (no TrainJob, no JobSet): each case's family fixes the statuses it may get."""
    fn = functions(KAI_FN_MAX_BODY_BYTES=str(FUZZ_LIMIT))
    seed(api, sample_object("clustertrainingruntime-torch-kai"))
    tally: collections.Counter[tuple[str, int]] = collections.Counter()
    session = requests.Session()
    started = time.perf_counter()

    @settings(max_examples=FUZZ_CASES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(case=CASES)
    def one(case: Case) -> None:
        assert time.perf_counter() - started < 150, "wall-clock guard: the fuzz ran over 150 s"
        api.reset_calls()
        response = session.post(fn.url, data=case.body, headers=case.headers, timeout=10)
        tally[(case.family, response.status_code)] += 1
        assert response.status_code in case.statuses, (case, response.text[:200])
        if response.status_code < 300:
            assert response.content == b""
        elif response.status_code == 503:
            assert int(response.headers["Retry-After"]) > 0
        else:
            assert len(response.text.strip().splitlines()) == 1, response.text  # one line saying why
        if not case.calls_allowed or response.status_code in (400, 413):
            assert api.calls == [], (case, [shape(c) for c in api.calls])
        # The only write a bad TrainJob may cause is a Warning Event on it.
        bad = [c for c in api.writes() if not (c.resource == "events" and (c.body or {}).get("type") == "Warning")]
        assert bad == [], (case, [shape(c) for c in bad])

    with session:
        one()
    elapsed = time.perf_counter() - started
    assert requests.get(fn.url + "/healthz", timeout=5).status_code == 200
    assert sum(tally.values()) >= 1000
    families: dict[str, dict[int, int]] = collections.defaultdict(dict)
    for (family, status), n in sorted(tally.items()):
        families[family][status] = n
    publish("Bad input (hypothesis, derandomized)", [
        f"- cases: {sum(tally.values())} in {elapsed:.1f} s against the real server "
        f"(KAI_FN_MAX_BODY_BYTES={FUZZ_LIMIT}); 0 unexpected statuses; no write but Warning Events; "
        "GET /healthz 200 after",
        *[f"- {family}: " + ", ".join(f"{s} x{n}" for s, n in statuses.items())
          for family, statuses in families.items()],
    ])


# == 5. Stale and out-of-order events ===========================================================================

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
