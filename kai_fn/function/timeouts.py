"""The schedule timeout: KAI has none, so kai_fn keeps the one the runtime asks for.

A wait starts when the gang's JobSet starts running (:attr:`kai_fn.core.state.Facts.wait_started`) and ends when
the gang is bound or times out; both ends are marked on the main PodGroup, so no TrainJob is written unless
``KAI_FN_ON_TIMEOUT=suspend`` asks kai_fn to suspend it. With workers (``KAI_FN_BACKGROUND_WORKERS``) a gang seen
waiting sets its TrainJob's timer in the work queue to its deadline, and :func:`on_timer` times it out then, as that
TrainJob's work (:mod:`kai_fn.function.keywork`); timers live in memory, so each resync still hands the overdue
gangs to the queue (and sets the timers of the others), for a process that started since. Without workers,
:func:`check` times them out on each resync ping. Either way, per run at most ``KAI_FN_RESYNC_LIMIT`` overdue gangs:
a LIST of its pods each, and a mark and an Event when it is not bound. A resume after such a suspension starts a new
wait by itself (JobSet's ``Suspended`` condition turns False again, after the timeout's mark).
"""
from __future__ import annotations

import datetime
from typing import Any

from kai_fn.core import gang, keys, objects
from kai_fn.core.objects import stamp
from kai_fn.core.schedule_timeout import Wait, main_stage_wait, waiting
from kai_fn.core.state import Entry, facts, gang_name, join, judged, own_jobset, podgroup_api
from kai_fn.function import gang_plan, metrics, report
from kai_fn.kube import Gone, Stale, Transient
from kai_fn.function.cluster import CachedSession
from kai_fn.function.isolate import apart, tally_of
from kai_fn.settings import Settings
from kai_fn.kube.events import event_body


def waits(session: CachedSession, settings: Settings, entries: list[Entry]) -> list[tuple[Wait, Entry]]:
    """Every listed gang that waits with a schedule timeout, the soonest due first."""
    found = [(wait, e) for e in entries if e.podgroup is not None and settings.watches(e.key[0])
             and (wait := apart("timeout", session, e.trainjob,
                                lambda: waiting(e.trainjob, e.marks, e.podgroup or {}), None)) is not None]
    return sorted(found, key=lambda d: d[0].deadline)


def check(session: CachedSession, settings: Settings, entries: list[Entry], now: datetime.datetime) -> str:
    """Time out what is overdue, here (no work queue)."""
    tally: dict[str, int] = {}
    due = [(wait, e) for wait, e in waits(session, settings, entries) if wait.deadline <= now]
    for wait, entry in due[: settings.resync_limit]:
        with session.server.locks.hold(entry.key):
            _count(tally, tally_of("timeout", session, entry.trainjob,
                                   lambda: timed(session, settings, wait, entry, now)[0]))
    left = max(len(due) - settings.resync_limit, 0)
    summary = ", ".join(f"{n} {r}" for r, n in sorted(tally.items())) or "none"
    return f"timeouts: {summary}" + (f"; {left} left for the next run" if left else "")


def on_timer(session: CachedSession, settings: Settings, key: tuple[str, str], now: datetime.datetime
             ) -> tuple[str, datetime.datetime | None]:
    """The TrainJob's timer (:mod:`kai_fn.function.keywork`): its objects read now (the TrainJob, its JobSet, its
    main PodGroup), then :func:`timed` when its gang is overdue; and when to look again, if ever."""
    ns, name = key
    if settings.flavor != "kai" or not settings.watches(ns):
        return "not kept here", None
    trainjob = session.trainjob(ns, name)
    if trainjob is None:
        return "the TrainJob no longer exists", None
    jobset = session.jobset(ns, name)
    marks = facts(trainjob, own_jobset(trainjob, jobset))
    podgroup = session.podgroup(podgroup_api(settings.flavor), ns, marks.podgroup or gang_name(trainjob, "kai"))
    (entry,) = join([trainjob], [jobset] if jobset else [], [podgroup] if podgroup else [])
    wait = waiting(entry.trainjob, entry.marks, entry.podgroup) if entry.podgroup is not None else None
    if wait is None:
        return "not waiting", None
    if wait.deadline > now:
        return "waiting", wait.deadline
    return timed(session, settings, wait, entry, now)


def timed(session: CachedSession, settings: Settings, wait: Wait, entry: Entry, now: datetime.datetime
          ) -> tuple[str, datetime.datetime | None]:
    """One overdue gang: bound after all (:func:`kai_fn.core.state.judged`, against its plan: marked, the wait ends
    quietly), or timed out (marked, maybe suspended, reported); and when a staged gang's main wave, not due yet, is."""
    podgroup = entry.podgroup or {}
    planned = gang_plan.of(session, settings, entry.trainjob)
    if planned is None:
        return "no plan now", None  # neither bound nor timed out on a count kai_fn cannot make (gang_plan.py)
    pods = session.jobset_pods(wait.namespace, wait.name)
    if judged(planned, podgroup, pods).bound:
        return ("bound" if _mark(session, podgroup, keys.GANG_BOUND_ANNOTATION, now) else "changed"), None
    staged = main_stage_wait(wait, podgroup, pods)
    if staged is None:
        return "earlier stage running", None
    if staged.deadline > now:
        return "stage waiting", staged.deadline
    return _expire(session, settings, staged, entry, now), None


def _expire(session: CachedSession, settings: Settings, wait: Wait, entry: Entry, now: datetime.datetime) -> str:
    """The gang's wait is over: suspended (``KAI_FN_ON_TIMEOUT=suspend``), reported, marked."""
    podgroup = entry.podgroup or {}
    suspend = settings.on_timeout == "suspend"
    # The suspension first: the timeout's mark ends the wait, so a mark written before a suspension that failed
    # would leave the gang running and never timed out again.
    if suspend:
        meta = entry.trainjob.get("metadata") or {}
        try:
            session.patch_trainjob(wait.namespace, wait.name, {"spec": {"suspend": True}, "metadata": {
                "resourceVersion": meta.get("resourceVersion")}} if meta.get("resourceVersion") else
                {"spec": {"suspend": True}})
        except (Stale, Gone):
            return "changed"
        except Transient:  # applied or not? The mark and the Event follow exactly when it was
            fresh = session.trainjob(wait.namespace, wait.name)
            if (fresh or {}).get("metadata", {}).get("uid") != wait.uid or not objects.suspended(fresh):
                raise
        session.server.recent.forget(wait.uid)
    kai_says = gang.describe(gang.unschedulable(podgroup)) or (
        "no reason (is KAI Scheduler running, and do the pods name schedulerName kai-scheduler?).")
    message = (f"PodGroup {wait.podgroup} is not bound {wait.timeout}s after the wait began at {stamp(wait.started)}; "
               f"KAI says: {kai_says} ")
    message += ("The TrainJob is suspended again (KAI_FN_ON_TIMEOUT=suspend), so its pods leave the queue; set "
                "spec.suspend: false to wait again." if suspend else "The gang keeps waiting (KAI_FN_ON_TIMEOUT=event).")
    # The Event before the mark that ends the wait: a mark that fails leaves the wait to the next resync, whose
    # Event of the same wait is the same Event (its name comes from the wait's start); a suspended TrainJob has no
    # wait left to time out, so its Event is posted now or never.
    session.create_event(wait.namespace, event_body(
        entry.trainjob, report.SCHEDULE_TIMEOUT, message, warning=True, key=f"{stamp(wait.started)}"))
    if not _mark(session, podgroup, keys.TIMED_OUT_ANNOTATION, now):
        return "changed"
    metrics.TIMEOUTS.inc()
    return "suspended" if suspend else "timed out"


def _mark(session: CachedSession, podgroup: dict[str, Any], key: str, now: datetime.datetime) -> bool:
    """One of the gang's marks on its main PodGroup; False when it is gone. Not guarded by resourceVersion: KAI
    writes the PodGroup's status all the time, and a mark is a fact about the gang, not about that copy."""
    meta = podgroup.get("metadata") or {}
    merge: dict[str, Any] = {"metadata": {"annotations": {key: stamp(now)}}}
    try:
        session.patch_podgroup(podgroup.get("apiVersion", keys.KAI_PODGROUP_API), meta.get("namespace", ""),
                               meta.get("name", ""), merge)
    except (Stale, Gone):
        return False
    return True


def _count(tally: dict[str, int], result: str) -> None:
    tally[result] = tally.get(result, 0) + 1
