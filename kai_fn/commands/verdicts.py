"""Why kai_fn refuses a TrainJob it has not decided, as its pass would decide it now from the live objects, never
from an Event: any tenant may post a Warning with ``reportingComponent: kai-fn`` (issue 39, attack 7).

The same decision as the function's (:func:`kai_fn.core.decide.with_plan`) on the same inputs: the TrainJob, its
runtime, its JobSet, and, where the pass checks the queue first (KAI's flavor, ``KAI_FN_QUEUE_CHECK=enforce``), the
Queues (one LIST, only when some gang needs the check). The refusal has no time of its own: ``status`` then counts
it from the TrainJob's creation.
"""
from __future__ import annotations

import datetime
from typing import Any

from kai_fn.core import decide, reasons
from kai_fn.core.queue_check import QueueTree
from kai_fn.core.reasons import Refusal
from kai_fn.core.state import Facts
from kai_fn import plan_inputs
from kai_fn.kube import ApiSession, Transient
from kai_fn.settings import Settings

def refusal(settings: Settings, marks: Facts, trainjob: dict[str, Any], jobset: dict[str, Any] | None,
            found: decide.Planned, queues: ListedOnce) -> Refusal | None:
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
    try:
        _, over = plan_inputs.queue_check(queues, action.plan)
    except plan_inputs.Unread:
        return None
    if over is None:
        return None
    return Refusal(reason=reasons.GANG_EXCEEDS_QUEUE if over.kind == "over" else reasons.QUEUE_NOT_FOUND,
                   message=over.message)


class ListedOnce:
    """The Queues, listed once on first use (a :class:`kai_fn.plan_inputs.QueueReader`); unreadable
    (:class:`kai_fn.plan_inputs.Unread`) when the caller may not list them or the list fails: the check is not made."""

    def __init__(self, session: ApiSession) -> None:
        self.session = session
        self._read: list[QueueTree | None] = []

    def queues(self, fresh: bool = False) -> tuple[QueueTree, bool]:
        if not self._read:
            try:
                self._read.append(self.session.queues()[0])
            except Transient:
                self._read.append(None)
        if (tree := self._read[0]) is None:
            raise plan_inputs.Unread("the Queues cannot be listed")
        return tree, False
