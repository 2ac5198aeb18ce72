"""Reliability (issue 5), shared by tests/function/test_{api_faults,concurrent_deliveries,bad_input,stale_events}.py.

The specifications: API faults and crashes half-way, concurrent and duplicate deliveries, bad input, stale events.

Everything runs against the real function server (kai_fn.function.serve: waitress, 8 threads) and the kmock API
emulator over loopback HTTP, with the function's API timeout at 1 s (the ``functions`` fixture). Deliveries go
through :class:`kai_fn.local.delivery.Adapter`, which retries exactly as the ApiServerSource adapter does for a direct
sink, with its backoff period shortened from 50 ms to 5 ms to fit the time budget.

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
import dataclasses
import os
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import pytest

from kai_fn.core.models import Runtime, TrainJob, parse
from kai_fn.core.plan import plan
from kai_fn.core.stages import is_stage_of
from kai_fn.local.emulator import Call, Emulator, Fault
from kai_fn.commands.invoke import Sample
from kai_fn.local.delivery import Adapter, Delivery
from tests.ce import ref, resource
from tests.conftest import JOBSET, KAI_PG, TRAINER, sample_object, seed
from tests.builders import held_by_0_2

SEED = 20261202
PERIOD = 0.005  # the adapter's backoff period, shortened from 50 ms: tries 10, 20, 40, 80, 160 ms apart
MARKER = "kai-fn/podgroup"
RELEASED_AT = "kai-fn/released-at"
POD_GROUP = "pod-group-name"
QUEUE = "kai.scheduler/queue"
SUBGROUP = "kai.scheduler/subgroup-name"
SKIP = "kai.scheduler/skip-podgrouper"
MISSING = object()


def on_first(verb: str, resource_: str, fault: Fault):
    """``api.faults`` that fails only the first call of (verb, resource)."""
    fired = threading.Event()

    def faults(call: Call) -> Fault | None:
        if call.verb == verb and call.resource == resource_ and not fired.is_set():
            fired.set()
            return fault
        return None
    return faults


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
    mode: str  # the event mode: "resource" or "ref" (the TrainJob's), or "jobset" (its held JobSet's, Resource mode)
    trainjob: dict[str, Any]
    jobset: dict[str, Any]
    podgroup: dict[str, Any] | None = None  # a PodGroup of kai_fn's name that was there before kai_fn

    @property
    def pg_name(self) -> str:
        return f"pg-{self.name}-{self.uid}"

    def event(self, action: str = "add", event_id: str | None = None) -> Sample:
        if self.mode == "ref":
            return ref(self.namespace, self.name, action, event_id=event_id)
        if self.mode == "jobset":
            return resource(self.jobset, action, event_id=event_id)
        return resource(self.trainjob, action, event_id=event_id)


def make_job(namespace: str, name: str, uid: str, *, shape: str = "flat", mode: str = "resource",
             extras: bool = False, preexisting_podgroup: bool = False, jobset_uid: str | None = None) -> Job:
    """A TrainJob shaped like a sample; ``extras`` gives it (and its JobSet) keys of other owners to keep."""
    stem = "llama-finetune" if shape == "flat" else "bert-pretrain"
    tj = sample_object(f"trainjob-{stem}")
    js = held_by_0_2(sample_object(f"jobset-{stem}"))
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
    if preexisting_podgroup:  # kai_fn's own, made by an earlier pass that stopped before its patch
        runtime = runtimes(namespace)[0 if shape == "flat" else 1]
        job.podgroup = plan(parse(TrainJob, tj), parse(Runtime, runtime)).podgroup
    return job


def runtimes(namespace: str) -> list[dict[str, Any]]:
    staged = sample_object("trainingruntime-torch-llm-kai")
    staged["metadata"]["namespace"] = namespace
    return [sample_object("clustertrainingruntime-torch-kai"), staged]


def plant(api: Emulator, jobs: list[Job]) -> int:
    """Seed the jobs' namespaces (opted in), runtimes and jobs; keep the stored copies on each Job; return the first
    resourceVersion seeded."""
    namespaces = sorted({j.namespace for j in jobs})
    api.opt_in(*namespaces)
    stored = seed(api, *[rt for ns in namespaces for rt in runtimes(ns)],
                  sample_object("queue-default-parent"), sample_object("queue-team-a"))
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
    """Keys kai_fn may add to a JobSet: the skip annotation and, on pod templates, the gang's labels and annotations."""
    if path == ("metadata", "annotations", SKIP):
        return True
    return (len(path) == 9 and path[:2] == ("spec", "replicatedJobs")
            and path[3:7] == ("template", "spec", "template", "metadata")
            and (path[7], path[8]) in {("annotations", POD_GROUP), ("annotations", SKIP), ("labels", QUEUE),
                                       ("labels", SUBGROUP)})


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
    started = tj_diff.pop(("metadata", "annotations", RELEASED_AT), None)
    released = {("metadata", "annotations", MARKER): (MISSING, job.pg_name), ("spec", "suspend"): (True, False)}
    if tj_diff and tj_diff != released:
        problems.append(f"TrainJob changed beyond marker and resume: {tj_diff}")
    if (started is not None) != (tj_diff == released) or (started and started[0] is not MISSING):
        problems.append(f"{RELEASED_AT} is not written exactly with the release: {started}")
    problems += _podgroup_problems(job, pg)
    if problems:
        return INCONSISTENT, problems
    carries = pg is not None and js is not None and js["metadata"].get("annotations", {}).get(SKIP) == "true" and all(
        _names_its_gang(m.get("annotations", {}).get(POD_GROUP), job.pg_name) and QUEUE in m.get("labels", {})
        for m in pod_templates(js))
    if carries and tj_diff == released:
        return DONE, []
    if not tj_diff and js is not None and not diff(job.jobset, js):
        return (UNTOUCHED if pg is None or job.podgroup is not None else PG_ONLY), []
    if not tj_diff and carries:
        return JS_PATCHED, []
    return INCONSISTENT, [f"TrainJob changes {tj_diff}; JobSet names {named_podgroups(js) if js else 'n/a (gone)'}; "
                          f"PodGroup {'exists' if pg else 'missing'}"]


HELD = "kai-fn/held"
# The JobSet gate (the admission policy holds the JobSet; kai_fn's one patch decides it): the states a TrainJob may be
# left in when its deliveries ran out of tries. The decision is one JSON Patch of the JobSet (templates, decision,
# label removed, resumed), so there is no state between "PodGroup made" and "done": a held JobSet is still held
# (labelled, suspended, undecided), which the resync finds, and no pod exists yet.
GATE_RETRYABLE_STATES = (UNTOUCHED, PG_ONLY)


def kai_fn_decision_key(path: tuple[Any, ...], old: Any, new: Any) -> bool:
    """What kai_fn's decision may change on a held JobSet besides :func:`kai_fn_jobset_key`: the decision and the
    release time added, the hold's label removed, ``spec.suspend`` turned false."""
    if path in (("metadata", "annotations", MARKER), ("metadata", "annotations", RELEASED_AT)):
        return old is MISSING
    if path == ("metadata", "labels", HELD):
        return (old, new) == ("true", MISSING)
    if path == ("spec", "suspend"):
        return (old, new) == (True, False)
    return False


def gate_state_of(api: Emulator, job: Job) -> tuple[str, list[str]]:
    """:func:`state_of` for the JobSet gate: the TrainJob is never written; its held JobSet ends decided
    (``kai-fn/podgroup`` naming the gang, the label removed, resumed, ``kai-fn/released-at``) in the same write that
    makes its pod templates name the gang. Returns DONE, UNTOUCHED or PG_ONLY, else INCONSISTENT with the problems."""
    ns, name = job.namespace, job.name
    tj = api.get(TRAINER, "TrainJob", ns, name)
    js = api.get(JOBSET, "JobSet", ns, name)
    pg = api.get(KAI_PG, "PodGroup", ns, job.pg_name)
    problems = []
    js_diff = diff(job.jobset, js)
    for path, (old, new) in sorted(js_diff.items(), key=str):
        if old is not MISSING and not kai_fn_decision_key(path, old, new) or (
                old is MISSING and not kai_fn_jobset_key(path) and not kai_fn_decision_key(path, old, new)):
            problems.append(f"JobSet {'/'.join(map(str, path))}: {old!r} -> {new!r}")
    if tj_diff := diff(job.trainjob, tj):
        problems.append(f"the TrainJob was written: {tj_diff}")
    problems += _podgroup_problems(job, pg)
    if problems:
        return INCONSISTENT, problems
    if js is not None and not js_diff:
        return (UNTOUCHED if pg is None or job.podgroup is not None else PG_ONLY), []
    notes = (js or {}).get("metadata", {}).get("annotations") or {}
    decided = (pg is not None and notes.get(SKIP) == "true" and notes.get(MARKER) == job.pg_name
               and RELEASED_AT in notes and HELD not in (js["metadata"].get("labels") or {})
               and js["spec"].get("suspend") is False
               and all(_names_its_gang(m.get("annotations", {}).get(POD_GROUP), job.pg_name)
                       and QUEUE in m.get("labels", {}) for m in pod_templates(js)))
    if decided:
        return DONE, []
    return INCONSISTENT, [f"JobSet changes {js_diff}; JobSet names {named_podgroups(js) if js else 'n/a (gone)'}; "
                          f"PodGroup {'exists' if pg else 'missing'}"]


def _names_its_gang(named: str | None, main: str) -> bool:
    """A pod template names the TrainJob's main PodGroup, or one of its stages'."""
    return named is not None and (named == main or is_stage_of(named, main))


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
    """GangCreated Events per TrainJob uid."""
    return collections.Counter(e["involvedObject"]["uid"] for e in api.list("v1", "Event", ns)
                               if e.get("reason") == "GangCreated")


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


def on_nth(verb: str, resource_: str, n: int, fault: Fault):
    """``api.faults`` that fails only the ``n``-th call (from 1) of (verb, resource)."""
    lock, seen = threading.Lock(), [0]

    def faults(call: Call) -> Fault | None:
        if call.verb == verb and call.resource == resource_:
            with lock:
                seen[0] += 1
                return fault if seen[0] == n else None
        return None
    return faults


def _podgroup_problems(job: Any, pg: dict[str, Any] | None) -> list[str]:
    """kai_fn's PodGroup from an earlier pass is adopted as it is; one kai_fn made is owned by its TrainJob."""
    if job.podgroup is not None and pg != job.podgroup:
        return ["the PodGroup an earlier pass made was changed"]
    if pg is not None and job.podgroup is None:
        owner = pg["metadata"].get("ownerReferences") or [{}]
        if owner[0].get("uid") != job.uid or not owner[0].get("controller"):
            return ["kai_fn's PodGroup is not owned by its TrainJob"]
    return []
