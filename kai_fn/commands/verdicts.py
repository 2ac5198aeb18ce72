"""Why kai_fn refuses a TrainJob it has not decided, as its pass would decide it now from the live objects, never
from an Event: any tenant may post a Warning with ``reportingComponent: kai-fn`` (issue 39, attack 7).

The same decision as the function's (:func:`kai_fn.core.decide.with_plan`) on the same inputs: the TrainJob, its
runtime, its JobSet, and, where the pass checks the queue first (KAI's flavor, ``KAI_FN_QUEUE_CHECK=enforce``), the
Queues (one LIST, only when some gang needs the check). The refusal has no time of its own: ``status`` then counts
it from the TrainJob's creation.
"""
from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from kai_fn.core import decide, reasons
from kai_fn.core.queue_check import QueueTree, check
from kai_fn.core.reasons import Refusal
from kai_fn.core.state import Facts
from kai_fn.kube import ApiSession, Transient
from kai_fn.settings import Settings

def refusal(settings: Settings, marks: Facts, trainjob: dict[str, Any], jobset: dict[str, Any] | None,
            found: decide.Planned, queues: Callable[[], QueueTree | None]) -> Refusal | None:
    """kai_fn's refusal of an undecided TrainJob, or None when its pass would not refuse it. ``queues``: the Queues,
    read when first needed; None when they cannot be read (the check is then not made)."""
    precheck = settings.flavor == "kai" and settings.queue_check == "enforce"
    context = decide.Context(trainjob=trainjob, jobset=jobset, now=datetime.datetime.now(datetime.UTC),
                             watched=settings.watches(str((trainjob.get("metadata") or {}).get("namespace", ""))),
                             resume=settings.resume, precheck=precheck)
    action = decide.with_plan(marks, context, found)
    if isinstance(action, decide.Refuse):
        return Refusal(reason=action.reason, message=action.message)
    if not isinstance(action, decide.MakeGang) or not action.precheck or action.plan.queue is None:
        return None
    tree = queues()
    over = check(tree, action.plan.queue, action.plan.gangs, action.plan.non_preemptible) if tree else None
    if over is None:
        return None
    return Refusal(reason=reasons.GANG_EXCEEDS_QUEUE if over.kind == "over" else reasons.QUEUE_NOT_FOUND,
                   message=over.message)


def queue_reader(session: ApiSession) -> Callable[[], QueueTree | None]:
    """The Queues, listed once on first use; None when the caller may not list them or the list fails."""
    read: list[QueueTree | None] = []

    def queues() -> QueueTree | None:
        if not read:
            try:
                read.append(session.queues()[0])
            except Transient:
                read.append(None)
        return read[0]
    return queues
