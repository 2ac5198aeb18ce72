"""The reasons of the Events kai_fn posts on a TrainJob, and a Warning of its read back: a refusal.

Each Warning reason is explained in docs/troubleshooting.md. The refusals are the Warnings by which kai_fn declines
to make a TrainJob's gang: it stays undecided, and only these Events tell ``blocked`` from ``held``.
"""
from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Warning
RUNTIME_NOT_FOUND = "RuntimeNotFound"
INVALID_RUNTIME = "InvalidRuntime"
INVALID_TRAINJOB = "InvalidTrainJob"
PLAN_BLOCKED = "PlanBlocked"
JOBSET_MISMATCH = "JobSetMismatch"
TOO_LATE = "TooLate"
GANG_UNSCHEDULABLE = "GangUnschedulable"
QUEUE_NOT_FOUND = "QueueNotFound"
GANG_EXCEEDS_QUEUE = "GangExceedsQueue"
SCHEDULE_TIMEOUT = "ScheduleTimeout"
SCHEDULER_NOT_SERVED = "SchedulerNotInstalled"  # the PodGroup or Queue API answers 404
UNPROCESSABLE = "Unprocessable"  # the object's work failed unexpectedly (kai_fn/function/isolate.py)
OBJECT_TOO_LARGE = "ObjectTooLarge"  # left out of a LIST for its size (kai_fn/kube/listing.py)
NOT_ADOPTED = "NotMadeByKaiFn"  # an object of the gang's name that kai_fn did not make, or that differs
PODGROUP_EDITED = "PodGroupEdited"  # the spec of a PodGroup kai_fn made no longer says its plan
# Normal
GANG_CREATED = "GangCreated"
GANG_BOUND = "GangBound"

# How a delivery ends: what the decision names and the shell reports.
Result = Literal["done", "skipped", "ignored", "blocked", "waiting", "retry", "error"]

# TooLate comes with kai-fn/skipped; GangUnschedulable and ScheduleTimeout after the release: none is a refusal.
REFUSALS = frozenset({RUNTIME_NOT_FOUND, INVALID_RUNTIME, INVALID_TRAINJOB, PLAN_BLOCKED, JOBSET_MISMATCH,
                      QUEUE_NOT_FOUND, GANG_EXCEEDS_QUEUE})


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
