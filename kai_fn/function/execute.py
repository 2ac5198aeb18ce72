"""Carrying out what :mod:`kai_fn.core.decide` decided for one TrainJob: the API calls, the Event, the Outcome.

A gang is made in order: the Queue checked (KAI's own limits, nothing allocated), its PodGroups created or adopted,
its placeholders made, then the JobSet's one guarded JSON Patch. A patch whose guards fail (the JobSet was resumed,
replaced or changed meanwhile) sends the pass back to the decision with the JobSet read again.
"""
from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, assert_never

import jsonpatch

from kai_fn.core import adopt, decide, objects
from kai_fn.core.decide import Action, Ignore, LetGo, MakeGang, MarkTooLate, Refuse, SettleReservation, Skip, Wait
from kai_fn.core.reasons import Refusal
from kai_fn.function import metrics, report, reserve
from kai_fn.kube import GuardFailed, NotServed
from kai_fn.function.cluster import CachedSession
from kai_fn.function.report import Outcome, Result
from kai_fn.plan_inputs import queue_check
from kai_fn.settings import Settings
from kai_fn.kube.events import event_body

_WAITING = {decide.NOT_CREATED: "Trainer has not made its JobSet yet",
            decide.REPLACED: "the JobSet of that name belongs to an earlier TrainJob of that name (being replaced)",
            decide.HELD_BY_ITS_AUTHOR: "kai-fn/hold is true: its pods wait unbound until it is lifted",
            decide.RESUME_OFF: "KAI_FN_RESUME is false: its pods wait unbound"}


class Retry(Exception):
    """The work cannot be done yet and no later event is sure to come; the sender should redeliver (503)."""


class NotYet(Exception):
    """The work cannot be done yet, but a later event brings it (answered 2xx, outcome ``waiting``): the JobSet
    source sends the named JobSet the moment Trainer makes it, and the resync finds any named JobSet whose gang is
    owed. A 503 instead would hold up every later event of the namespace for 3.1 s of the adapter's retries.
    ``token``: what it waits for, one of :mod:`kai_fn.core.decide`'s wait tokens (the outcome and the metric's label
    take it, never the message)."""

    def __init__(self, token: str) -> None:
        super().__init__(_WAITING.get(token, token))
        self.token = token


class Changed(Exception):
    """The JobSet changed under the gang's patch: decide again on the JobSet as it is now."""


def applied(jobset: dict[str, Any] | None, ops: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The JobSet as a JSON Patch the API server accepted left it (its guards held: only the changes applied)."""
    changes = [dict(op) for op in ops if op.get("op") != "test"]
    if jobset is None or not changes:
        return jobset
    return jsonpatch.apply_patch(jobset, changes)  # type: ignore[no-any-return]  # jsonpatch is untyped


class Execution:
    """One TrainJob's pass as seen by the steps that carry out its action; what it made and refused (``main``,
    ``refused``) tell where the TrainJob stands after it (:func:`kai_fn.core.state.after_pass`)."""

    def __init__(self, session: CachedSession, settings: Settings, obj: dict[str, Any],
                 jobset: dict[str, Any] | None, moment: datetime.datetime) -> None:
        self.session, self.settings, self.obj, self.jobset = session, settings, obj, jobset
        self.now = moment  # one clock reading per pass
        meta = obj.get("metadata", {})
        self.namespace, self.name, self.uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
        self.created = self.checked = False  # across the patch's tries: the gang made, the Queue checked
        self.main: dict[str, Any] | None = None  # the main PodGroup as read or made
        self.made = False  # the gang made (or found in place) by this pass
        self.refused: list[Refusal] = []

    def decided(self) -> None:
        """Nothing more is kai_fn's to do: later events of this TrainJob, or of this JobSet, cost no API call."""
        self.session.server.recent.decided(self.uid, objects.meta(self.jobset).get("uid"))

    def outcome(self, result: Result, reason: str, podgroup: str | None = None) -> Outcome:
        return Outcome(result, reason, self.namespace, self.name, self.uid, podgroup)

    def warn(self, reason: str, message: str, result: Result = "blocked") -> Outcome:
        self.session.create_event(self.namespace, event_body(self.obj, reason, message, warning=True))
        return self.outcome(result, f"{reason}: {message}")

    def refuse(self, reason: str, message: str, result: Result = "blocked") -> Outcome:
        """A refusal of the decision's, which ``status`` makes again on the same objects: the Warning, and the
        refusal kept for where the pass leaves the TrainJob."""
        self.refused.append(Refusal(reason=reason, message=message))
        return self.warn(reason, message, result)

    def carry_out(self, action: Action) -> Outcome:
        """Every action but a gang's (:meth:`make_gang`, which may come back with :class:`Changed`)."""
        match action:
            case Skip(why, podgroup):
                self.decided()
                return self.outcome("skipped", why, podgroup)
            case SettleReservation(podgroup, reserves):
                settled = reserve.places(self.session, self.obj, self.jobset, podgroup,
                                         lambda: reserve.planned(self.session, self.settings, self.obj),
                                         reserves=reserves)
                if settled.foreign is not None:
                    return self.not_adopted(settled.foreign)
                return self.outcome("done" if settled.changed else "skipped", settled.done, podgroup)
            case Wait(token):
                metrics.WAITING.labels(token).inc()
                return self.outcome("waiting", f"{_WAITING.get(token, token)}; its next event does the work")
            case Refuse(reason, message, result):
                return self.refuse(reason, message, result)
            case LetGo():
                return self.let_go(action)
            case MarkTooLate(ops):
                return self.too_late(list(ops))
            case MakeGang():
                return self.make_gang(action)
            case Ignore(why):
                return self.outcome("ignored", why)
        assert_never(action)

    def let_go(self, action: LetGo) -> Outcome:
        """Out of scope: left alone, or its JobSet let go as the migration says (marked, so later events cost
        nothing)."""
        if not action.ops:
            return self.outcome("ignored", action.why)
        try:
            self.session.patch_jobset(self.namespace, self.name, list(action.ops))
            self.jobset = applied(self.jobset, action.ops)
        except GuardFailed:
            raise Retry("the JobSet changed while it was let go") from None
        self.decided()
        return self.outcome("done", f"released without a gang: {action.why}")

    def too_late(self, ops: list[dict[str, Any]]) -> Outcome:
        """Its JobSet runs and was never named (no admission policy, or it matched too late). Marked on the JobSet,
        so later events cost nothing; :class:`Changed` when the mark's guards failed (JobSet's controller writes a
        running JobSet's status), as for a gang's patch."""
        try:
            if ops:
                self.session.patch_jobset(self.namespace, self.name, ops)
                self.jobset = applied(self.jobset, ops)
        except GuardFailed:
            raise Changed() from None
        self.decided()
        return self.warn(report.TOO_LATE, decide.TOO_LATE_MESSAGE, result="skipped")

    def make_gang(self, action: MakeGang) -> Outcome:
        """The gang, then the JobSet's patch (none for a JobSet named at admission); :class:`Changed` when the patch's
        guards failed."""
        if (refused := self.build(action)) is not None:
            return refused
        if action.ops:
            try:
                self.session.patch_jobset(self.namespace, self.name, list(action.ops))
            except GuardFailed:
                raise Changed() from None
            self.jobset = applied(self.jobset, action.ops)
        self.main, self.made = action.plan.podgroup, True
        if action.remember:
            self.decided()
        # The JobSet's add comes next; kai_fn.function.jobset_seen judges it from this, for authenticated senders only.
        if self.jobset is None and self.settings.audience and action.plan.podgroup is not None:
            self.session.server.recent.made_early(self.uid, self.obj, action.plan.podgroup)
        message = report.gang_created(action.plan, self.created, action.waits)
        self.session.create_event(self.namespace, event_body(self.obj, report.GANG_CREATED, message,
                                                                   warning=False, key=action.plan.podgroup_name))
        return self.outcome("done", message, action.plan.podgroup_name)

    def build(self, action: MakeGang) -> Outcome | None:
        """The Queue checked (once per pass), the PodGroups made or adopted, the placeholders made; an Outcome when
        the gang is refused."""
        try:
            if action.precheck and not self.checked and (refused := self.queue_precheck(action)) is not None:
                return refused
            self.checked = True
            for podgroup in action.plan.podgroups:
                if self.session.create_podgroup(podgroup):
                    self.created = True
                    metrics.GANGS_CREATED.inc()
                elif (taken := self.adopted(podgroup)) is not None:
                    return self.not_adopted(taken)
            made = reserve.make(self.session, action.placeholders)  # the later wave's places, before any pod of it
            if made.foreign is not None:
                return self.not_adopted(made.foreign)
        except NotServed as missing:
            flavor = self.settings.flavor
            return self.warn(report.SCHEDULER_NOT_SERVED,
                             f"{missing}: is {'KAI Scheduler' if flavor == 'kai' else 'scheduler-plugins'} installed "
                             f"(KAI_PODGROUP_FLAVOR={flavor})? No PodGroup is made (its pods wait unbound), and it "
                             f"is tried again on its next change and at every resync")
        return None

    def not_adopted(self, taken: adopt.Foreign) -> Outcome:
        return self.warn(report.NOT_ADOPTED, f"{taken}. Its gang is not taken: delete that {taken.kind} (kai_fn "
                                             f"then makes its own on the next pass or resync) or ask who made it")

    def queue_precheck(self, action: MakeGang) -> Outcome | None:
        """KAI's own limit checks with nothing allocated, just before a new gang would be made: a gang that can never
        fit is not released to wait forever. A refusal is always confirmed on a fresh list of the Queues."""
        _, refusal = queue_check(self.session, action.plan)
        if refusal is None:
            return None
        reason = report.GANG_EXCEEDS_QUEUE if refusal.kind == "over" else report.QUEUE_NOT_FOUND
        if self.settings.queue_check == "warn":
            self.session.create_event(self.namespace, event_body(
                self.obj, reason, f"{refusal.message} (KAI_FN_QUEUE_CHECK=warn: released anyway)", warning=True))
            return None
        metrics.PRECHECK_REFUSALS.labels(reason).inc()
        return self.refuse(reason, f"{refusal.message}; no PodGroup is made (its pods wait unbound, holding nothing), "
                                 f"and it is checked again on its next change and at every resync")

    def adopted(self, planned: dict[str, Any]) -> adopt.Foreign | None:
        """A PodGroup of the gang's name exists (its create answered 409): read it and judge it. None: it is the one
        kai_fn plans, kept as the gang; else what makes it another's."""
        meta = planned["metadata"]
        live = self.session.podgroup(planned["apiVersion"], meta["namespace"], meta["name"])
        if live is None:
            raise Retry(f"PodGroup {meta['name']} was deleted while it was made")
        if (taken := adopt.foreign(live, planned)) is not None:
            metrics.REFUSED_ADOPTIONS.labels("podgroup").inc()
        return taken
