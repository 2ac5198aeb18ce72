"""From one TrainJob to its gang: PodGroup first, then the JobSet's pod templates, then release.

Order is the safety property: a pod template never names a PodGroup that does not exist, and the TrainJob
is released only once its JobSet carries the changes. Every step is idempotent, so duplicates, retries and
concurrent deliveries are harmless; and a JobSet that already carries the plan means the work was done,
so a stale event re-reads the TrainJob instead of acting on its old copy.

An event's body is acted on only when its sender was authenticated (``KAI_FN_AUDIENCE``); otherwise anyone who
can reach the Service could have written it, so it may only save work (a TrainJob it shows as done) and the plan
comes from a fresh GET. TrainJobs the admission policy suspended (``kai-fn/auto-suspended``) are released
whatever the plan says, except while it is blocked: with their gang when in scope, without one otherwise.
"""
from __future__ import annotations

import datetime
from typing import Any

from kai_fn.core import keys
from kai_fn.core.models import InputError, Runtime, TrainJob, parse
from kai_fn.core.patch import MissingReplicatedJob, jobset_patch
from kai_fn.core.plan import Plan, plan
from kai_fn.core.queue_check import check
from kai_fn.core.runtime import target
from kai_fn.core.schedule_timeout import new_wait, stamp
from kai_fn.function import gang_status, heartbeat, metrics, report, timeouts
from kai_fn.function.cluster import Gone, GuardFailed, NotServed, Session, Stale, Transient
from kai_fn.function.events import TrainJobEvent
from kai_fn.function.report import Outcome, Result
from kai_fn.function.settings import Settings

_PATCH_ATTEMPTS = 3
# Why a TrainJob waits (NotYet): bounded values, also the label of kai_fn_waiting_events.
NOT_CREATED = "JobSet not created yet"
NOT_SUSPENDED = "the TrainJob is suspended but its JobSet not yet"
REPLACED = "the JobSet of that name belongs to an earlier TrainJob of that name (being replaced)"


class Retry(Exception):
    """The work cannot be done yet and no later event is sure to come; the sender should redeliver (503)."""


class NotYet(Exception):
    """The work cannot be done yet, but a later event of this TrainJob brings it (answered 2xx, outcome
    ``waiting``). Trainer applies the JobSet before it writes the TrainJob's status in the same reconcile
    (trainjob_controller.go: reconcileObjects, then the status patch; a first reconcile always changes the status:
    the ``Suspended`` condition), and every later JobSet status change is copied into the TrainJob's status (the
    JobSet plugin's ``Status``): so an update event follows the JobSet's creation, and its suspension. The resync
    catches the rare pass that changes no status. A 503 instead would hold up every later event of the namespace
    for 3.1 s of the adapter's retries (knative/README.md, "Knative's adapters, measured"), and then be dropped.
    """


class TrainJobGone(Exception):
    """The TrainJob was deleted (or replaced by another of the same name) since the event was emitted."""


def from_body(event: TrainJobEvent, session: Session, settings: Settings) -> Outcome | None:
    """The answer the event's body (and what this process remembers) gives without an API call, or None when the
    TrainJob needs a pass: a namespace not watched, a TrainJob marked done (and not owed a new wait) or being
    deleted, a copy older than this process's release of it."""
    hint = event.object
    if not settings.watches(event.namespace) and not (hint is not None and _auto_suspended(hint)):
        return Outcome("ignored", "namespace not in KAI_FN_NAMESPACES", event.namespace, event.name, event.uid)
    if hint is None:
        return None
    if _deleting(hint) or (_marked(hint) and new_wait(hint, _now()) is None):
        return Reconciler(session, settings, hint).run()  # from the body alone: no API call, no write
    if session.cluster.recent.done_before(event.uid, hint.get("metadata", {}).get("resourceVersion")):
        return Outcome("skipped", "duplicate: a copy from before this process released it",
                       event.namespace, event.name, event.uid)
    return None


def reconcile(event: TrainJobEvent, session: Session, settings: Settings) -> Outcome:
    if (answer := from_body(event, session, settings)) is not None:
        return answer
    hint = event.object
    if hint is not None and _marked(hint):
        return Reconciler(session, settings, hint).run()  # resumed after a schedule timeout: a new wait begins
    obj = hint if settings.audience else None
    if obj is None:
        obj = session.trainjob(event.namespace, event.name)
        if obj is None or (event.uid and obj.get("metadata", {}).get("uid") != event.uid):
            return Outcome("ignored", "the TrainJob no longer exists", event.namespace, event.name, event.uid)
    return Reconciler(session, settings, obj).run()


def resync(session: Session, settings: Settings) -> Outcome:
    """Reconcile suspended TrainJobs that no event brought us (the source replays nothing after a restart), then
    look at released gangs not yet known to be bound (binding changes no PodGroup, so no event says it) and at
    their schedule timeouts; a resync that got this far renews the heartbeat (:mod:`kai_fn.function.heartbeat`).
    Both lists are taken ``KAI_FN_RESYNC_LIMIT`` at a time, in turn (:mod:`kai_fn.core.turns`)."""
    listed = session.list_trainjobs()
    waiting = [
        o for o in listed
        if o.get("spec", {}).get("suspend") is True
        and not _marked(o)
        and not _deleting(o)
        and (settings.watches(o.get("metadata", {}).get("namespace", "")) or _auto_suspended(o))
    ]
    tally: dict[str, int] = {}
    for obj in session.cluster.take_turn("waiting", waiting, settings.resync_limit):
        try:
            result = Reconciler(session, settings, obj).run().result
        except (Retry, Transient):
            result = "retry"
        tally[result] = tally.get(result, 0) + 1
    left = max(len(waiting) - settings.resync_limit, 0)
    summary = ", ".join(f"{n} {r}" for r, n in sorted(tally.items())) or "nothing to do"
    released = gang_status.awaiting(listed, settings)
    swept = gang_status.sweep(session, settings, released)
    gangs = ", ".join(f"{n} {r}" for r, n in sorted(swept.items()))
    summary = (f"resync: {len(waiting)} waiting; {summary}" + (f"; {left} left for the next run" if left else "")
               + (f"; {len(released)} released gangs not yet bound: {gangs}" if released else ""))
    if settings.flavor == "kai":
        summary += "; " + timeouts.check(session, settings, listed, _now())
    return Outcome("done", summary + "; " + heartbeat.beat(session, settings, _now()))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _marked(obj: dict[str, Any]) -> bool:
    notes = obj.get("metadata", {}).get("annotations") or {}
    return keys.MARKER_PODGROUP in notes or keys.MARKER_SKIPPED in notes


def _deleting(obj: dict[str, Any]) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def _auto_suspended(obj: dict[str, Any]) -> bool:
    """Suspended by the admission policy, not by its author: kai_fn owes it a release."""
    notes = obj.get("metadata", {}).get("annotations") or {}
    return notes.get(keys.AUTO_SUSPENDED_ANNOTATION) == "true" and obj.get("spec", {}).get("suspend") is True


class Reconciler:
    """One TrainJob's pass; each method is one step, and returns the Outcome when the pass ends there."""

    def __init__(self, session: Session, settings: Settings, obj: dict[str, Any]) -> None:
        self.session, self.settings, self.obj = session, settings, obj
        meta = obj.get("metadata", {})
        self.namespace, self.name, self.uid = meta.get("namespace"), meta.get("name"), meta.get("uid")

    def outcome(self, result: Result, reason: str, podgroup: str | None = None) -> Outcome:
        return Outcome(result, reason, self.namespace, self.name, self.uid, podgroup)

    def warn(self, reason: str, message: str, result: Result = "blocked") -> Outcome:
        self.session.create_event(self.namespace, report.event_body(self.obj, reason, message, warning=True))
        return self.outcome(result, f"{reason}: {message}")

    def run(self) -> Outcome:
        notes = self.obj.get("metadata", {}).get("annotations") or {}
        if keys.MARKER_PODGROUP in notes:
            if (started := new_wait(self.obj, _now())) is not None:
                return self.start_new_wait(started, notes[keys.MARKER_PODGROUP])
            return self.outcome("skipped", "already gang-scheduled", notes[keys.MARKER_PODGROUP])
        if keys.MARKER_SKIPPED in notes:
            return self.outcome("skipped", f"skipped earlier ({notes[keys.MARKER_SKIPPED]})")
        if _deleting(self.obj):
            return self.outcome("ignored", "the TrainJob is being deleted")
        if not self.settings.watches(self.namespace):
            return self.release_without_gang("namespace not in KAI_FN_NAMESPACES")
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
            result = plan(job, parse(Runtime, raw), **self.settings.planning())
        except InputError as error:
            return self.warn(report.INVALID_RUNTIME, f"{where}: {error}")
        if result.ignored:
            return self.release_without_gang(result.ignored)
        if result.blocked:
            return self.warn(report.PLAN_BLOCKED, "; ".join(str(p) for p in result.problems))
        try:
            return self.apply(result)
        except (TrainJobGone, Gone):
            return self.outcome("ignored", "the TrainJob no longer exists")
        except NotYet as wait:
            metrics.WAITING.labels(str(wait)).inc()
            return self.outcome("waiting", f"{wait}; its next update event does the work")

    def queue_precheck(self, result: Plan) -> Outcome | None:
        """KAI's own limit checks with nothing allocated, just before a new gang would be made: a gang that can never
        fit is not released to wait forever. A refusal is always confirmed on a fresh list of the Queues, never on
        the cache alone."""
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
        return self.warn(reason, f"{refusal.message}; the TrainJob stays suspended, and is checked again on its "
                                 f"next change and at every resync")

    def start_new_wait(self, started: str, podgroup: str) -> Outcome:
        """Resumed after a timeout suspended it: the gang waits again, from now. Guarded by resourceVersion, so a
        stale copy of the TrainJob never restarts a wait that has ended since."""
        merge = {"metadata": {"annotations": {keys.RELEASED_AT_ANNOTATION: started}}}
        version = self.obj.get("metadata", {}).get("resourceVersion")
        if version:
            merge["metadata"]["resourceVersion"] = version
        try:
            self.session.patch_trainjob(self.namespace, self.name, merge)
        except Stale:
            return self.outcome("skipped", "resumed, but changed since this event; a later event decides", podgroup)
        except Gone:
            return self.outcome("ignored", "the TrainJob no longer exists")
        return self.outcome("done", f"resumed after a schedule timeout: a new wait for {podgroup} starts at {started}",
                            podgroup)

    def apply(self, result: Plan) -> Outcome:
        jobset = self.live_jobset()
        created = checked = False
        for _ in range(_PATCH_ATTEMPTS):
            try:
                ops = jobset_patch(result, jobset)
            except MissingReplicatedJob as missing:
                return self.warn(report.JOBSET_MISMATCH,
                                 f"JobSet {self.name} has no replicatedJob {missing.args[0]!r}, which the runtime has")
            if not ops:  # the JobSet carries the plan already
                return self.after_earlier_work(result)
            if jobset.get("spec", {}).get("suspend") is not True:
                return self.too_late_unless_suspending()
            try:
                if not checked and (refused := self.queue_precheck(result)) is not None:
                    return refused
                checked = True
                for podgroup in result.podgroups:
                    if self.session.create_podgroup(podgroup):
                        created = True
                        metrics.GANGS_CREATED.inc()
            except NotServed as missing:
                return self.warn(report.SCHEDULER_NOT_SERVED,
                                 f"{missing}: is {'KAI Scheduler' if self.settings.flavor == 'kai' else 'scheduler-plugins'}"
                                 f" installed (KAI_PODGROUP_FLAVOR={self.settings.flavor})? The TrainJob stays suspended "
                                 f"and is tried again on its next change and at every resync")
            try:
                self.session.patch_jobset(self.namespace, self.name, ops)
            except GuardFailed:
                jobset = self.live_jobset()  # resumed, replaced or reordered meanwhile: decide again
                continue
            return self.release(self.obj, result, created)
        raise Retry("the JobSet kept changing under the patch")

    def live_jobset(self) -> dict[str, Any]:
        """The TrainJob's JobSet; NotYet while Trainer has not made it (no read of the TrainJob: whether it still
        exists changes nothing in the answer)."""
        jobset = self.session.jobset(self.namespace, self.name)
        if jobset is None:
            raise NotYet(NOT_CREATED)
        owners = jobset.get("metadata", {}).get("ownerReferences") or []
        if any(o.get("uid") == self.uid and o.get("controller") for o in owners):
            return jobset
        self.fresh_trainjob()
        raise NotYet(REPLACED)

    def fresh_trainjob(self) -> dict[str, Any]:
        """The TrainJob as it is now; TrainJobGone if it was deleted or replaced since the event."""
        fresh = self.session.trainjob(self.namespace, self.name)
        if fresh is None or fresh.get("metadata", {}).get("uid") != self.uid:
            raise TrainJobGone()
        return fresh

    def after_earlier_work(self, result: Plan) -> Outcome:
        """The JobSet carries the plan, so the PodGroup exists: only the TrainJob may still need its marker."""
        fresh = self.fresh_trainjob()
        notes = fresh.get("metadata", {}).get("annotations") or {}
        if keys.MARKER_PODGROUP in notes:
            return self.outcome("skipped", "duplicate: already gang-scheduled", notes[keys.MARKER_PODGROUP])
        return self.release(fresh, result, created=False)

    def too_late_unless_suspending(self) -> Outcome:
        """A running JobSet is too late, unless its TrainJob was just suspended and Trainer is catching up, or the
        event's copy is stale: the TrainJob was marked since (an operator's ``release`` resumes it, so an add
        redelivered after an outage finds its JobSet running) and its mark stands."""
        fresh = self.fresh_trainjob()
        if fresh.get("spec", {}).get("suspend") is True:
            raise NotYet(NOT_SUSPENDED)
        if _marked(fresh):
            notes = fresh.get("metadata", {}).get("annotations") or {}
            settled = notes.get(keys.MARKER_PODGROUP) or f"skipped ({notes.get(keys.MARKER_SKIPPED)})"
            return self.outcome("skipped", f"a stale copy: marked since, {settled}")
        self.session.patch_trainjob(self.namespace, self.name,
                                    {"metadata": {"annotations": {keys.MARKER_SKIPPED: "running"}}})
        return self.warn(
            report.TOO_LATE,
            "its JobSet is already running, so its pods cannot join a gang (pod templates are immutable once "
            "resumed); submit TrainJobs with spec.suspend: true and kai_fn releases them",
            result="skipped",
        )

    def release(self, obj: dict[str, Any], result: Plan, created: bool) -> Outcome:
        hold = self.hold_reason(obj)
        merge: dict[str, Any] = {"metadata": {"annotations": {keys.MARKER_PODGROUP: result.podgroup_name}}}
        if hold is None and obj.get("spec", {}).get("suspend") is True:
            merge["spec"] = {"suspend": False}
            if self.settings.flavor == "kai":  # the schedule timeout counts from here
                merge["metadata"]["annotations"][keys.RELEASED_AT_ANNOTATION] = stamp(_now())
        written = self.session.patch_trainjob(self.namespace, self.name, merge)
        self.session.cluster.recent.released(self.uid, written.get("metadata", {}).get("resourceVersion"))
        resources = ",".join(f"{k}={v}" for k, v in result.min_resources.items()) or "none"
        made = "PodGroups" if len(result.podgroups) > 1 else "PodGroup"
        message = (
            f"{made} {result.podgroup_name}{' and its stages' if len(result.podgroups) > 1 else ''} "
            f"{'created' if created else 'in place'}: {result.gang_text()}, queue {result.queue or 'n/a'}, "
            f"minResources {resources}; " + (f"left suspended: {hold}" if hold else "released")
        )
        self.session.create_event(self.namespace, report.event_body(obj, report.GANG_CREATED, message, warning=False,
                                                                   key=result.podgroup_name))
        return self.outcome("done", message, result.podgroup_name)

    def release_without_gang(self, why: str) -> Outcome:
        """Out of scope. One the admission policy suspended is released (and marked, so later events cost
        nothing); one its author suspended stays as it is."""
        if not _auto_suspended(self.obj):
            return self.outcome("ignored", why)
        hold = self.hold_reason(self.obj, resume_setting=False)
        if hold:
            return self.outcome("ignored", f"{why}; auto-suspended, left suspended: {hold}")
        try:
            written = self.session.patch_trainjob(self.namespace, self.name, {
                "metadata": {"annotations": {keys.MARKER_SKIPPED: "out-of-scope"}}, "spec": {"suspend": False}})
        except Gone:
            return self.outcome("ignored", "the TrainJob no longer exists")
        self.session.cluster.recent.released(self.uid, written.get("metadata", {}).get("resourceVersion"))
        return self.outcome("done", f"released without a gang: {why}")

    def hold_reason(self, obj: dict[str, Any], resume_setting: bool = True) -> str | None:
        meta = obj.get("metadata", {})
        if keys.KUEUE_QUEUE_LABEL in (meta.get("labels") or {}):
            return f"Kueue admits it ({keys.KUEUE_QUEUE_LABEL})"
        if (meta.get("annotations") or {}).get(keys.HOLD_ANNOTATION) == "true":
            return f"{keys.HOLD_ANNOTATION} is true"
        if resume_setting and not self.settings.resume:
            return "KAI_FN_RESUME is false"
        return None
