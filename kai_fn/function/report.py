"""What kai_fn tells people: Kubernetes Events on the TrainJob, and one JSON log line per delivery."""
from __future__ import annotations

import datetime
import json
import logging
import sys
from dataclasses import dataclass
from typing import Any

from kai_fn.core.plan import Plan
from kai_fn.core.reasons import (
    GANG_BOUND, GANG_CREATED, GANG_EXCEEDS_QUEUE, GANG_UNSCHEDULABLE, INVALID_RUNTIME, INVALID_TRAINJOB,
    JOBSET_MISMATCH, NOT_ADOPTED, PLAN_BLOCKED, PODGROUP_EDITED, QUEUE_NOT_FOUND, RUNTIME_NOT_FOUND, SCHEDULE_TIMEOUT,
    SCHEDULER_NOT_SERVED, TOO_LATE, UNPROCESSABLE, Result)

# The reasons are re-exported: the shell's names for them (kai_fn.core.reasons).
__all__ = [
    "GANG_BOUND", "GANG_CREATED", "GANG_EXCEEDS_QUEUE", "GANG_UNSCHEDULABLE", "INVALID_RUNTIME", "INVALID_TRAINJOB",
    "JOBSET_MISMATCH", "NOT_ADOPTED", "PLAN_BLOCKED", "PODGROUP_EDITED", "QUEUE_NOT_FOUND", "RUNTIME_NOT_FOUND",
    "SCHEDULE_TIMEOUT", "SCHEDULER_NOT_SERVED", "TOO_LATE", "UNPROCESSABLE", "Result",
    "Outcome", "JsonFormatter", "configure_logging", "gang_text", "gang_created", "log"]

log = logging.getLogger("kai_fn")


@dataclass(frozen=True)
class Outcome:
    """How one delivery ended, for the HTTP answer, the log line and the metrics."""

    result: Result
    reason: str
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    podgroup: str | None = None
    bound: bool = False  # the gang is on its nodes (GangBound posted now or before): later events of it cost nothing
    due: datetime.datetime | None = None  # the gang waits, and its schedule timeout is due then: the key's timer
    phase: str | None = None  # where a TrainJob's pass left it, as `status` says it (kai_fn/core/state.py)




class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"level": record.levelname.lower(), "msg": record.getMessage()}
        line.update(getattr(record, "fields", {}))
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


def gang_text(plan: Plan) -> str:
    """The gang in a few words: ``minMember 4`` or each stage's PodGroup."""
    held = f", places held for {plan.reserves.replace('=', ': ')}" if plan.reserves else ""
    if plan.segments is not None:
        held += f", in segments ({plan.segments.summary()})"
    if len(plan.stages) <= 1:
        return f"minMember {plan.stages[0].min_member if plan.stages else plan.min_member}{held}"
    return held.lstrip(", ") + ("; " if held else "") + "stages " + "; ".join(
        f"{s.podgroup} ({', '.join(s.replicated_jobs)}: minMember {s.min_member})" for s in plan.stages)


def gang_created(plan: Plan, created: bool, waits: str | None) -> str:
    """The GangCreated Event's message: the gang as made, and whether it may start."""
    resources = ",".join(f"{k}={v}" for k, v in plan.min_resources.items()) or "none"
    made = "PodGroups" if len(plan.podgroups) > 1 else "PodGroup"
    return (f"{made} {plan.podgroup_name}{' and its stages' if len(plan.podgroups) > 1 else ''} "
            f"{'created' if created else 'in place'}: {gang_text(plan)}, queue {plan.queue or 'n/a'}, "
            f"minResources {resources}; " + (f"left suspended: {waits}" if waits else "released"))
