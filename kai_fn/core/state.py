"""Where a TrainJob stands with kai_fn: one pure model, read by the pass, the resync, the schedule timeout, the gang's
status reports and the commands.

In: the TrainJob, the JobSet it controls, kai_fn's PodGroups, the JobSet's pods and kai_fn's refusals (Warning Events,
:mod:`kai_fn.core.reasons`). Out: :class:`Facts` (the marks the admission policy and kai_fn wrote: the decision on the
JobSet, the gang's marks on its main PodGroup) and a :class:`Reading` (a :class:`Phase`, its reason and since when,
and the :class:`Gang`). The phases, in the order an operator should look at them:

- ``held``: kai_fn owes it its gang and has not made it yet: its JobSet was named at admission and its pods wait
  unbound for their PodGroup, Trainer has not made it yet, or it waits suspended while its TrainJob runs (a JobSet
  the previous version held, :mod:`kai_fn.function.migration`); no refusal on record;
- ``blocked``: kai_fn refused to make its gang (queue pre-check, missing runtime, blocked plan, ...): its pods wait
  unbound, with a Warning Event naming why;
- ``timed-out``: its gang was not bound within its schedule timeout (``kai-fn/timed-out`` for the current wait);
- ``waiting``: released with its gang, not every pod of the gang bound; KAI's reasons when KAI gave some;
- ``suspended``: kept suspended on purpose (``kai-fn/hold``, Kueue, ``KAI_FN_RESUME=false``, or its user);
- ``running-without-gang``: released without a gang (``kai-fn/skipped``), or running without ever being named;
- ``bound``: every pod of the gang on a node (``kai-fn/bound``, or the pods say so now).

"Bound" is judged on the PodGroup the decision ``kai-fn/podgroup`` names (the trainer stage), by
:func:`judged`, against the plan (no plan, no "bound" from the pods; the ``kai-fn/bound`` mark still says so); KAI's
reasons are gathered from every PodGroup of the TrainJob (label ``kai-fn/trainjob-uid``), each stage's included.
"""
from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kai_fn.core import gang, keys, reserve, segments
from kai_fn.core.plan import Plan, planned_gangs
from kai_fn.core.reasons import Refusal
from kai_fn.core.objects import (controlled_by, deleting, hold_reason, labels, meta, notes, parse_time,
                                 queued_by_kueue, resumed_at, suspended)
from kai_fn.core.objects import stamp
from kai_fn.core.stages import is_stage_of


class Phase(StrEnum):
    """Where a TrainJob stands, in the order an operator should look at them."""

    HELD = "held"
    BLOCKED = "blocked"
    TIMED_OUT = "timed-out"
    WAITING = "waiting"
    SUSPENDED = "suspended"
    RUNNING_WITHOUT_GANG = "running-without-gang"
    BOUND = "bound"


PHASES: tuple[Phase, ...] = tuple(Phase)
_SKIPPED = {
    "out-of-scope": "released without a gang: it does not ask for KAI",
    "running": "TooLate: its JobSet ran without being named at admission, its pods could not join a gang",
    keys.SKIPPED_BY_OPERATOR: "released without a gang by an operator (kubectl kai-fn release)",
}
_GPUS = ("nvidia.com/gpu", "amd.com/gpu")


# -- the facts ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Facts:
    """A TrainJob's marks, where kai_fn and the policy write them. ``has_jobset`` False: Trainer has not made its
    JobSet (or the JobSet of that name is another's)."""

    podgroup: str | None = None  # the main gang kai_fn made
    skipped: str | None = None  # released without a gang, and why
    named: bool = False  # the JobSet was named at admission: its pods name their PodGroups, nothing is held
    has_jobset: bool = False
    jobset_suspended: bool = False
    suspended: bool = False  # the TrainJob's own spec.suspend
    deleting: bool = False
    bound: datetime.datetime | None = None
    timed_out: datetime.datetime | None = None
    resumed: datetime.datetime | None = None  # when the JobSet last started running
    reserves: str | None = None  # the decision holds places for later waves (`launcher=1`, kai_fn/core/reserve.py)
    hold: str | None = None  # its author asks it to wait (kai-fn/hold)
    kueue: str | None = None  # Kueue admits it

    @property
    def decided(self) -> bool:
        return self.podgroup is not None or self.skipped is not None

    @property
    def running(self) -> bool:
        return self.has_jobset and not self.jobset_suspended and not self.suspended

    @property
    def timed_out_since_resume(self) -> bool:
        """The current wait ended in a timeout: marked timed out, not resumed since."""
        return self.timed_out is not None and (self.resumed is None or self.resumed <= self.timed_out)

    @property
    def wait_started(self) -> datetime.datetime | None:
        """When the current wait for the gang began: the JobSet runs, is not bound, and has not timed out since it
        last resumed. A resume after a timeout (its user's, after ``KAI_FN_ON_TIMEOUT=suspend``) starts a new wait."""
        if self.podgroup is None or self.deleting or not self.running or self.bound is not None:
            return None
        return None if self.timed_out_since_resume else self.resumed

    @property
    def may_be_refused(self) -> bool:
        """Undecided and its pods kept from binding (suspended, not made yet, or named and waiting for their gang):
        kai_fn's decision tells ``blocked`` from ``held``."""
        return (self.jobset_suspended or not self.has_jobset or self.named) and not self.decided and not self.deleting

    def owes_pass(self, watched: bool) -> bool:
        """A pass is owed: the policy named its JobSet and kai_fn has not made its gang, or its JobSet waits suspended
        and undecided in a namespace kai_fn serves (``watched``)."""
        if self.deleting or self.decided:
            return False
        return self.named or (self.has_jobset and self.jobset_suspended and watched)

    def settled(self, podgroup_name: str | None = None) -> str | None:
        """Why there is nothing to report on the gang (of ``podgroup_name``, the main one's or a stage's), or None
        when its status is worth a look."""
        if self.bound is not None:
            return "already bound"
        if self.deleting:
            return "the TrainJob is being deleted"
        if self.podgroup is None or (podgroup_name is not None and self.podgroup != podgroup_name
                                     and not is_stage_of(podgroup_name, self.podgroup)):
            return "the TrainJob's gang is not this PodGroup, or not made yet"
        if not self.running:
            return "the TrainJob or its JobSet is suspended: its pods do not exist"
        return None


def facts(trainjob: dict[str, Any], jobset: dict[str, Any] | None = None,
          podgroup: dict[str, Any] | None = None) -> Facts:
    """The marks of ``trainjob``: the decision on its JobSet (``jobset`` must be the one it controls), the gang's
    marks on its main PodGroup, the author's wishes on the TrainJob. A JobSet named at admission carries no decision:
    there the main PodGroup (``podgroup``), made by kai_fn for this TrainJob, is the decision, as it is before Trainer
    has made the JobSet."""
    set_notes, pg_notes = notes(jobset), notes(podgroup)
    named = named_at_admission(jobset)
    made = made_by_kai_fn(podgroup, meta(trainjob).get("uid")) and (jobset is None or named)
    marked = set_notes.get(keys.MARKER_PODGROUP)
    podgroup_name = marked or (meta(podgroup).get("name") if made else None)
    return Facts(
        podgroup=podgroup_name,
        skipped=None if podgroup_name else set_notes.get(keys.MARKER_SKIPPED),
        named=named,
        has_jobset=jobset is not None,
        jobset_suspended=suspended(jobset),
        suspended=suspended(trainjob),
        deleting=deleting(trainjob),
        bound=parse_time(pg_notes.get(keys.GANG_BOUND_ANNOTATION)),
        timed_out=parse_time(pg_notes.get(keys.TIMED_OUT_ANNOTATION)),
        resumed=_started(jobset, podgroup) if made and not marked else resumed_at(jobset),
        reserves=(set_notes if marked else pg_notes).get(keys.RESERVES_ANNOTATION) if podgroup_name else None,
        hold=hold_reason(trainjob),
        kueue=queued_by_kueue(trainjob),
    )


def podgroups_of(trainjob: dict[str, Any], podgroups: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The TrainJob's PodGroups among ``podgroups`` (any TrainJob's), by the uid label kai_fn puts on them."""
    uid = meta(trainjob).get("uid") or ""
    return [p for p in podgroups if labels(p).get(keys.TRAINJOB_UID_LABEL) == uid]


def own_jobset(trainjob: dict[str, Any], jobset: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JobSet of the TrainJob's name when the TrainJob controls it; None for none, or an earlier TrainJob's of
    that name (being replaced)."""
    return jobset if jobset is not None and controlled_by(jobset, meta(trainjob).get("uid")) else None


def named_at_admission(jobset: dict[str, Any] | None) -> bool:
    """The admission policy named the JobSet's gang at its CREATE: its main PodGroup, once kai_fn made it, is the
    decision."""
    return jobset is not None and labels(jobset).get(keys.NAMED_LABEL) == "true"


def made_by_kai_fn(podgroup: dict[str, Any] | None, uid: str | None) -> bool:
    """A PodGroup kai_fn made for the TrainJob of ``uid`` (its identity labels, which the marks policy keeps)."""
    return (podgroup is not None and labels(podgroup).get(keys.TRAINJOB_UID_LABEL) == uid
            and labels(podgroup).get(keys.MANAGED_BY_LABEL) == keys.MANAGED_BY)


def _started(jobset: dict[str, Any] | None, podgroup: dict[str, Any] | None) -> datetime.datetime | None:
    """When a gang named at admission could first start: its JobSet running (resumed, else created) and its PodGroup
    made, whichever came later."""
    if jobset is None:
        return None
    moments = [m for m in (resumed_at(jobset) or parse_time(meta(jobset).get("creationTimestamp")),
                           parse_time(meta(podgroup).get("creationTimestamp"))) if m is not None]
    return max(moments, default=None)


def reservation_ended(podgroup: dict[str, Any] | None) -> bool:
    return keys.RESERVATION_ENDED_ANNOTATION in notes(podgroup)


def reserving(podgroup: dict[str, Any]) -> bool:
    """The PodGroup holds places for a later wave (MPI's launcher), not yet handed over (kai_fn/core/reserve.py)."""
    return keys.RESERVES_ANNOTATION in notes(podgroup) and not reservation_ended(podgroup)


# -- the gang ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gang:
    """The gang as made (its main PodGroup), or as planned before it is (``planned``); the queue label alone when
    neither is known."""

    queue: str | None = None
    min_member: int | None = None
    gpus: str | None = None
    podgroup: str | None = None
    reservation: str | None = None  # places held for a later wave (MPI's launcher), or when they were handed over
    planned: bool = False
    priority: str | None = None  # spec.priorityClassName
    preemptibility: str | None = None


def gang_of(trainjob: dict[str, Any], main: dict[str, Any] | None, plan: Plan | None = None) -> Gang:
    """The gang ``status`` and ``explain`` both show: the made one when it exists, else the planned one."""
    label = labels(trainjob).get(keys.KAI_QUEUE_LABEL)
    if main is not None:
        spec = main.get("spec") or {}
        resources = dict(part.split("=", 1) for part in (notes(main).get(keys.MIN_RESOURCES_ANNOTATION) or ""
                                                         ).split(",") if "=" in part)
        return Gang(queue=spec.get("queue") or label, min_member=sum(gang.minima(main).values()) or None,
                    gpus=_gpus(resources), podgroup=meta(main).get("name"), reservation=reservation(main),
                    priority=spec.get("priorityClassName"), preemptibility=spec.get("preemptibility"))
    if plan is not None and plan.podgroup is not None and plan.ignored is None:
        spec = plan.podgroup.get("spec") or {}
        return Gang(queue=plan.queue or label, min_member=plan.min_member or None, gpus=_gpus(plan.min_resources),
                    podgroup=plan.podgroup_name, planned=True, priority=spec.get("priorityClassName"),
                    preemptibility=spec.get("preemptibility"))
    return Gang(queue=label)


def _gpus(resources: dict[str, str]) -> str | None:
    return next((resources[g] for g in _GPUS if g in resources), None)


def reservation(main: dict[str, Any] | None) -> str | None:
    """Places held in the gang for pods JobSet makes later (kai_fn/core/reserve.py), in words; None without any."""
    held = reserve.parse_reserves(notes(main).get(keys.RESERVES_ANNOTATION))
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


# -- the reading -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reading:
    namespace: str
    name: str
    uid: str
    phase: Phase
    reason: str
    since: datetime.datetime | None
    gang: Gang = field(default_factory=Gang)

    def age(self, now: datetime.datetime) -> float:
        return (now - self.since).total_seconds() if self.since else 0.0

    def held_longer(self, now: datetime.datetime, period: float) -> bool:
        return self.phase is Phase.HELD and self.age(now) > period

    def as_dict(self) -> dict[str, Any]:
        since = stamp(self.since) if self.since else None
        return {"namespace": self.namespace, "name": self.name, "state": str(self.phase), "reason": self.reason,
                "since": since, "queue": self.gang.queue, "minMember": self.gang.min_member, "gpus": self.gang.gpus,
                "podGroup": self.gang.podgroup, "reservation": self.gang.reservation, "planned": self.gang.planned,
                "priorityClassName": self.gang.priority, "preemptibility": self.gang.preemptibility}


_Placed = tuple[Phase, str, datetime.datetime | None]


def read(trainjob: dict[str, Any], jobset: dict[str, Any] | None, podgroups: Sequence[dict[str, Any]],
         pods: Sequence[dict[str, Any]], refused: Sequence[Refusal] = (), plan: Plan | None = None) -> Reading:
    """Where the TrainJob stands. ``jobset``: the one it controls, if any; ``podgroups``: kai_fn's PodGroups in its
    namespace (any TrainJob's: this one's are picked by uid); ``pods``: its JobSet's (or more); ``refused``: kai_fn's
    refusals of it, oldest first; ``plan``: what kai_fn would make, for the gang before it is made."""
    uid = meta(trainjob).get("uid") or ""
    mine = podgroups_of(trainjob, podgroups)
    main = main_of(trainjob, jobset, mine)
    marks = facts(trainjob, jobset, main)
    if marks.skipped is not None:
        placed: _Placed = (Phase.RUNNING_WITHOUT_GANG,
                           _SKIPPED.get(marks.skipped, f"kai_fn skipped it ({marks.skipped})"), None)
    elif marks.podgroup is None:
        placed = _undecided(marks, refused)
    else:
        placed = _decided(marks, mine, main, pods, plan)
    phase, reason, since = placed
    return Reading(meta(trainjob).get("namespace", ""), meta(trainjob).get("name", ""), uid, phase, reason,
                   since or parse_time(meta(trainjob).get("creationTimestamp")), gang_of(trainjob, main, plan))


def main_podgroup(marks: Facts, podgroups: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The PodGroup the decision names, among the TrainJob's own."""
    return next((p for p in podgroups if marks.podgroup and meta(p).get("name") == marks.podgroup), None)


def main_of(trainjob: dict[str, Any], jobset: dict[str, Any] | None,
            podgroups: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The gang's main PodGroup among ``podgroups`` (the TrainJob's own): the one the JobSet's decision names, or,
    where the JobSet was named at admission (or is not made yet), the one of the gang's name."""
    unmade = facts(trainjob, jobset)
    main = main_podgroup(unmade, podgroups)
    if main is None and unmade.podgroup is None and (jobset is None or unmade.named):
        main = next((p for p in podgroups if meta(p).get("name") in gang_names(trainjob)), None)
    return main


def _undecided(marks: Facts, refused: Sequence[Refusal]) -> _Placed:
    # Its TrainJob runs and no Kueue admits it: none but kai_fn resumes the JobSet (the previous version's hold).
    waits_for_kai_fn = marks.jobset_suspended and not marks.suspended and marks.kueue is None
    if (waits_for_kai_fn or marks.named) and marks.hold is not None:
        return Phase.SUSPENDED, marks.hold, None
    if refused and (marks.named or not marks.has_jobset or marks.jobset_suspended):
        last = refused[-1]
        return Phase.BLOCKED, f"{last.reason}: {last.message}", refused[0].at
    if waits_for_kai_fn:
        return Phase.HELD, "its JobSet waits suspended while its TrainJob runs; kai_fn has not made its gang yet", None
    if marks.named:
        return Phase.HELD, "its pods wait unbound for their PodGroup, which kai_fn has not made yet", None
    if not marks.has_jobset:
        return Phase.HELD, "Trainer has not made its JobSet yet", None
    if marks.jobset_suspended:
        return Phase.SUSPENDED, marks.kueue or marks.hold or "suspended by its user; its JobSet was never named", None
    return Phase.RUNNING_WITHOUT_GANG, "its JobSet ran without being named at admission: kai_fn never made its gang", None


def needs_pods(marks: Facts, podgroup: dict[str, Any] | None) -> bool:
    """Released with its gang and not marked bound: only its pods can say whether the gang is bound now."""
    return marks.podgroup is not None and marks.bound is None and marks.running and podgroup is not None


def judged(plan: Plan | None, podgroup: dict[str, Any], pods: Iterable[dict[str, Any]]) -> gang.GangCount:
    """The one count of a gang for "bound", wherever it is asked (the status path, the schedule timeout, ``status``,
    ``explain``): ``podgroup``'s pods of its planned Jobs against the plan's minMember (:func:`kai_fn.core.gang.judge`);
    no plan: never bound."""
    planned = planned_gangs(plan).get(meta(podgroup).get("name", "")) if plan is not None else None
    return gang.judge(planned, podgroup, pods)


def _decided(marks: Facts, mine: Sequence[dict[str, Any]], main: dict[str, Any] | None,
             pods: Sequence[dict[str, Any]], plan: Plan | None) -> _Placed:
    tally = judged(plan, main, pods) if main is not None else None
    if marks.bound is not None or (tally is not None and tally.bound and marks.running):
        placed = f", {described}" if (described := segments.of_podgroup(main)) else ""
        return Phase.BOUND, f"every pod of the gang is on a node{placed}", marks.bound
    kai = gang.describe(reasons(mine, main))
    if marks.timed_out_since_resume:
        then = "suspended again: set spec.suspend: false to wait again" if marks.suspended else "still waiting"
        return (Phase.TIMED_OUT, f"not bound within its schedule timeout; {then}" + (f"; KAI: {kai}" if kai else ""),
                marks.timed_out)
    if not marks.has_jobset and not marks.suspended:
        return Phase.WAITING, "gang made; Trainer has not made its JobSet yet", None
    if not marks.running:
        why = marks.kueue or marks.hold or "KAI_FN_RESUME=false, or suspended by its user"
        return Phase.SUSPENDED, f"gang made, left suspended: {why}", None
    if main is None or tally is None:
        return (Phase.WAITING, f"its PodGroup {marks.podgroup} is gone, so its pods never schedule: resubmit it",
                marks.resumed)
    held = f"; {note}" if (note := reservation(main)) and reserve.ended(main) is None else ""
    if described := segments.of_podgroup(main):
        held += f"; in segments: {described}"
    if kai:
        return Phase.WAITING, f"KAI: {kai}{held}", marks.resumed
    return Phase.WAITING, f"the scheduler has not placed it yet ({tally.summary()}){held}", marks.resumed


def order(readings: Iterable[Reading], now: datetime.datetime) -> list[Reading]:
    """What needs attention first: by phase (held first, bound last), then the longest in it first."""
    return sorted(readings, key=lambda r: (PHASES.index(r.phase), -r.age(now), r.namespace, r.name))


def in_scope(trainjob: dict[str, Any], jobset: dict[str, Any] | None = None, podgroups: Sequence[dict[str, Any]] = (),
             refused: Sequence[Refusal] = ()) -> bool:
    """A TrainJob kai_fn has touched or is owed: any ``kai-fn/`` mark on it or its JobSet, the queue label, a
    PodGroup of kai_fn's or a refusal."""
    marked = any(k.startswith("kai-fn/") for k in {**notes(trainjob), **notes(jobset), **labels(jobset)})
    return bool(marked or keys.KAI_QUEUE_LABEL in labels(trainjob) or podgroups or refused)


# -- many TrainJobs, as listed -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """A listed TrainJob with the JobSet it controls and its main PodGroup, and its facts."""

    trainjob: dict[str, Any]
    jobset: dict[str, Any] | None
    podgroup: dict[str, Any] | None  # the main gang's, when kai_fn made it
    marks: Facts
    mine: tuple[dict[str, Any], ...] = ()  # every PodGroup kai_fn made for it (its uid label)

    @property
    def key(self) -> tuple[str, str]:
        return meta(self.trainjob).get("namespace", ""), meta(self.trainjob).get("name", "")

    @property
    def holding(self) -> bool:
        """Its gang holds places for a later wave (MPI's launcher) that kai_fn has not handed over or let go yet: a
        pass is owed whenever JobSet may have made those pods, or stopped (kai_fn/function/reserve.py)."""
        return (self.marks.reserves is not None and self.podgroup is not None and not self.marks.deleting
                and not reservation_ended(self.podgroup))


def gang_names(trainjob: dict[str, Any]) -> tuple[str, str]:
    """The names its main PodGroup has: KAI's flavor (``pg-<name>-<uid>``, as the admission policy names it), then
    scheduler-plugins' (the TrainJob's own)."""
    name, uid = meta(trainjob).get("name", ""), meta(trainjob).get("uid", "")
    return f"pg-{name}-{uid}", name


def gang_name(trainjob: dict[str, Any], flavor: str) -> str:
    kai, scheduler_plugins = gang_names(trainjob)
    return scheduler_plugins if flavor == "scheduler-plugins" else kai


def podgroup_api(flavor: str) -> str:
    """The apiVersion of kai_fn's PodGroups for the flavor."""
    return keys.SP_PODGROUP_API if flavor == "scheduler-plugins" else keys.KAI_PODGROUP_API


def join(trainjobs: list[dict[str, Any]], jobsets: list[dict[str, Any]], podgroups: list[dict[str, Any]]
         ) -> list[Entry]:
    """Each TrainJob with the JobSet it controls (same name) and the PodGroup its decision names (same uid)."""
    sets = {(meta(j).get("namespace"), meta(j).get("name")): j for j in jobsets}
    groups = {(meta(p).get("namespace"), meta(p).get("name")): p for p in podgroups}
    by_uid: dict[str, list[dict[str, Any]]] = {}
    for pg in podgroups:
        by_uid.setdefault(labels(pg).get(keys.TRAINJOB_UID_LABEL, ""), []).append(pg)
    entries = []
    for trainjob in trainjobs:
        where, uid = meta(trainjob).get("namespace"), meta(trainjob).get("uid")
        jobset = sets.get((where, meta(trainjob).get("name")))
        if jobset is not None and not controlled_by(jobset, uid):
            jobset = None
        marks = facts(trainjob, jobset)
        podgroup = groups.get((where, marks.podgroup)) if marks.podgroup else None
        if podgroup is None and marks.podgroup is None and (jobset is None or marks.named):
            podgroup = next((groups[(where, n)] for n in gang_names(trainjob) if (where, n) in groups), None)
        if podgroup is not None and labels(podgroup).get(keys.TRAINJOB_UID_LABEL) != uid:
            podgroup = None
        entries.append(Entry(trainjob, jobset, podgroup, facts(trainjob, jobset, podgroup),
                             tuple(by_uid.get(uid or "", ()))))
    return entries


def after_pass(trainjob: dict[str, Any], jobset: dict[str, Any] | None, main: dict[str, Any] | None,
               refused: Sequence[Refusal], made: bool = False) -> Phase | None:
    """Where the function's pass left the TrainJob, from what it read and wrote alone (no call more): the phase of
    :func:`read` on those objects. ``main``: the main PodGroup as the pass read or made it (``made``: now, so none of
    its pods is bound yet). None when the pass cannot tell without reading more: a gang decided on its JobSet whose
    PodGroup it did not read, or a released gang not marked bound, which only its pods can call bound."""
    marks = facts(trainjob, jobset, main)
    if not made and marks.podgroup is not None and (main is None or needs_pods(marks, main)):
        return None
    return read(trainjob, jobset, [main] if main is not None else [], [], refused).phase
