"""The migration from kai_fn's earlier TrainJob gate; removed in kai_fn 0.3.0.

That gate suspended the TrainJob itself (``spec.suspend: true``, ``kai-fn/auto-suspended: "true"``) and kai_fn wrote
its marks on the TrainJob. This module carries a TrainJob's own marks to where kai_fn reads them now (the decision
``kai-fn/podgroup`` or ``kai-fn/skipped`` and ``kai-fn/released-at`` onto its JobSet, never onto one 0.2.0 held;
``kai-fn/bound`` and ``kai-fn/timed-out`` onto its main PodGroup) and removes them from the TrainJob. A TrainJob that
gate suspended is, to the pass, a suspended TrainJob: once its JobSet is decided (or it is out of scope), it is
resumed here, unless ``kai-fn/hold`` is "true", Kueue admits it or KAI_FN_RESUME is false. It runs in the pass and,
over the TrainJobs that carry any of those marks, in the resync. Nothing else in kai_fn knows of that gate.
"""
from __future__ import annotations

from typing import Any

from kai_fn.core import keys, objects
from kai_fn.core.decide import Action, LetGo, MakeGang, SettleReservation, Skip
from kai_fn.core.patch import jobset_patch
from kai_fn.core.state import Entry, podgroup_api
from kai_fn.kube import Gone, GuardFailed
from kai_fn.function.cluster import CachedSession
from kai_fn.function.execute import Retry
from kai_fn.function.migration import jobset_hold
from kai_fn.function.report import Outcome
from kai_fn.settings import Settings

AUTO_SUSPENDED_ANNOTATION = "kai-fn/auto-suspended"
_DECISION = (keys.MARKER_PODGROUP, keys.MARKER_SKIPPED, keys.RELEASED_AT_ANNOTATION)  # onto the JobSet
_GANG = (keys.GANG_BOUND_ANNOTATION, keys.TIMED_OUT_ANNOTATION)  # onto the main PodGroup
_MARKS = (AUTO_SUSPENDED_ANNOTATION, *_DECISION, *_GANG)


def concerns(trainjob: dict[str, Any]) -> bool:
    """The TrainJob carries a mark of the earlier gate (the resync's cheap filter)."""
    return any(key in objects.notes(trainjob) for key in _MARKS)


def owed(trainjob: dict[str, Any]) -> bool:
    """The earlier gate suspended it and it is still suspended: kai_fn owes it a resume."""
    return objects.notes(trainjob).get(AUTO_SUSPENDED_ANNOTATION) == "true" and objects.suspended(trainjob)


def kept(trainjob: dict[str, Any], settings: Settings) -> bool:
    """Someone else resumes it, or kai_fn is told not to."""
    return (objects.hold_reason(trainjob) is not None or objects.queued_by_kueue(trainjob) is not None
            or not settings.resume)


def carry(session: CachedSession, settings: Settings, trainjob: dict[str, Any], jobset: dict[str, Any] | None
          ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Carry the TrainJob's own marks to its JobSet (``jobset``: the one it controls, as read) and main PodGroup,
    then remove them from it: the TrainJob and the JobSet as they are now. Nothing to carry: no API call."""
    notes = objects.notes(trainjob)
    moved = {k: notes[k] for k in (*_DECISION, *_GANG) if k in notes}
    stale = AUTO_SUSPENDED_ANNOTATION in notes and not owed(trainjob)  # resumed by someone: the mark means nothing
    if jobset is None or not (moved or stale):
        return trainjob, jobset  # its JobSet is not made yet: carried once it is
    meta = objects.meta(trainjob)
    ns, name = meta["namespace"], meta["name"]
    decision = {k: v for k, v in moved.items() if k in _DECISION}
    set_notes = objects.notes(jobset)
    if (decision and not jobset_hold.marked(jobset)
            and keys.MARKER_PODGROUP not in set_notes and keys.MARKER_SKIPPED not in set_notes):
        try:
            session.patch_jobset(ns, name, jobset_patch(None, jobset, decision))
        except GuardFailed:
            raise Retry("the JobSet changed while the TrainJob's marks were carried to it") from None
        jobset = session.jobset(ns, name)
    podgroup = objects.notes(jobset).get(keys.MARKER_PODGROUP)
    if podgroup and (gang := {k: v for k, v in moved.items() if k in _GANG}):
        try:
            session.patch_podgroup(podgroup_api(settings.flavor), ns, podgroup, {"metadata": {"annotations": gang}})
        except Gone:
            pass  # the gang is gone: its marks with it
    removed = {k: None for k in moved} | ({AUTO_SUSPENDED_ANNOTATION: None} if stale else {})
    written = session.patch_trainjob(ns, name, {"metadata": {"annotations": removed}})
    return written or trainjob, jobset


def after_pass(session: CachedSession, settings: Settings, trainjob: dict[str, Any], jobset: dict[str, Any] | None,
               action: Action, outcome: Outcome) -> Outcome:
    """Resume a TrainJob the earlier gate suspended once the pass decided its JobSet or found it out of scope."""
    if not owed(trainjob):
        return outcome
    if isinstance(action, LetGo):
        if not action.ops:
            let_go(session, trainjob, jobset)
    elif not (isinstance(action, (Skip, SettleReservation))
              or isinstance(action, MakeGang) and outcome.result == "done"):
        return outcome  # not decided yet: its next pass decides it
    if kept(trainjob, settings):
        return outcome
    resume(session, trainjob, jobset)
    return Outcome("done", f"{outcome.reason}; resumed the TrainJob the earlier admission policy suspended",
                   outcome.namespace, outcome.name, outcome.uid, outcome.podgroup)


def let_go(session: CachedSession, trainjob: dict[str, Any], jobset: dict[str, Any] | None) -> None:
    """Out of scope: its JobSet (suspended, never held by 0.2.0) is marked so, so later events cost nothing."""
    if jobset is None or keys.MARKER_PODGROUP in objects.notes(jobset) or keys.MARKER_SKIPPED in objects.notes(jobset):
        return
    meta = objects.meta(trainjob)
    try:
        if ops := jobset_patch(None, jobset, {keys.MARKER_SKIPPED: "out-of-scope"}):
            session.patch_jobset(meta["namespace"], meta["name"], ops)
    except GuardFailed:
        raise Retry("the JobSet changed while it was let go") from None


def resume(session: CachedSession, trainjob: dict[str, Any], jobset: dict[str, Any] | None) -> None:
    """``spec.suspend: false`` with the annotation removed, so it is never taken for one owed again; Trainer
    resumes its JobSet with it."""
    meta = objects.meta(trainjob)
    session.patch_trainjob(meta["namespace"], meta["name"], {
        "metadata": {"annotations": {AUTO_SUSPENDED_ANNOTATION: None}}, "spec": {"suspend": False}})
    session.server.recent.decided(meta.get("uid"), objects.meta(jobset).get("uid"))


def due(session: CachedSession, entries: list[Entry]) -> list[Entry]:
    """The listed TrainJobs with marks of the earlier gate left to carry or a resume owed."""
    return [e for e in entries if concerns(e.trainjob) and not objects.deleting(e.trainjob)
            and not session.server.recent.is_decided(objects.meta(e.trainjob).get("uid"))]


def migrate(session: CachedSession, settings: Settings, entry: Entry) -> str:
    """One listed TrainJob: its marks carried; resumed when out of KAI_FN_NAMESPACES or its JobSet is decided."""
    trainjob, jobset = carry(session, settings, entry.trainjob, entry.jobset)
    carried = trainjob is not entry.trainjob
    notes = objects.notes(jobset)
    unwatched = not settings.watches(entry.key[0])
    decided = keys.MARKER_PODGROUP in notes or keys.MARKER_SKIPPED in notes
    if not owed(trainjob) or kept(trainjob, settings) or not (unwatched or decided):
        return "done" if carried else "skipped"  # an undecided one in scope: its pass decides it first
    if unwatched:
        let_go(session, trainjob, jobset)
    resume(session, trainjob, jobset)
    return "done"
