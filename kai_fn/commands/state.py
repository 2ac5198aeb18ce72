"""One reading of where a TrainJob stands with kai_fn, shared by ``status``, ``release`` and ``explain``.

Pure: the TrainJob, kai_fn's PodGroups, the JobSet's pods and kai_fn's refusals (Warning Events) in; a
:class:`Reading` out. The states, in the order an operator should look at them:

- ``held``: suspended and owed a release by kai_fn, which has not given it yet (the admission policy suspended it,
  or its author did and it asks for KAI by label); no refusal on record;
- ``blocked``: kai_fn refused to release it (queue pre-check, missing runtime, blocked plan, …): suspended without a
  marker, with a Warning Event naming why;
- ``timed-out``: its gang was not bound within its schedule timeout (``kai-fn/timed-out`` for the current wait);
- ``waiting``: released with its gang, not every pod of the gang bound; KAI's reasons when KAI gave some;
- ``suspended``: kept suspended on purpose (``kai-fn/hold``, Kueue, ``KAI_FN_RESUME=false``, or its user);
- ``running-without-gang``: released without a gang (out of scope, too late, or by an operator: ``kai-fn/skipped``),
  or resumed by someone else before kai_fn made one;
- ``bound``: every pod of the gang on a node (``kai-fn/bound``, or the pods say so now).

Stages: "bound" is judged on the PodGroup the marker ``kai-fn/podgroup`` names (the trainer stage), while KAI's
reasons are gathered from every PodGroup of the TrainJob (label ``kai-fn/trainjob-uid``), each stage's included.
"""
from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kai_fn.core import gang, keys
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
    "running": "TooLate: submitted running, its pods could not join a gang",
    keys.SKIPPED_BY_OPERATOR: "released without a gang by an operator (python -m kai_fn release)",
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

    def age(self, now: datetime.datetime) -> float:
        return (now - self.since).total_seconds() if self.since else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "state": self.state, "reason": self.reason,
                "since": stamp(self.since) if self.since else None, "queue": self.queue, "minMember": self.min_member,
                "gpus": self.gpus, "podGroup": self.podgroup}


def in_scope(trainjob: dict[str, Any], podgroups: Sequence[dict[str, Any]] = (), refused: Sequence[Refusal] = ()
             ) -> bool:
    """A TrainJob kai_fn has touched or is owed: any ``kai-fn/`` annotation, the queue label, a PodGroup of kai_fn's or
    a refusal. (One in scope only through its runtime, that its author suspended, shows once kai_fn acted on it.)"""
    meta = trainjob.get("metadata") or {}
    return bool(any(k.startswith("kai-fn/") for k in meta.get("annotations") or {})
                or keys.KAI_QUEUE_LABEL in (meta.get("labels") or {}) or podgroups or refused)


def owed_a_release(trainjob: dict[str, Any]) -> bool:
    """Suspended, unmarked, not kept suspended on purpose: kai_fn has still to release it (or has refused to)."""
    meta = trainjob.get("metadata") or {}
    notes = meta.get("annotations") or {}
    return ((trainjob.get("spec") or {}).get("suspend") is True and not _marked(notes) and _hold(meta) is None
            and not meta.get("deletionTimestamp"))


def read(trainjob: dict[str, Any], podgroups: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]],
         refused: Sequence[Refusal] = ()) -> Reading:
    """Where the TrainJob stands. ``podgroups``: kai_fn's PodGroups in its namespace (any TrainJob's: this one's are
    picked by uid); ``pods``: its JobSet's (or more); ``refused``: kai_fn's refusals of it, oldest first."""
    meta = trainjob.get("metadata") or {}
    notes, uid = meta.get("annotations") or {}, meta.get("uid") or ""
    mine = [p for p in podgroups if ((p.get("metadata") or {}).get("labels") or {}).get(keys.TRAINJOB_UID_LABEL) == uid]
    marker = notes.get(keys.MARKER_PODGROUP)
    main = next((p for p in mine if p["metadata"].get("name") == marker), None)
    created = parse_time(meta.get("creationTimestamp"))
    suspended = (trainjob.get("spec") or {}).get("suspend") is True

    def reading(state: State, reason: str, since: datetime.datetime | None = None) -> Reading:
        return Reading(meta.get("namespace", ""), meta.get("name", ""), uid, state, reason, since or created,
                       **_gang_of(trainjob, main))

    if keys.MARKER_SKIPPED in notes:
        value = notes[keys.MARKER_SKIPPED]
        return reading("running-without-gang", _SKIPPED.get(value, f"kai_fn skipped it ({value})"))
    if marker is None:
        if not suspended:
            why = ("resumed by someone other than kai_fn, before its gang was made"
                   if notes.get(keys.AUTO_SUSPENDED_ANNOTATION) == "true"
                   else "submitted running: kai_fn never made its gang")
            return reading("running-without-gang", why)
        if (hold := _hold(meta)) is not None:
            return reading("suspended", hold)
        if refused:
            last = refused[-1]
            return reading("blocked", f"{last.reason}: {last.message}", refused[0].at)
        if notes.get(keys.AUTO_SUSPENDED_ANNOTATION) == "true":
            return reading("held", "suspended by the admission policy; kai_fn has not released it yet")
        return reading("held", "suspended, asks for KAI; kai_fn has not made its gang yet")
    counted = gang.count(main, pods) if main is not None else None
    if keys.GANG_BOUND_ANNOTATION in notes or (counted is not None and counted.bound and not suspended):
        return reading("bound", "every pod of the gang is on a node", parse_time(notes.get(keys.GANG_BOUND_ANNOTATION)))
    kai = gang.describe(reasons(mine, main))
    timed_out = parse_time(notes.get(keys.TIMED_OUT_ANNOTATION))
    began = parse_time(notes.get(keys.RELEASED_AT_ANNOTATION))
    if timed_out is not None and (began is None or began <= timed_out):
        then = "suspended again: set spec.suspend: false to wait again" if suspended else "still waiting"
        return reading("timed-out", f"not bound within its schedule timeout; {then}" + (f"; KAI: {kai}" if kai else ""),
                       timed_out)
    if suspended:
        return reading("suspended", "gang made, left suspended: " + (_hold(meta) or "KAI_FN_RESUME=false, or "
                                                                       "suspended by its user"))
    if main is None:
        return reading("waiting", f"its PodGroup {marker} is gone, so its pods never schedule: resubmit it", began)
    if kai:
        return reading("waiting", f"KAI: {kai}", began)
    return reading("waiting", f"the scheduler has not placed it yet ({counted.summary() if counted else ''})", began)


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


def _marked(notes: dict[str, str]) -> bool:
    return keys.MARKER_PODGROUP in notes or keys.MARKER_SKIPPED in notes


def _hold(meta: dict[str, Any]) -> str | None:
    if keys.KUEUE_QUEUE_LABEL in (meta.get("labels") or {}):
        return f"Kueue admits it ({keys.KUEUE_QUEUE_LABEL})"
    if (meta.get("annotations") or {}).get(keys.HOLD_ANNOTATION) == "true":
        return f"held by {keys.HOLD_ANNOTATION}"
    return None


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
            "gpus": next((resources[g] for g in _GPUS if g in resources), None), "podgroup": main["metadata"]["name"]}
