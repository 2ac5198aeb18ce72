"""A burst of TrainJobs with faults, at scale: chain scenario 4's burst, and ``python -m bench faults``.

TrainJobs are submitted back to back over a few namespaces, every ``blocked_every``-th one for kai_fn to refuse (no
such Queue, or one too small); meanwhile the function is killed every ``kill_every`` seconds, the API server restarted
once, and the TrainJob and JobSet adapters replaced late (their lost events left to the resync). :func:`run` records
pods, BindRequests, PodGroups, TrainJobs, Events and the function's log; :class:`Record` judges it, each check
returning what broke its rule.
"""
from __future__ import annotations

import json
import math
import re
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from kai_fn.core import keys
from kai_fn.core.state import gang_names
from kai_fn.local import faults, k8s
from kai_fn.local.chain import TRAINER, Chain
from kai_fn.local.objwatch import BIND_REQUESTS, KAI_PODGROUPS, ObjectWatch
from kai_fn.local.podwatch import PodSeen, PodWatch
from kai_fn.local.process import read_from
from kai_fn.local.realchain import submit, trainjob

QUEUE_API = ("scheduling.run.ai", "v2", "queues")
BLOCKED = ("QueueNotFound", "GangExceedsQueue")
ADAPTERS = ("trainjobs", "jobsets", "podgroups")  # knative/base's ApiServerSources, kai-fn-<name>
STILL_READS = 30  # unheard(): the reads after which the JobSets made suffice, the TrainJobs still or not
_STAGE = re.compile(r"-stage-(\d+)$")
_RESYNC_DONE = re.compile(r"^resync: \d+ owed a pass; (?:[^;]*?, )?(\d+) (?:done|queued)")


@dataclass(frozen=True)
class Burst:
    jobs: int = 30
    namespaces: int = 2
    pods: int = 2
    blocked_every: int = 10
    kill_every: float = 10.0
    kills: int = 4
    settle: float = 180.0

    @property
    def gangs(self) -> int:
        return sum(1 for i in range(self.jobs) if self.refusal(i) is None)

    @property
    def nodes(self) -> str:
        """simnodes: room for every gang at once, 8 GPUs a node."""
        return f"{max(1, math.ceil(self.gangs * self.pods / 8))}x8"

    def refusal(self, i: int) -> str | None:
        """The Warning TrainJob ``i`` must end with, or None for one that must bind."""
        if not self.blocked_every or i % self.blocked_every != self.blocked_every - 1:
            return None
        return BLOCKED[(i // self.blocked_every) % 2]


@dataclass(frozen=True)
class Job:
    namespace: str
    name: str
    refusal: str | None  # BLOCKED reason, or None: must bind whole

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Record:
    """What one burst saw; the checks read only this."""

    burst: Burst
    jobs: list[Job]
    created: dict[str, float] = field(default_factory=dict)  # job key -> time.monotonic() of its create call
    trainjobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # job key -> as at the end
    jobsets: dict[str, dict[str, Any]] = field(default_factory=dict)  # job key -> its JobSet, as at the end
    warnings: dict[str, set[str]] = field(default_factory=dict)  # job key -> reasons of kai_fn's Warnings
    pods: dict[str, list[PodSeen]] = field(default_factory=dict)  # job key -> its pods as watched
    binds: set[str] = field(default_factory=set)  # namespace/pod with a BindRequest
    podgroups: dict[str, dict[str, Any]] = field(default_factory=dict)  # namespace/name -> as last seen
    missing_podgroups: list[str] = field(default_factory=list)  # pods bound while their PodGroup did not exist
    log: list[dict[str, Any]] = field(default_factory=list)  # the function's JSON lines during the burst
    dropped: dict[str, int] = field(default_factory=dict)  # events each adapter gave up on ("failed to send")
    unheard: set[str] = field(default_factory=set)  # job keys made while the TrainJob and JobSet adapters were down
    faults: dict[str, list[float]] = field(default_factory=dict)  # what was done, and when
    fault_errors: list[str] = field(default_factory=list)
    began: float = 0.0
    faults_over: float = 0.0
    settled: float | None = None

    # -- the checks -------------------------------------------------------------------------------------------
    def unsettled(self) -> list[str]:
        """Every TrainJob ends bound whole (its gang made, its JobSet running, every pod on a node) or blocked (no
        PodGroup, with kai_fn's Warning saying why); neither the TrainJob nor its JobSet is ever suspended."""
        return [f"{job.key}: {why}" for job in self.jobs if (why := self._unsettled(job))]

    def _unsettled(self, job: Job) -> str | None:
        tj = self.trainjobs.get(job.key)
        if tj is None:
            return "not found"
        if tj["spec"].get("suspend") is True:
            return "the TrainJob was suspended"
        js = self.jobsets.get(job.key) or {"metadata": {}, "spec": {}}
        if js["spec"].get("suspend") is True:
            return "its JobSet was suspended"
        if job.refusal:
            if job.key in self._released():
                return f"its gang was made, though it must be refused with {job.refusal}"
            return None if job.refusal in self.warnings.get(job.key, ()) else f"no {job.refusal} Warning"
        if job.key not in self._released():
            return f"no gang made (Warnings: {sorted(self.warnings.get(job.key, ()))})"
        live = [p for p in self.pods.get(job.key, []) if p.gone_at is None]
        bound = sum(1 for p in live if p.node)
        return None if len(live) == self.burst.pods and bound == len(live) else f"{bound}/{len(live)} pods bound"

    def partly_bound(self) -> list[str]:
        """No pod is bound outside a whole gang: a gang's bound count only goes from 0 to all of it (no bound pod
        gone, every pod there bound, as many as the gang), every bound pod was bound by KAI (a BindRequest) and names
        a PodGroup whose minMember is the whole gang; a refused TrainJob has no pod bound. A pod made and gone
        without ever being bound is no part of the gang (the Job controller makes one again when an API server
        restart loses its create's answer, then deletes the extra: :meth:`made_again`)."""
        out = []
        for job in self.jobs:
            seen = self.pods.get(job.key, [])
            if job.refusal and (placed := [p.name for p in seen if p.node]):
                out.append(f"{job.key}: refused, yet {len(placed)} pods bound")
            bound = [p for p in seen if p.node]
            if job.refusal or not bound:
                continue
            live = [p for p in seen if p.gone_at is None]
            if gone := [p.name for p in bound if p.gone_at is not None]:
                out.append(f"{job.key}: bound pods gone {gone}")
            if len(live) != self.burst.pods or any(not p.node for p in live):
                out.append(f"{job.key}: {sum(1 for p in live if p.node)}/{len(live)} pods bound, for a gang of "
                           f"{self.burst.pods}")
            if unbid := [p.name for p in bound if f"{job.namespace}/{p.name}" not in self.binds]:
                out.append(f"{job.key}: bound without a BindRequest {unbid}")
            for group in {p.group for p in bound}:
                pg = self.podgroups.get(f"{job.namespace}/{group}")
                if pg is None or pg["spec"].get("minMember") != self.burst.pods:
                    out.append(f"{job.key}: bound in PodGroup {group} with minMember "
                               f"{pg and pg['spec'].get('minMember')}, not its whole gang of {self.burst.pods}")
        return out

    def podgroups_per_wave(self) -> list[str]:
        """No TrainJob gets two PodGroups of one wave, whoever made them; here every runtime is flat, so a released
        TrainJob has exactly one and a refused one none."""
        of: dict[str, list[str]] = {}
        for key, pg in self.podgroups.items():
            ns = key.split("/", 1)[0]
            of.setdefault(f"{ns}/{owner_trainjob(pg)}", []).append(pg["metadata"]["name"])
        out = []
        for job in self.jobs:
            names = sorted(of.pop(job.key, []))
            waves = Counter(m.group(1) if (m := _STAGE.search(n)) else "main" for n in names)
            if doubled := [w for w, n in waves.items() if n > 1]:
                out.append(f"{job.key}: two PodGroups of wave {doubled}: {names}")
            elif len(names) != (0 if job.refusal else 1):
                out.append(f"{job.key}: PodGroups {names}")
        out += [f"{key}: PodGroups of no TrainJob of the burst {names}" for key, names in of.items()]
        return out

    # -- figures ----------------------------------------------------------------------------------------------
    def made_again(self) -> int:
        """Pods made and gone without ever being bound, in gangs that bound."""
        return sum(1 for job in self.jobs for p in self.pods.get(job.key, []) if p.gone_at is not None and not p.node)

    def _gangs(self) -> set[str]:
        return {j.key for j in self.jobs if not j.refusal}

    def _released(self) -> set[str]:
        """TrainJobs whose main gang kai_fn made (the decision, for a JobSet named at admission)."""
        return {job.key for job in self.jobs if (tj := self.trainjobs.get(job.key)) is not None
                and f"{job.namespace}/{gang_names(tj)[0]}" in self.podgroups}

    def _released_by_event(self) -> set[str]:
        """TrainJobs whose release the function logged as the outcome of one of their events."""
        return {f"{e.get('namespace')}/{e.get('name')}" for e in self.log
                if e.get("kind") in ("TrainJob", "JobSet") and e.get("type") != "resync" and e.get("outcome") == "done"
                and e.get("podgroup")
                and "released" in str(e.get("reason"))}

    def released_without_event(self) -> set[str]:
        """Gangs released with no line saying an event did it: by the resync, a started function's catch-up pass,
        or a delivery whose function was killed between the release and its line."""
        return (self._released() & self._gangs()) - self._released_by_event()

    def released_by(self) -> Counter[str]:
        """Gangs released by an event and by the resync (:meth:`released_without_event`); ``resync says``: the sum
        of "N done" over the resync's lines."""
        released, by_event = self._released() & self._gangs(), self._released_by_event()
        said = sum(int(m.group(1)) for e in self.resync_lines() if (m := _RESYNC_DONE.match(str(e.get("reason")))))
        return Counter({"events": len(released & by_event), "resync": len(self.released_without_event()),
                        "resync says": said})

    def resync_lines(self) -> list[dict[str, Any]]:
        return [e for e in self.log if str(e.get("reason", "")).startswith("resync:")]

    def bound_seconds(self) -> list[float]:
        """Per bound gang: its create call to its last pod seen bound."""
        out = []
        for job in self.jobs:
            bound = [p.bound_at for p in self.pods.get(job.key, []) if p.bound_at]
            if not job.refusal and len(bound) == self.burst.pods:
                out.append(max(bound) - self.created[job.key])
        return out

    def figures(self) -> list[str]:
        b, by = self.burst, self.released_by()
        took = [f"{len(v)}× {k}" for k, v in self.faults.items()]
        secs = sorted(self.bound_seconds())
        pings, unheard = self.resync_lines(), self.unheard & self._gangs()
        lines = [f"{b.jobs} TrainJobs ({b.gangs} gangs of {b.pods} pods, {b.jobs - b.gangs} to refuse) in "
                 f"{b.namespaces} namespaces; faults: {', '.join(took)} over {self.faults_over - self.began:.0f} s",
                 f"settled {self.settled - self.began:.0f} s after the first create" if self.settled else
                 f"NOT settled within {b.settle:.0f} s of the last fault",
                 f"gangs released by an event (its line says so) {by['events']}, with no such line {by['resync']}: "
                 f"by the resync (its {len(pings)} lines count {by['resync says']} done; a resync killed before its "
                 f"line is not there), a started function's catch-up or a delivery killed before its line; of the "
                 f"{len(unheard)} gangs made while "
                 f"the TrainJob and JobSet adapters were down, {len(unheard - self._released_by_event())} had no event; events "
                 f"the adapters dropped: " + ", ".join(f"{n} {s}" for s, n in self.dropped.items())]
        if again := self.made_again():
            lines.append(f"pods made and gone without ever being bound (an extra pod the Job controller made when the "
                         f"API server restart lost a create's answer, then deleted): {again}")
        if secs:
            lines.append(f"create → gang bound whole: p50 {statistics.median(secs):.1f} s, "
                         f"p95 {secs[max(0, math.ceil(0.95 * len(secs)) - 1)]:.1f} s, max {secs[-1]:.1f} s")
        return lines


def owner_trainjob(pg: dict[str, Any]) -> str:
    """The TrainJob a PodGroup is for: kai_fn's are owned by it, KAI podgrouper's by its JobSet (same name)."""
    for ref in pg["metadata"].get("ownerReferences") or []:
        if ref.get("kind") in ("TrainJob", "JobSet"):
            return str(ref["name"])
    return str((pg["metadata"].get("labels") or {}).get(keys.TRAINJOB_NAME_LABEL, "?"))


def body(job: Job, small_queue: str, pods: int) -> dict[str, Any]:
    made = trainjob(job.name, "chain", nodes=pods, gpus=1, kind="TrainingRuntime")
    queue = {"QueueNotFound": "no-such-queue", "GangExceedsQueue": small_queue}.get(job.refusal or "")
    if queue:
        made["metadata"]["labels"] = {keys.KAI_QUEUE_LABEL: queue}
    return made


def small_queue_body(name: str) -> dict[str, Any]:
    """A leaf Queue of 1 GPU: a gang of 2 can never fit it."""
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    return {"apiVersion": "/".join(QUEUE_API[:2]), "kind": "Queue", "metadata": {"name": name},
            "spec": {"parentQueue": "default-parent-queue", "resources": {
                "gpu": {"quota": 0, "limit": 1, "overQuotaWeight": 1}, "cpu": unlimited, "memory": unlimited}}}


def run(chain: Chain, burst: Burst, namespaces: list[str], pool: str,
        during: Callable[[Chain, Burst, Record, str], None] | None = None) -> Record:
    """The burst in ``namespaces`` (kai_fn-enabled, made by the caller, who deletes them), on the simnodes pool
    ``pool`` (``burst.nodes`` of it, made by the caller). ``during``: what submits the TrainJobs and makes the
    faults (``record.jobs``, the small Queue's name), instead of this module's faults (e.g. a scale-down)."""
    jobs = [Job(namespaces[i % len(namespaces)], f"burst-{i:03d}", burst.refusal(i)) for i in range(burst.jobs)]
    record = Record(burst, jobs)
    objs, core = client.CustomObjectsApi(chain.api), client.CoreV1Api(chain.api)
    small = f"{namespaces[0]}-small"
    objs.create_cluster_custom_object(*QUEUE_API, small_queue_body(small))
    for ns in namespaces:
        chain.runtime(ns, pool=pool)
    logs = chain.log_dir or chain.kubeconfig.parent
    function_log, adapters = logs / "function.log", [logs / f"adapter-kai-fn-{s}.log" for s in ADAPTERS]
    offsets = {p: p.stat().st_size if p.exists() else 0 for p in (function_log, *adapters)}
    try:
        with ExitStack() as stack:
            pods = [stack.enter_context(PodWatch(chain.api, ns, check_groups=True)) for ns in namespaces]
            binds = [stack.enter_context(ObjectWatch(chain.api, BIND_REQUESTS, ns)) for ns in namespaces]
            groups = [stack.enter_context(ObjectWatch(chain.api, KAI_PODGROUPS, ns)) for ns in namespaces]
            (during or _burst_with_faults)(chain, burst, record, small)
            end = record.faults_over + burst.settle
            while time.monotonic() < end:
                if _read_end(record, objs, core, pods, groups, namespaces):
                    record.settled = time.monotonic()
                    break
                time.sleep(2)
        _read_end(record, objs, core, pods, groups, namespaces)  # the watches' last word
        record.binds = {f"{w.namespace}/{name}" for w in binds for name in w.seen}
        record.missing_podgroups = [v for w in pods for v in w.violations]
    finally:
        objs.delete_cluster_custom_object(*QUEUE_API, small)
    record.log = _json_lines(function_log, offsets[function_log])
    record.dropped = {s: read_from(p, offsets[p]).count("failed to send") for s, p in zip(ADAPTERS, adapters)}
    return record


def _burst_with_faults(chain: Chain, burst: Burst, record: Record, small_queue: str) -> None:
    """The submissions and the faults' timeline; returns once every fault is over."""
    def at(what: str, fault: Callable[[], None]) -> None:
        record.faults.setdefault(what, []).append(time.monotonic())
        try:
            fault()
        except Exception as error:  # noqa: BLE001 - a fault that failed is reported, the burst goes on
            record.fault_errors.append(f"{what}: {type(error).__name__}: {error}")

    def submit_all(jobs: list[Job]) -> None:
        for job in jobs:
            if job is half:
                api_server.start()
            record.created[job.key] = time.monotonic()
            submit(chain.api, job.namespace, body(job, small_queue, burst.pods))

    def unheard() -> None:
        """The last quarter, made while the adapters are down; they come back once Trainer has made each one's
        JobSet and written its status, so their adds are never sent: the resync makes their gangs (their statuses
        change again only once bound, so no event of theirs can come before). Trainer's status writes go on after
        the JobSets are made (9-12 reads a second apart on the chain), and one landing after the adapters are back
        is an event, so the wait is for the TrainJobs to stay unchanged between two reads. Nothing is held, so a gang
        made meanwhile (a restarted function's catch-up) binds and keeps its TrainJob changing: after STILL_READS
        reads the JobSets made suffice."""
        submit_all(record.jobs[quarter:])
        record.unheard = {job.key for job in record.jobs[quarter:]}
        versions: list[dict[str, str] | None] = []

        def settled_by_trainer() -> bool:
            versions.append(_trainer_versions(chain, record.jobs[quarter:]))
            made = len(versions) >= 2 and None not in versions[-2:]
            return made and (versions[-1] == versions[-2] or len(versions) >= STILL_READS)

        faults.until("Trainer is done with the TrainJobs made while the adapter was down", settled_by_trainer, 120, 1)

    half, quarter = record.jobs[len(record.jobs) // 2], len(record.jobs) * 3 // 4
    api_server = threading.Thread(target=at, args=("API server restarted", lambda: faults.restart_api_server(
        chain.kubeconfig)), daemon=True)
    killer = faults.Every(lambda: at("function killed", lambda: faults.kill_and_restart_function(chain)),
                          burst.kill_every, burst.kills, first=burst.kill_every / 2)
    record.began = time.monotonic()
    killer.start()
    submit_all(record.jobs[:quarter])
    at("TrainJob and JobSet adapters restarted", lambda: faults.restart_adapters(
        chain, ("kai-fn-trainjobs", "kai-fn-jobsets"), meanwhile=unheard))
    api_server.join()
    killer.join()
    record.faults_over = time.monotonic()


def _trainer_versions(chain: Chain, jobs: list[Job]) -> dict[str, str] | None:
    """The jobs' resourceVersions, once Trainer has made each one's JobSet; else None. (Its status has no condition
    while the JobSet runs with its pods waiting for their gang: nothing is suspended.)"""
    objs, out = client.CustomObjectsApi(chain.api), {}
    try:
        for ns in {job.namespace for job in jobs}:
            made = {j["metadata"]["name"] for j in k8s.items(objs.list_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", _request_timeout=10))}
            for tj in k8s.items(objs.list_namespaced_custom_object(*TRAINER, ns, "trainjobs", _request_timeout=10)):
                if tj["metadata"]["name"] in made:
                    out[f"{ns}/{tj['metadata']['name']}"] = tj["metadata"]["resourceVersion"]
    except Exception:  # noqa: BLE001 - the API server still coming back
        return None
    return out if set(out) >= {job.key for job in jobs} else None


def _read_end(record: Record, objs: client.CustomObjectsApi, core: client.CoreV1Api, pods: list[PodWatch],
              groups: list[ObjectWatch], namespaces: list[str]) -> bool:
    """Reads TrainJobs, kai_fn's Warnings, the pods and PodGroups watched into ``record``; True once nothing is
    unsettled (a gang is made when its PodGroup is)."""
    try:
        for ns in namespaces:
            for tj in k8s.items(objs.list_namespaced_custom_object(*TRAINER, ns, "trainjobs", _request_timeout=10)):
                record.trainjobs[f"{ns}/{tj['metadata']['name']}"] = tj
            for js in k8s.items(objs.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets",
                                                                   _request_timeout=10)):
                record.jobsets[f"{ns}/{js['metadata']['name']}"] = js
            for e in core.list_namespaced_event(ns, _request_timeout=10).items:
                if e.type == "Warning" and e.reporting_component == keys.MANAGED_BY:
                    record.warnings.setdefault(f"{ns}/{e.involved_object.name}", set()).add(e.reason or "")
    except Exception:  # noqa: BLE001 - an API server still coming back: read again
        return False
    record.podgroups = {f"{w.namespace}/{name}": obj for w in groups for name, obj in list(w.objects.items())}
    record.pods = {}
    for watch in pods:
        for p in watch.snapshot():
            record.pods.setdefault(f"{watch.namespace}/{p.jobset}", []).append(p)
    return not record.unsettled()


def _json_lines(path: Path, offset: int) -> list[dict[str, Any]]:
    out = []
    for line in read_from(path, offset).splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
