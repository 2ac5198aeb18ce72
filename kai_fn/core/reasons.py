"""The reasons of kai_fn's Events on a TrainJob (each Warning explained in docs/troubleshooting.md), and how a
delivery ends: what the decision names and the shell reports."""
from __future__ import annotations

from typing import Literal

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
NOT_ADOPTED = "NotMadeByKaiFn"  # an object of the gang's name that kai_fn did not make, or that differs
# Normal
GANG_CREATED = "GangCreated"
GANG_BOUND = "GangBound"

Result = Literal["done", "skipped", "ignored", "blocked", "waiting", "retry", "error"]
