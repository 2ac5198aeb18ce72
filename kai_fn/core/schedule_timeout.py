"""A schedule timeout for KAI, which has none (FACTS.md §2): the state lives on the TrainJob's annotations.

- ``kai-fn/released-at: T``: a wait for the gang started at T (the release, or a resume after a timeout).
- ``kai-fn/bound``: the gang was placed; the wait is over.
- ``kai-fn/timed-out: U`` with U >= T: this wait timed out and was reported, and is not checked again. With
  ``KAI_FN_ON_TIMEOUT=suspend`` the TrainJob was also suspended and ``released-at`` removed; so a marked TrainJob
  that runs with ``timed-out`` but without ``released-at`` was resumed by its user, and a new wait starts. Any
  other event of a marked TrainJob needs no API call.

The timeout: the TrainJob annotation ``kai-fn/schedule-timeout-seconds`` if valid, else the same annotation on the
PodGroup (the runtime's ``podGroupPolicy.kai.scheduleTimeoutSeconds`` or the setting, recorded when it was made).
0 means none.
"""
from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, replace
from typing import Any

from kai_fn.core import keys
from kai_fn.core.gang import GangCount, members

_SECONDS = re.compile(r"^[0-9]{1,9}$")
_ONE_SECOND = datetime.timedelta(seconds=1)


def stamp(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC to the second, as Kubernetes writes times."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else None


def parse_seconds(text: str | None) -> int | None:
    """A whole number of seconds, or None when absent or not one."""
    return int(text) if text is not None and _SECONDS.match(text) else None


def seconds_problem(notes: dict[str, str]) -> str | None:
    """What is wrong with a TrainJob's timeout annotation, for the plan to report."""
    value = notes.get(keys.SCHEDULE_TIMEOUT_ANNOTATION)
    if value is None or parse_seconds(value) is not None:
        return None
    return f"{value!r} is not a whole number of seconds (0 means no timeout)"


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _notes(obj: dict[str, Any]) -> dict[str, str]:
    return _meta(obj).get("annotations") or {}


@dataclass(frozen=True)
class Wait:
    """A released gang not yet bound, and when its wait ends."""

    namespace: str
    name: str
    uid: str
    podgroup: str
    started: datetime.datetime
    timeout: int

    @property
    def deadline(self) -> datetime.datetime:
        return self.started + datetime.timedelta(seconds=self.timeout)


def started(trainjob: dict[str, Any]) -> datetime.datetime | None:
    """When the TrainJob's running wait began, or None: not released by kai_fn, bound, already timed out,
    suspended or being deleted. What the resync can tell from the TrainJob alone."""
    meta, notes = _meta(trainjob), _notes(trainjob)
    if (keys.MARKER_PODGROUP not in notes or meta.get("deletionTimestamp")
            or (trainjob.get("spec") or {}).get("suspend") is not False or keys.GANG_BOUND_ANNOTATION in notes):
        return None
    began = parse_time(notes.get(keys.RELEASED_AT_ANNOTATION))
    timed_out = parse_time(notes.get(keys.TIMED_OUT_ANNOTATION))
    if began is None or (timed_out is not None and timed_out >= began):
        return None
    return began


def waiting(trainjob: dict[str, Any], podgroup: dict[str, Any]) -> Wait | None:
    """The TrainJob's running wait for this PodGroup (see :func:`started`), or None; also None when the PodGroup is
    not the TrainJob's, or there is no timeout."""
    meta, notes = _meta(trainjob), _notes(trainjob)
    pg_meta = _meta(podgroup)
    began = started(trainjob)
    if (began is None or notes.get(keys.MARKER_PODGROUP) != pg_meta.get("name")
            or (pg_meta.get("labels") or {}).get(keys.TRAINJOB_UID_LABEL) != meta.get("uid")):
        return None
    timeout = parse_seconds(notes.get(keys.SCHEDULE_TIMEOUT_ANNOTATION))
    if timeout is None:
        timeout = parse_seconds(_notes(podgroup).get(keys.SCHEDULE_TIMEOUT_ANNOTATION))
    if not timeout:
        return None
    return Wait(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""), pg_meta["name"], began, timeout)


def overdue(trainjob: dict[str, Any], podgroup: dict[str, Any], now: datetime.datetime) -> Wait | None:
    wait = waiting(trainjob, podgroup)
    return wait if wait is not None and wait.deadline <= now else None


def new_wait(trainjob: dict[str, Any], now: datetime.datetime) -> str | None:
    """The ``released-at`` to write when the user resumed a TrainJob the timeout suspended; None otherwise.
    Strictly after ``timed-out``, so the new wait is never mistaken for the one that timed out."""
    notes = _notes(trainjob)
    if (keys.MARKER_PODGROUP not in notes or keys.RELEASED_AT_ANNOTATION in notes
            or (trainjob.get("spec") or {}).get("suspend") is not False or _meta(trainjob).get("deletionTimestamp")):
        return None
    timed_out = parse_time(notes.get(keys.TIMED_OUT_ANNOTATION))
    if timed_out is None:
        return None
    return stamp(max(now, timed_out + _ONE_SECOND))


def placed(counted: GangCount) -> bool:
    """Whether KAI placed the gang, which ends its wait: its ``minMember`` pods on nodes (with subgroups, which
    kai_fn no longer makes but a PodGroup made before may have, any one subgroup's)."""
    return counted.bound or any(part.satisfied for part in counted.parts)


def main_stage_wait(wait: Wait, podgroup: dict[str, Any], pods: list[dict[str, Any]]) -> Wait | None:
    """The wait of a staged gang's main wave, which starts when its first pod exists: the waves before it
    (initializers) run first, for as long as they need, and are not the scheduler's delay. None while none of its
    pods exists yet. A flat gang's wait is unchanged: it starts at the release."""
    if keys.STAGE_ANNOTATION not in _notes(podgroup):
        return wait
    created = [t for pod in members(podgroup, pods) if (t := parse_time(_meta(pod).get("creationTimestamp")))]
    if not created:
        return None
    return replace(wait, started=max(wait.started, min(created)))
