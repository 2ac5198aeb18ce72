"""The schedule timeout, checked on each resync ping: KAI has none, so kai_fn keeps the one the runtime asks for.

The work per run is bounded to kai_fn's released, unbound gangs: when the TrainJobs the resync listed already show
a running wait, one LIST of kai_fn's PodGroups joined with them; then, per overdue gang (at most
``KAI_FN_RESYNC_LIMIT``), one LIST of its pods unless the TrainJob says it is bound, and a patch and an Event when
it is not. Every patch names the
resourceVersion read, so a TrainJob that changed meanwhile (bound, suspended, deleted) is left for the next run.
"""
from __future__ import annotations

import datetime
from typing import Any

from kai_fn.core import gang, keys
from kai_fn.core.schedule_timeout import Wait, main_stage_wait, new_wait, overdue, placed, stamp, started
from kai_fn.function import metrics, report
from kai_fn.function.cluster import Gone, Session, Stale, Transient
from kai_fn.function.settings import Settings


def check(session: Session, settings: Settings, trainjobs: list[dict[str, Any]], now: datetime.datetime) -> str:
    """Time out what is overdue; start the new wait of a TrainJob resumed after a timeout whose event was missed."""
    tally: dict[str, int] = {}
    mine = [t for t in trainjobs if settings.watches((t.get("metadata") or {}).get("namespace", ""))]
    resumed = [(t, begin) for t in mine if (begin := new_wait(t, now)) is not None]
    for trainjob, begin in resumed[: settings.resync_limit]:
        try:
            restarted = _guarded(session, trainjob, {"annotations": {keys.RELEASED_AT_ANNOTATION: begin}}, {})
        except Transient:
            _count(tally, "retry")
            continue
        _count(tally, "new wait" if restarted else "changed")
    if not any(started(t) for t in mine):
        return f"timeouts: {', '.join(f'{n} {r}' for r, n in sorted(tally.items())) or 'none waiting'}"
    try:
        podgroups = session.podgroups()
    except Transient as error:
        return f"timeouts: not checked ({error})"
    by_name = {((t.get("metadata") or {}).get("namespace"), (t.get("metadata") or {}).get("name")): t for t in mine}
    due: list[tuple[Wait, dict[str, Any], dict[str, Any]]] = []
    for podgroup in podgroups:
        meta = podgroup.get("metadata") or {}
        trainjob = by_name.get((meta.get("namespace"), (meta.get("labels") or {}).get(keys.TRAINJOB_NAME_LABEL)))
        if trainjob is not None and (wait := overdue(trainjob, podgroup, now)) is not None:
            due.append((wait, trainjob, podgroup))
    due.sort(key=lambda d: d[0].deadline)
    for wait, trainjob, podgroup in due[: settings.resync_limit]:
        try:
            _count(tally, time_out(session, settings, wait, trainjob, podgroup, now))
        except Transient:
            _count(tally, "retry")
    left = max(len(due) - settings.resync_limit, 0)
    summary = ", ".join(f"{n} {r}" for r, n in sorted(tally.items())) or "none"
    return f"timeouts: {summary}" + (f"; {left} left for the next run" if left else "")


def time_out(session: Session, settings: Settings, wait: Wait, trainjob: dict[str, Any], podgroup: dict[str, Any],
             now: datetime.datetime) -> str:
    """One overdue gang: bound after all (the wait ends quietly), or timed out (marked, maybe suspended, reported)."""
    if keys.GANG_BOUND_ANNOTATION not in ((trainjob.get("metadata") or {}).get("annotations") or {}):
        pods = session.jobset_pods(wait.namespace, wait.name)
        if placed(gang.count(podgroup, pods)):
            ended = {keys.RELEASED_AT_ANNOTATION: None, keys.TIMED_OUT_ANNOTATION: None}
            return "bound" if _guarded(session, trainjob, {"annotations": ended}, {}) else "changed"
        staged = main_stage_wait(wait, podgroup, pods)
        if staged is None or staged.deadline > now:
            return "earlier stage running" if staged is None else "stage waiting"
        wait = staged
    suspend = settings.on_timeout == "suspend"
    notes: dict[str, Any] = {keys.TIMED_OUT_ANNOTATION: stamp(now)}
    if suspend:
        notes[keys.RELEASED_AT_ANNOTATION] = None  # so a resume is recognised, and starts a new wait
    try:
        if not _guarded(session, trainjob, {"annotations": notes}, {"suspend": True} if suspend else {}):
            return "changed"
    except Transient:  # applied or not? The Event must follow exactly when it was
        fresh = session.trainjob(wait.namespace, wait.name)
        if ((fresh or {}).get("metadata", {}).get("annotations") or {}).get(keys.TIMED_OUT_ANNOTATION) != stamp(now):
            raise
    kai_says = gang.describe(gang.unschedulable(podgroup)) or (
        "no reason (is KAI Scheduler running, and do the pods name schedulerName kai-scheduler?).")
    message = (f"PodGroup {wait.podgroup} is not bound {wait.timeout}s after the wait began at {stamp(wait.started)}; "
               f"KAI says: {kai_says} ")
    message += ("The TrainJob is suspended again (KAI_FN_ON_TIMEOUT=suspend), so its pods leave the queue; set "
                "spec.suspend: false to wait again." if suspend else "The gang keeps waiting (KAI_FN_ON_TIMEOUT=event).")
    metrics.TIMEOUTS.inc()
    session.create_event(wait.namespace, report.event_body(
        trainjob, report.SCHEDULE_TIMEOUT, message, warning=True, key=f"{stamp(wait.started)}"))
    return "suspended" if suspend else "timed out"


def _guarded(session: Session, trainjob: dict[str, Any], metadata: dict[str, Any], spec: dict[str, Any]) -> bool:
    """A merge patch that applies only to the TrainJob as it was read; False when it changed or is gone."""
    meta = trainjob.get("metadata") or {}
    merge: dict[str, Any] = {"metadata": dict(metadata)}
    if meta.get("resourceVersion"):
        merge["metadata"]["resourceVersion"] = meta["resourceVersion"]
    if spec:
        merge["spec"] = spec
    try:
        session.patch_trainjob(meta.get("namespace", ""), meta.get("name", ""), merge)
    except (Stale, Gone):
        return False
    return True


def _count(tally: dict[str, int], result: str) -> None:
    tally[result] = tally.get(result, 0) + 1
