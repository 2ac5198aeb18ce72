"""A schedule timeout for KAI, which has none: pure, over the facts :mod:`kai_fn.core.state` reads.

A wait begins when the gang's JobSet starts running and ends when the gang is bound (``kai-fn/bound`` on its main
PodGroup) or times out (``kai-fn/timed-out``, which ends only that wait: a later resume starts another). The
timeout: the TrainJob annotation ``kai-fn/schedule-timeout-seconds`` if valid, else the same annotation on the
PodGroup (the runtime's ``podGroupPolicy.kai.scheduleTimeoutSeconds`` or the setting, recorded when it was made).
0 means none.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, replace
from typing import Any

from kai_fn.core import keys
from kai_fn.core.gang import members
from kai_fn.core.objects import meta as _meta, notes as _notes, parse_time
from kai_fn.core.scope import parse_seconds
from kai_fn.core.state import Facts


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


def waiting(trainjob: dict[str, Any], marks: Facts, podgroup: dict[str, Any]) -> Wait | None:
    """The TrainJob's running wait for this PodGroup, or None: not waiting, the PodGroup is not its main gang's,
    or there is no timeout."""
    meta, notes = _meta(trainjob), _notes(trainjob)
    pg_meta = _meta(podgroup)
    began = marks.wait_started
    if (began is None or marks.podgroup != pg_meta.get("name")
            or (pg_meta.get("labels") or {}).get(keys.TRAINJOB_UID_LABEL) != meta.get("uid")):
        return None
    timeout = parse_seconds(notes.get(keys.SCHEDULE_TIMEOUT_ANNOTATION))
    if timeout is None:
        timeout = parse_seconds(_notes(podgroup).get(keys.SCHEDULE_TIMEOUT_ANNOTATION))
    if not timeout:
        return None
    return Wait(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""), pg_meta["name"], began, timeout)


def overdue(trainjob: dict[str, Any], marks: Facts, podgroup: dict[str, Any], now: datetime.datetime) -> Wait | None:
    wait = waiting(trainjob, marks, podgroup)
    return wait if wait is not None and wait.deadline <= now else None


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
