"""One reading of where a TrainJob stands with kai_fn, shared by ``status``, ``release`` and ``explain``.

Pure: the TrainJob, the JobSet it controls, kai_fn's PodGroups, the JobSet's pods and kai_fn's refusals (Warning
Events) in; a :class:`Reading` out. The states, in the order an operator should look at them:

- ``held``: the admission policy holds its JobSet (or the earlier policy suspended the TrainJob) and kai_fn has not
  decided it yet; no refusal on record;
- ``blocked``: kai_fn refused to release it (queue pre-check, missing runtime, blocked plan, …): held, with a
  Warning Event naming why;
- ``timed-out``: its gang was not bound within its schedule timeout (``kai-fn/timed-out`` for the current wait);
- ``waiting``: released with its gang, not every pod of the gang bound; KAI's reasons when KAI gave some;
- ``suspended``: kept suspended on purpose (``kai-fn/hold``, Kueue, ``KAI_FN_RESUME=false``, or its user);
- ``running-without-gang``: released without a gang (out of scope, too late, or by an operator: ``kai-fn/skipped``),
  or running without ever being held;
- ``bound``: every pod of the gang on a node (``kai-fn/bound``, or the pods say so now).

MPI's launcher: while placeholders hold its place in the nodes' gang (``kai-fn/reserves`` on the main PodGroup, not
yet ``kai-fn/reservation-ended``), ``waiting`` says so, and every reading carries ``reservation``.

Stages: "bound" is judged on the PodGroup the decision ``kai-fn/podgroup`` names (the trainer stage), while KAI's
reasons are gathered from every PodGroup of the TrainJob (label ``kai-fn/trainjob-uid``), each stage's included.
"""
from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kai_fn.core import gang, keys, reserve, segments, triage
from kai_fn.core.schedule_timeout import parse_time, stamp
from kai_fn.function import report

State = Literal["held", "blocked", "timed-out", "waiting", "suspended", "running-without-gang", "bound"]
STATES: tuple[State, ...] = ("held", "blocked", "timed-out", "waiting", "suspended", "running-without-gang", "bound")
# Warnings by which kai_fn refuses to release a TrainJob: it stays suspended without a marker (README,
# Troubleshooting). TooLate comes with kai-fn/skipped, GangUnschedulable and ScheduleTimeout after the release.
REFUSALS = frozenset({report.RUNTIME_NOT_FOUND, report.INVALID_RUNTIME, report.INVALID_TRAINJOB, report.PLAN_BLOCKED,
                      report.JOBSET_MISMATCH, report.QUEUE_NOT_FOUND, report.GANG_EXCEEDS_QUEUE})
_SKIPPED = {
    "out-of-scope": "released without a gang: it does not ask for KAI",
    "running": "TooLate: its JobSet ran without being held, its pods could not join a gang",
    keys.SKIPPED_BY_OPERATOR: "released without a gang by an operator (kubectl kai-fn release)",
}
_GPUS = ("nvidia.com/gpu", "amd.com/gpu")


class _Involved(BaseModel):
    uid: str | None = None


class Refusal(BaseModel):
    """A Warning kai_fn posted on a TrainJob (a core/v1 Event, the fields read)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    involved: _Involved = Field(default_factory=_Involved, alias="involvedObject")
    reason: str = ""
    message: str = ""
    first: datetime.datetime | None = Field(None, alias="firstTimestamp")
    event_time: datetime.datetime | None = Field(None, alias="eventTime")

    @property
    def at(self) -> datetime.datetime | None:
        return self.first or self.event_time


def refusals(events: Iterable[dict[str, Any]]) -> dict[str, list[Refusal]]:
    """kai_fn's refusals by TrainJob uid, oldest first; other Events are left out."""
    found: dict[str, list[Refusal]] = {}
    for event in events:
        seen = Refusal.model_validate(event)
        if seen.reason in REFUSALS and seen.involved.uid:
            found.setdefault(seen.involved.uid, []).append(seen)
    floor = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    return {uid: sorted(found[uid], key=lambda r: r.at or floor) for uid in found}


@dataclass(frozen=True)
class Reading:
    namespace: str
    name: str
    uid: str
    state: State
    reason: str
    since: datetime.datetime | None
    queue: str | None = None
    min_member: int | None = None
    gpus: str | None = None
    podgroup: str | None = None
    reservation: str | None = None  # places held for a later wave (MPI's launcher), or when they were handed over

    def age(self, now: datetime.datetime) -> float:
        return (now - self.since).total_seconds() if self.since else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "state": self.state, "reason": self.reason,
                "since": stamp(self.since) if self.since else None, "queue": self.queue, "minMember": self.min_member,
                "gpus": self.gpus, "podGroup": self.podgroup, "reservation": self.reservation}


def in_scope(trainjob: dict[str, Any], jobset: dict[str, Any] | None = None, podgroups: Sequence[dict[str, Any]] = (),
             refused: Sequence[Refusal] = ()) -> bool:
    """A TrainJob kai_fn has touched or is owed: any ``kai-fn/`` mark on it or its JobSet, the queue label, a
    PodGroup of kai_fn's or a refusal."""
    marked = any(k.startswith("kai-fn/") for k in {**triage.notes(trainjob), **triage.notes(jobset),
                                                   **triage.labels(jobset)})
    return bool(marked or keys.KAI_QUEUE_LABEL in triage.labels(trainjob) or podgroups or refused)


def owed_a_release(trainjob: dict[str, Any], jobset: dict[str, Any] | None = None) -> bool:
    """Held, undecided, not kept held on purpose: kai_fn has still to release it (or has refused to)."""
    marks = triage.marks(trainjob, jobset)
    return ((marks.held or marks.legacy_owed) and not marks.decided and triage.hold_reason(trainjob) is None
            and not marks.deleting)


def may_be_refused(trainjob: dict[str, Any], jobset: dict[str, Any] | None) -> bool:
    """Undecided and still stopped: only kai_fn's Warnings tell ``blocked`` from ``held``."""
    marks = triage.marks(trainjob, jobset)
    return owed_a_release(trainjob, jobset) or ((marks.jobset_suspended or not marks.has_jobset) and not marks.decided)


def read(trainjob: dict[str, Any], jobset: dict[str, Any] | None, podgroups: Sequence[dict[str, Any]],
         pods: Sequence[dict[str, Any]], refused: Sequence[Refusal] = ()) -> Reading:
    """Where the TrainJob stands. ``jobset``: the one it controls, if any; ``podgroups``: kai_fn's PodGroups in its
    namespace (any TrainJob's: this one's are picked by uid); ``pods``: its JobSet's (or more); ``refused``: kai_fn's
    refusals of it, oldest first."""
    meta = trainjob.get("metadata") or {}
    uid = meta.get("uid") or ""
    mine = [p for p in podgroups if triage.labels(p).get(keys.TRAINJOB_UID_LABEL) == uid]
    first = triage.marks(trainjob, jobset)
    main = next((p for p in mine if p["metadata"].get("name") == first.podgroup), None)
    marks = triage.marks(trainjob, jobset, main)
    created = parse_time(meta.get("creationTimestamp"))

    def reading(state: State, reason: str, since: datetime.datetime | None = None) -> Reading:
        return Reading(meta.get("namespace", ""), meta.get("name", ""), uid, state, reason, since or created,
                       **_gang_of(trainjob, main))

    if marks.skipped is not None:
        return reading("running-without-gang", _SKIPPED.get(marks.skipped, f"kai_fn skipped it ({marks.skipped})"))
    if marks.podgroup is None:
        if marks.held or marks.legacy_owed:
            if (hold := triage.hold_reason(trainjob)) is not None:
                return reading("suspended", hold)
            if refused:
                last = refused[-1]
                return reading("blocked", f"{last.reason}: {last.message}", refused[0].at)
            if marks.legacy_owed:
                return reading("held", "suspended by the earlier admission policy; kai_fn has not released it yet")
            return reading("held", "its JobSet is held by the admission policy; kai_fn has not made its gang yet")
        if not marks.has_jobset:
            if refused:  # e.g. RuntimeNotFound: Trainer cannot make its JobSet either
                last = refused[-1]
                return reading("blocked", f"{last.reason}: {last.message}", refused[0].at)
            return reading("held", "Trainer has not made its JobSet yet")
        if marks.jobset_suspended:
            if refused:
                last = refused[-1]
                return reading("blocked", f"{last.reason}: {last.message}", refused[0].at)
            return reading("suspended", _hold(trainjob) or "suspended by its user; its JobSet was never held")
        return reading("running-without-gang", "its JobSet ran without being held: kai_fn never made its gang")
    counted = gang.count(main, pods) if main is not None else None
    if marks.bound is not None or (counted is not None and counted.bound and marks.running):
        placed = f", {described}" if (described := segments.of_podgroup(main)) else ""
        return reading("bound", f"every pod of the gang is on a node{placed}", marks.bound)
    kai = gang.describe(reasons(mine, main))
    if marks.timed_out is not None and (marks.resumed is None or marks.resumed <= marks.timed_out):
        then = "suspended again: set spec.suspend: false to wait again" if marks.suspended else "still waiting"
        return reading("timed-out", f"not bound within its schedule timeout; {then}" + (f"; KAI: {kai}" if kai else ""),
                       marks.timed_out)
    if not marks.running:
        return reading("suspended", "gang made, left suspended: " + (_hold(trainjob) or "KAI_FN_RESUME=false, or "
                                                                       "suspended by its user"))
    if main is None:
        return reading("waiting", f"its PodGroup {marks.podgroup} is gone, so its pods never schedule: resubmit it",
                       marks.resumed)
    held = f"; {note}" if (note := reservation(main)) and reserve.ended(main) is None else ""
    if described := segments.of_podgroup(main):
        held += f"; in segments: {described}"
    if kai:
        return reading("waiting", f"KAI: {kai}{held}", marks.resumed)
    return reading("waiting", f"the scheduler has not placed it yet ({counted.summary() if counted else ''}){held}",
                   marks.resumed)


def reservation(main: dict[str, Any] | None) -> str | None:
    """Places held in the gang for pods JobSet makes later (kai_fn/core/reserve.py), in words; None without any."""
    held = reserve.parse_reserves(triage.notes(main).get(keys.RESERVES_ANNOTATION))
    if not held:
        return None
    what = ", ".join(f"{job} ({count} pod{'s' if count > 1 else ''})" for job, count in held.items())
    if (ended := reserve.ended(main)) is not None:
        moment, why = ended
        return f"the places of {what} were {'handed over' if why == 'handed-over' else 'let go: ' + why} at {moment}"
    return f"placeholder pods hold the places of {what} in the gang until JobSet makes them"


def reasons(podgroups: Sequence[dict[str, Any]], main: dict[str, Any] | None = None) -> tuple[gang.Reason, ...]:
    """KAI's reasons from every PodGroup of one TrainJob, its main one's first, each once."""
    ordered = ([main] if main is not None else []) + [p for p in podgroups if p is not main]
    return tuple(dict.fromkeys(r for p in ordered for r in gang.unschedulable(p)))


def held_longer(reading: Reading, now: datetime.datetime, period: float) -> bool:
    return reading.state == "held" and reading.age(now) > period


def stranded(reading: Reading, absent: str | None, now: datetime.datetime, period: float) -> bool:
    """Held longer than a resync period while the function looks absent: nothing will release it."""
    return absent is not None and held_longer(reading, now, period)


def order(readings: Iterable[Reading], now: datetime.datetime) -> list[Reading]:
    """What needs attention first: by state (held first, bound last), then the longest in it first."""
    return sorted(readings, key=lambda r: (STATES.index(r.state), -r.age(now), r.namespace, r.name))


def _hold(trainjob: dict[str, Any]) -> str | None:
    return triage.queued_by_kueue(trainjob) or triage.hold_reason(trainjob)


def _gang_of(trainjob: dict[str, Any], main: dict[str, Any] | None) -> dict[str, Any]:
    """Queue, minMember and GPUs of the gang as made, or the queue label before it is."""
    label = ((trainjob.get("metadata") or {}).get("labels") or {}).get(keys.KAI_QUEUE_LABEL)
    if main is None:
        return {"queue": label}
    spec = main.get("spec") or {}
    notes = (main.get("metadata") or {}).get("annotations") or {}
    resources = dict(part.split("=", 1) for part in (notes.get(keys.MIN_RESOURCES_ANNOTATION) or "").split(",")
                     if "=" in part)
    return {"queue": spec.get("queue") or label, "min_member": sum(gang.minima(main).values()) or None,
            "gpus": next((resources[g] for g in _GPUS if g in resources), None), "podgroup": main["metadata"]["name"],
            "reservation": reservation(main)}
