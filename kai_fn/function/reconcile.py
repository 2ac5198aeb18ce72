"""From one TrainJob to its gang: the PodGroups first, then one guarded JSON Patch that decides the held JobSet.

The admission policy holds every JobSet a TrainJob controls whose pods ask for the flavor's scheduler
(``spec.suspend: true``, label ``kai-fn/held``), and turns Trainer's re-applies of ``suspend: false`` back while the
hold stands. The pass makes the gang, then writes the pod templates, the decision and ``suspend: false`` in one
patch: no pod exists before its PodGroups, and the TrainJob itself is never written on the way (its Events say what
was done). Every step is idempotent, so duplicates, retries and concurrent deliveries are harmless.

An event's body is never acted on, whoever sent it: the plan comes from a fresh GET (or the resync's LIST), made
with kai_fn's own identity. A TrainJob the earlier policy suspended (``kai-fn/auto-suspended``)
is still released after an upgrade.
"""
from __future__ import annotations

import datetime
from typing import Any

from kai_fn.core import adopt, keys, segments, triage
from kai_fn.core.models import InputError, Runtime, TrainJob, parse
from kai_fn.core.patch import MissingReplicatedJob, jobset_patch
from kai_fn.core.plan import Plan, plan
from kai_fn.core.queue_check import check
from kai_fn.core.runtime import target
from kai_fn.core.schedule_timeout import stamp
from kai_fn.function import kai_cluster, metrics, report, reserve
from kai_fn.kube import Gone, GuardFailed, NotServed, Transient
from kai_fn.function.cluster import Session
from kai_fn.function.events import RESYNC, TrainJobEvent
from kai_fn.function.isolate import apart
from kai_fn.function.report import Outcome, Result
from kai_fn.settings import Settings

_PATCH_ATTEMPTS = 3
# Why a TrainJob waits (NotYet): short tokens, the label of kai_fn_waiting_events; the log line says the sentence.
NOT_CREATED = "no_jobset"
REPLACED = "jobset_replaced"
_WAITING = {NOT_CREATED: "Trainer has not made its JobSet yet",
            REPLACED: "the JobSet of that name belongs to an earlier TrainJob of that name (being replaced)"}


class Retry(Exception):
    """The work cannot be done yet and no later event is sure to come; the sender should redeliver (503)."""


class NotYet(Exception):
    """The work cannot be done yet, but a later event brings it (answered 2xx, outcome ``waiting``): the JobSet
    source sends the held JobSet the moment Trainer makes it, and the resync finds any held JobSet whose event was
    lost. A 503 instead would hold up every later event of the namespace for 3.1 s of the adapter's retries."""


def answer_without_a_read(event: TrainJobEvent, session: Session, settings: Settings) -> Outcome | None:
    """The answer the event's identity (and what this process remembers) gives without an API call, or None when
    the TrainJob needs a pass. The body is never read here: whoever sent it, only the live TrainJob decides."""
    if not settings.watches(event.namespace) and event.via != keys.JOBSET_KIND:
        return Outcome("ignored", "namespace not in KAI_FN_NAMESPACES", event.namespace, event.name, event.uid)
    # A JobSet's event is judged by the JobSet's uid: Trainer makes a deleted JobSet again, held, with a new one.
    known = event.uid if event.via == keys.TRAINJOB_KIND else event.jobset_uid
    if event.via != RESYNC and session.cluster.recent.is_decided(known):
        return Outcome("skipped", "duplicate: this process decided its JobSet", event.namespace, event.name, event.uid)
    return None


def reconcile(event: TrainJobEvent, session: Session, settings: Settings) -> Outcome:
    """One TrainJob's pass, planned from the TrainJob as the API server returns it to kai_fn: read now, or listed
    by the resync a moment ago. An event's body, authenticated or not, never decides a gang."""
    if (answer := answer_without_a_read(event, session, settings)) is not None:
        return answer
    obj = event.object if event.via == RESYNC else None
    if obj is None:
        obj = session.trainjob(event.namespace, event.name)
        if obj is None or (event.uid and obj.get("metadata", {}).get("uid") != event.uid):
            return Outcome("ignored", "the TrainJob no longer exists", event.namespace, event.name, event.uid)
    failed = Outcome("error", "the pass failed unexpectedly (logged, Warning on the TrainJob)", event.namespace,
                     event.name, event.uid)
    return apart("pass", session, obj, Reconciler(session, settings, obj).run, failed,
                 let_through=(Retry, Transient))


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Reconciler:
    """One TrainJob's pass; each method is one step, and returns the Outcome when the pass ends there."""

    def __init__(self, session: Session, settings: Settings, obj: dict[str, Any],
                 jobset: dict[str, Any] | None = None, moment: datetime.datetime | None = None) -> None:
        self.session, self.settings, self.obj, self.jobset = session, settings, obj, jobset
        self.now = moment or now()  # one clock reading per pass
        meta = obj.get("metadata", {})
        self.namespace, self.name, self.uid = meta.get("namespace"), meta.get("name"), meta.get("uid")

    def decided(self) -> None:
        """Nothing more is kai_fn's to do: later events of this TrainJob, or of this JobSet, cost no API call."""
        self.session.cluster.recent.decided(self.uid, triage.meta(self.jobset).get("uid"))

    def outcome(self, result: Result, reason: str, podgroup: str | None = None) -> Outcome:
        return Outcome(result, reason, self.namespace, self.name, self.uid, podgroup)

    def warn(self, reason: str, message: str, result: Result = "blocked") -> Outcome:
        self.session.create_event(self.namespace, report.event_body(self.obj, reason, message, warning=True))
        return self.outcome(result, f"{reason}: {message}")

    def run(self) -> Outcome:
        if triage.deleting(self.obj):
            return self.outcome("ignored", "the TrainJob is being deleted")
        try:
            return self.decide(self.jobset if self.jobset is not None else self.live_jobset())
        except Gone:
            return self.outcome("ignored", "the TrainJob no longer exists")
        except NotYet as wait:
            token = str(wait)
            metrics.WAITING.labels(token).inc()
            return self.outcome("waiting", f"{_WAITING.get(token, token)}; its next event does the work")
        except adopt.NotAdopted as taken:
            return self.warn(report.NOT_ADOPTED, f"{taken}. Its JobSet stays held: delete that {taken.kind} (kai_fn "
                                                 f"then makes its own on the next pass or resync) or ask who made it")

    def decide(self, jobset: dict[str, Any] | None) -> Outcome:
        """``jobset`` None: Trainer has not made it yet, so only a TrainJob that needs no gang is answered now."""
        self.jobset = jobset
        marks = triage.marks(self.obj, jobset)
        if marks.podgroup is not None:
            if marks.legacy_owed:
                return self.release_legacy(f"gang {marks.podgroup} in place")
            if marks.reserves:  # places held for a later wave: never "nothing left to do" (kai_fn/function/reserve.py)
                done, changed = reserve.settle(self.session, self.obj, jobset, marks.podgroup,
                                               lambda: reserve.planned(self.session, self.settings, self.obj))
                return self.outcome("done" if changed else "skipped", done, marks.podgroup)
            self.decided()
            return self.outcome("skipped", "already gang-scheduled", marks.podgroup)
        if marks.skipped is not None:
            if marks.legacy_owed:
                return self.release_legacy(f"skipped ({marks.skipped})")
            self.decided()
            return self.outcome("skipped", f"skipped earlier ({marks.skipped})")
        if not self.settings.watches(self.namespace):
            return self.without_gang(jobset, "namespace not in KAI_FN_NAMESPACES")
        try:
            job = parse(TrainJob, self.obj)
            where = target(job)
        except InputError as error:
            return self.warn(report.INVALID_TRAINJOB, str(error))
        raw = self.session.runtime(where)
        if raw is None:
            return self.warn(report.RUNTIME_NOT_FOUND, f"{where} does not exist; a retry cannot help until it does",
                             result="ignored")
        try:
            rt = parse(Runtime, raw)
            named = segments.topologies_asked(job, rt) if self.settings.flavor == "kai" else ()
            found = {n: segments.topology_resource(self.session.topology(n)) for n in named}
            result = plan(job, rt, topologies=found, **self.settings.planning(),
                          cluster=kai_cluster.read(self.session, self.settings, job, raw))
        except InputError as error:
            return self.warn(report.INVALID_RUNTIME, f"{where}: {error}")
        if result.ignored:
            return self.without_gang(jobset, result.ignored)
        if result.blocked:
            return self.warn(report.PLAN_BLOCKED, "; ".join(str(p) for p in result.problems))
        if jobset is None:
            raise NotYet(NOT_CREATED)
        return self.apply(result, jobset)

    def live_jobset(self) -> dict[str, Any] | None:
        """The TrainJob's JobSet, or None while Trainer has not made it."""
        jobset = self.session.jobset(self.namespace, self.name)
        if jobset is None or triage.controlled_by(jobset, self.uid):
            return jobset
        fresh = self.session.trainjob(self.namespace, self.name)
        if fresh is None or fresh.get("metadata", {}).get("uid") != self.uid:
            raise Gone()
        raise NotYet(REPLACED)

    def queue_precheck(self, result: Plan) -> Outcome | None:
        """KAI's own limit checks with nothing allocated, just before a new gang would be made: a gang that can never
        fit is not released to wait forever. A refusal is always confirmed on a fresh list of the Queues."""
        if self.settings.flavor != "kai" or self.settings.queue_check == "off" or result.queue is None:
            return None
        tree, cached = self.session.queues()
        refusal = check(tree, result.queue, result.gangs, result.non_preemptible)
        if refusal is not None and cached:
            tree, _ = self.session.queues(fresh=True)
            refusal = check(tree, result.queue, result.gangs, result.non_preemptible)
        if refusal is None:
            return None
        reason = report.GANG_EXCEEDS_QUEUE if refusal.kind == "over" else report.QUEUE_NOT_FOUND
        if self.settings.queue_check == "warn":
            self.session.create_event(self.namespace, report.event_body(
                self.obj, reason, f"{refusal.message} (KAI_FN_QUEUE_CHECK=warn: released anyway)", warning=True))
            return None
        metrics.PRECHECK_REFUSALS.labels(reason).inc()
        return self.warn(reason, f"{refusal.message}; its JobSet stays held, and is checked again on its next "
                                 f"change and at every resync")

    def adopt(self, planned: dict[str, Any]) -> None:
        """A PodGroup of the gang's name exists: it is the gang only when it is the one kai_fn plans."""
        meta = planned["metadata"]
        live = self.session.podgroup(planned["apiVersion"], meta["namespace"], meta["name"])
        if live is None:
            raise Retry(f"PodGroup {meta['name']} was deleted while it was made")
        if differences := adopt.podgroup_differences(live, planned):
            metrics.REFUSED_ADOPTIONS.labels("podgroup").inc()
            raise adopt.NotAdopted("PodGroup", meta["namespace"], meta["name"], differences)

    def waits_for(self) -> str | None:
        """Why the gang, once made, must not start yet: kai_fn is told to wait, or its TrainJob is suspended by its
        owner (Trainer resumes the JobSet when the owner resumes the TrainJob)."""
        if (hold := triage.hold_reason(self.obj)) is not None:
            return hold
        if not self.settings.resume:
            return "KAI_FN_RESUME is false"
        if triage.suspended(self.obj) and (kueue := triage.queued_by_kueue(self.obj)) is not None:
            return kueue  # Kueue resumes it, even one the earlier policy suspended: kai_fn never bypasses Kueue
        if triage.suspended(self.obj) and not triage.marks(self.obj).legacy_owed:
            return "the TrainJob is suspended: it starts when it is resumed"
        return None

    def apply(self, result: Plan, jobset: dict[str, Any]) -> Outcome:
        created = checked = False
        waits = self.waits_for()
        # Told to wait while its TrainJob runs (kai-fn/hold, KAI_FN_RESUME=false): templates only, no decision, so
        # the policy keeps turning Trainer's re-applies back until the hold is lifted.
        kept = waits is not None and not triage.suspended(self.obj)
        for _ in range(_PATCH_ATTEMPTS):
            resume = waits is None and triage.marks(self.obj, jobset).held
            decision = None if kept else {keys.MARKER_PODGROUP: result.podgroup_name}
            if decision is not None and result.reserves:
                decision[keys.RESERVES_ANNOTATION] = result.reserves
            if resume:
                decision = {**(decision or {}), keys.RELEASED_AT_ANNOTATION: stamp(self.now)}
            try:
                ops = jobset_patch(result, jobset, decision, resume)
            except MissingReplicatedJob as missing:
                return self.warn(report.JOBSET_MISMATCH,
                                 f"JobSet {self.name} has no replicatedJob {missing.args[0]!r}, which the runtime has")
            if not ops:
                return self.after_decision(result, waits, created)
            if jobset.get("spec", {}).get("suspend") is not True:
                return self.too_late(jobset)
            try:
                if not checked and (refused := self.queue_precheck(result)) is not None:
                    return refused
                checked = True
                for podgroup in result.podgroups:
                    if self.session.create_podgroup(podgroup):
                        created = True
                        metrics.GANGS_CREATED.inc()
                    else:
                        self.adopt(podgroup)
                if resume:  # the later wave's places, held in its gang before any pod of it exists
                    reserve.make(self.session, result.placeholders)
            except NotServed as missing:
                return self.warn(report.SCHEDULER_NOT_SERVED,
                                 f"{missing}: is {'KAI Scheduler' if self.settings.flavor == 'kai' else 'scheduler-plugins'}"
                                 f" installed (KAI_PODGROUP_FLAVOR={self.settings.flavor})? Its JobSet stays held and "
                                 f"is tried again on its next change and at every resync")
            try:
                self.session.patch_jobset(self.namespace, self.name, ops)
            except GuardFailed:
                jobset = self.jobset = self.live_jobset()  # resumed, replaced or changed meanwhile: decide again
                if jobset is None:
                    raise Gone() from None
                continue
            return self.after_decision(result, waits, created)
        raise Retry("the JobSet kept changing under the patch")

    def after_decision(self, result: Plan, waits: str | None, created: bool) -> Outcome:
        """The JobSet carries the gang: release a TrainJob the earlier policy suspended, then say what was done."""
        if waits is None and triage.marks(self.obj).legacy_owed:
            self.release_trainjob()
        if (waits is None or triage.suspended(self.obj)) and not result.reserves:
            self.decided()  # nothing more is kai_fn's to do
        message = report.gang_created(result, created, waits)
        self.session.create_event(self.namespace, report.event_body(self.obj, report.GANG_CREATED, message,
                                                                   warning=False, key=result.podgroup_name))
        return self.outcome("done", message, result.podgroup_name)

    def too_late(self, jobset: dict[str, Any]) -> Outcome:
        """Its JobSet runs, and was never held (no admission policy, or it matched too late): its pods cannot join a
        gang. Marked on the JobSet, so later events cost nothing."""
        try:
            if ops := jobset_patch(None, jobset, {keys.MARKER_SKIPPED: "running"}):
                self.session.patch_jobset(self.namespace, self.name, ops)
        except GuardFailed:
            raise Retry("the JobSet changed while it was marked") from None
        self.decided()
        return self.warn(
            report.TOO_LATE,
            "its JobSet is already running, so its pods cannot join a gang (pod templates are immutable once "
            "resumed); install kai_fn's admission policy, which holds the JobSets of TrainJobs that ask for KAI",
            result="skipped",
        )

    def without_gang(self, jobset: dict[str, Any] | None, why: str) -> Outcome:
        """Out of scope. A JobSet the policy held is let go (marked, so later events cost nothing); a TrainJob the
        earlier policy suspended is released; anything else is left as it is."""
        marks = triage.marks(self.obj, jobset)
        if not marks.held and not marks.legacy_owed:
            return self.outcome("ignored", why)
        resume = marks.held and not triage.suspended(self.obj)
        try:
            if jobset is not None and (ops := jobset_patch(None, jobset, {keys.MARKER_SKIPPED: "out-of-scope"},
                                                           resume)):
                self.session.patch_jobset(self.namespace, self.name, ops)
        except GuardFailed:
            raise Retry("the JobSet changed while it was let go") from None
        if marks.legacy_owed and triage.hold_reason(self.obj) is None and triage.queued_by_kueue(self.obj) is None:
            self.release_trainjob()
        self.decided()
        return self.outcome("done", f"released without a gang: {why}")

    def release_legacy(self, done: str) -> Outcome:
        if (triage.hold_reason(self.obj) is not None or triage.queued_by_kueue(self.obj) is not None
                or not self.settings.resume):
            return self.outcome("skipped", f"{done}; auto-suspended, left suspended")
        self.release_trainjob()
        self.decided()
        return self.outcome("done", f"{done}; released the TrainJob the earlier admission policy suspended")

    def release_trainjob(self) -> None:
        """Resume a TrainJob the earlier (TrainJob) policy suspended: the only TrainJob spec kai_fn writes besides
        ``KAI_FN_ON_TIMEOUT=suspend``. The annotation goes with it, so it is never taken for one owed again."""
        self.session.patch_trainjob(self.namespace, self.name, {
            "metadata": {"annotations": {keys.AUTO_SUSPENDED_ANNOTATION: None}}, "spec": {"suspend": False}})

