"""What one pass does for a TrainJob, decided from its state, the facts read for it and its plan: pure.

Two steps, because planning needs reads the decision may spare: :func:`before_plan` answers a TrainJob already
decided, being deleted or outside the namespaces kai_fn serves; :func:`with_plan` answers from the plan (or why there
is none) and :func:`gang` from the JobSet as read now, again after each guarded patch that found it changed. Each
:data:`Action` carries what the shell needs to carry it out.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from kai_fn.core import keys, objects, reasons
from kai_fn.core.patch import MissingReplicatedJob, Op, jobset_patch
from kai_fn.core.plan import Plan
from kai_fn.core.reasons import Result
from kai_fn.core.state import Facts as State

# Why a TrainJob waits: short tokens, the label of kai_fn_waiting_events.
NOT_CREATED = "no_jobset"
REPLACED = "jobset_replaced"
HELD_BY_ITS_AUTHOR = "kai_fn_hold"
RESUME_OFF = "resume_off"


@dataclass(frozen=True)
class Context:
    """What the decision needs besides the state: the objects as read and the settings that bear on it."""

    trainjob: dict[str, Any]
    jobset: dict[str, Any] | None
    now: datetime.datetime  # the pass's one clock reading
    watched: bool  # its namespace is one kai_fn serves (KAI_FN_NAMESPACES)
    resume: bool = True  # KAI_FN_RESUME
    precheck: bool = False  # KAI's flavor with KAI_FN_QUEUE_CHECK on: a new gang's Queue is checked first


# Why there is no plan: what planning found wrong.
@dataclass(frozen=True)
class InvalidTrainJob:
    error: str


@dataclass(frozen=True)
class RuntimeMissing:
    runtime: str


@dataclass(frozen=True)
class InvalidRuntime:
    runtime: str
    error: str


Planned = Plan | InvalidTrainJob | RuntimeMissing | InvalidRuntime


@dataclass(frozen=True)
class Ignore:
    """Nothing is kai_fn's to do, and nothing to remember."""

    why: str


@dataclass(frozen=True)
class Skip:
    """Decided earlier: nothing to do; ``podgroup`` its gang."""

    why: str
    podgroup: str | None = None


@dataclass(frozen=True)
class SettleReservation:
    """Decided with places held for a later wave: bring the placeholders to where they should be."""

    podgroup: str
    reserves: str = ""  # the places held (`launcher=1`), as the decision or the main PodGroup says


@dataclass(frozen=True)
class Wait:
    """Not yet: a later event brings the work (``token`` is why, for the metric)."""

    token: str


@dataclass(frozen=True)
class Refuse:
    """A Warning on the TrainJob, and no gang: its pods wait unbound (a suspended JobSet stays suspended)."""

    reason: str
    message: str
    result: Result = "blocked"


@dataclass(frozen=True)
class LetGo:
    """Out of scope: nothing written, unless ``ops`` (the migration's) let its JobSet go, marked so."""

    why: str
    ops: tuple[Op, ...] = ()


@dataclass(frozen=True)
class MarkTooLate:
    """Its JobSet runs undecided: its pods cannot join a gang; ``ops`` mark it so."""

    ops: tuple[Op, ...]


@dataclass(frozen=True)
class MakeGang:
    """Make the gang (the Queue checked first when ``precheck``), the placeholders, then patch the JobSet with
    ``ops`` (guarded: a changed JobSet is read and decided again). No ``ops``: the JobSet carries it all already."""

    plan: Plan
    ops: tuple[Op, ...]
    waits: str | None  # why the gang must not start yet
    precheck: bool
    placeholders: tuple[dict[str, Any], ...]
    remember: bool  # nothing more is kai_fn's to do once done


Action = Ignore | Skip | SettleReservation | Wait | Refuse | LetGo | MarkTooLate | MakeGang

TOO_LATE_MESSAGE = ("its JobSet is already running, so its pods cannot join a gang (pod templates are immutable once "
                    "resumed); install kai_fn's admission policy, which names the gang of every JobSet whose pods ask for KAI "
                    "when Trainer creates it")


def before_plan(state: State, context: Context) -> Action | None:
    """The action that needs no plan, or None when the TrainJob must be planned."""
    if state.deleting:
        return Ignore("the TrainJob is being deleted")
    if state.podgroup is not None:
        if state.reserves:  # places held for a later wave: never "nothing left to do"
            return SettleReservation(state.podgroup, state.reserves)
        return Skip("already gang-scheduled", state.podgroup)
    if state.skipped is not None:
        return Skip(f"skipped earlier ({state.skipped})")
    if not context.watched:
        return let_go(state, context, "namespace not in KAI_FN_NAMESPACES")
    return None


def with_plan(state: State, context: Context, planned: Planned) -> Action:
    """The action once the TrainJob is planned, or why it could not be."""
    match planned:
        case InvalidTrainJob(error):
            return Refuse(reasons.INVALID_TRAINJOB, error)
        case RuntimeMissing(runtime):
            return Refuse(reasons.RUNTIME_NOT_FOUND, f"{runtime} does not exist; a retry cannot help until it does",
                          result="ignored")
        case InvalidRuntime(runtime, error):
            return Refuse(reasons.INVALID_RUNTIME, f"{runtime}: {error}")
    if planned.ignored:
        return let_go(state, context, planned.ignored)
    if planned.blocked:
        return Refuse(reasons.PLAN_BLOCKED, "; ".join(str(p) for p in planned.problems))
    if context.jobset is None or state.named:
        return named(state, context, planned)
    return gang(state, context, planned)


def named(state: State, context: Context, plan: Plan) -> Action:
    """A JobSet named at admission, or one Trainer has not made yet (made, the policy names it): the gang is made
    and nothing else is written. Its pods wait unbound on KAI until its PodGroups exist, so making them is the
    release; told to wait (kai-fn/hold, KAI_FN_RESUME=false), kai_fn makes none yet. A JobSet whose pods name other
    PodGroups than the plan's gets none: they would wait for ever, or bind under a gang that is not theirs; nor one
    whose jobs are not what Trainer makes of the plan (:func:`shape_differences`): a gang of the plan's size would
    let its other pods run outside it."""
    if objects.hold_reason(context.trainjob) is not None:
        return Wait(HELD_BY_ITS_AUTHOR)
    if not context.resume:
        return Wait(RESUME_OFF)
    if plan.segments is not None and context.jobset is None:
        return Wait(NOT_CREATED)  # its pods must carry the segments' keys, which only the named JobSet shows
    if context.jobset is not None and (differences := name_differences(plan, context.jobset)):
        name = objects.meta(context.jobset).get("name")
        return Refuse(reasons.JOBSET_MISMATCH, f"JobSet {name}: {'; '.join(differences)}: its pods name other "
                                               "PodGroups than kai_fn plans, so it makes none")
    if context.jobset is not None and (refused := unlike_its_plan(plan, context.jobset)) is not None:
        return refused
    return MakeGang(plan, (), None, precheck=context.precheck and plan.queue is not None,
                    placeholders=() if state.suspended else plan.placeholders,
                    remember=not plan.reserves)


def unlike_its_plan(plan: Plan, jobset: dict[str, Any]) -> Refuse | None:
    """``JobSetMismatch`` for a JobSet whose jobs are not the ones Trainer makes of the plan
    (:func:`shape_differences`): a gang of the plan's size would let the rest of its pods run outside it."""
    if not (differences := shape_differences(plan, jobset)):
        return None
    name = objects.meta(jobset).get("name")
    return Refuse(reasons.JOBSET_MISMATCH, f"JobSet {name}: {'; '.join(differences)}: it is not the JobSet Trainer "
                                           "makes of its TrainJob and runtime, so kai_fn makes no gang for it")


def made_before_its_jobset(state: State, context: Context, planned: Planned) -> Refuse | None:
    """The Warning for a gang made from its TrainJob's event, before the JobSet existed, whose named JobSet turned out
    unlike the plan. The gang stays: KAI holds its pods to the PodGroup's minMember and counts every pod of it
    against the gang's queue, so a bigger job runs no pod outside KAI's limits that the tenant could not run under
    a PodGroup of its own, and its "bound" is still counted against the plan (docs/how-it-decides.md)."""
    if state.podgroup is None or not state.named or context.jobset is None or not isinstance(planned, Plan):
        return None
    return unlike_its_plan(planned, context.jobset)


def shape_differences(plan: Plan, jobset: dict[str, Any]) -> list[str]:
    """Where a JobSet's replicatedJobs differ from what Trainer makes of the plan's pod sets, in words: each planned
    job's ``replicas``, and its ``parallelism`` and ``completions``, which Trainer sets to the pod set's count
    (SyncParallelCount; ``completions`` left unset is let through: no more pods run at once than ``parallelism``);
    and, in KAI's flavor, a replicatedJob the plan lacks, whatever scheduler its pods name.
    Trainer makes every replicatedJob of the runtime the plan is made from, so one the plan lacks (on KAI, or on
    another scheduler) means the JobSet is not Trainer's for this TrainJob, and kai_fn vouches for no part of it.
    (scheduler-plugins gangs only the main wave: the others' jobs are not in its plan.)"""
    planned = {ps.name: ps for ps in plan.pod_sets}
    found = []
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        name = rj.get("name")
        job = (rj.get("template") or {}).get("spec") or {}
        ps = planned.get(name)
        if ps is None:
            if plan.flavor == "kai":
                scheduler = ((job.get("template") or {}).get("spec") or {}).get("schedulerName") or "default-scheduler"
                found.append(f"replicatedJob {name!r} (pods on {scheduler}) is not in the runtime, so not in the plan")
            continue
        for field, got, want in (("replicas", rj.get("replicas", 1), ps.replicas),
                                 ("parallelism", job.get("parallelism", 1), ps.count),
                                 ("completions", job.get("completions", ps.count), ps.count)):
            if got != want:
                found.append(f"replicatedJob {name!r} has {field} {got}, where Trainer's arithmetic gives {want}")
    return found


def name_differences(plan: Plan, jobset: dict[str, Any]) -> list[str]:
    """Where the pod templates of a named JobSet differ from the plan's PodGroup names, in words."""
    written = {rj.get("name"): (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("metadata")
               or {} for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []}
    found = []
    for change in plan.pod_templates:
        if change.replicated_job not in written:
            found.append(f"no replicatedJob {change.replicated_job!r}, which the runtime has")
            continue
        pod = written[change.replicated_job]
        for where, key, want in (("annotations", keys.KAI_POD_GROUP_ANNOTATION,
                                  change.annotations.get(keys.KAI_POD_GROUP_ANNOTATION)),
                                 ("labels", keys.SP_POD_GROUP_LABEL, change.labels.get(keys.SP_POD_GROUP_LABEL))):
            if want is not None and (got := (pod.get(where) or {}).get(key)) != want:
                found.append(f"replicatedJob {change.replicated_job!r} names PodGroup {got!r}, not {want!r}")
        asked = {k: v for k, v in {**change.labels, **change.annotations}.items() if k in _SEGMENT_MARKS}
        carried = {k: v for k, v in {**(pod.get("labels") or {}), **(pod.get("annotations") or {})}.items()
                   if k in _SEGMENT_MARKS}
        if asked != carried:
            why = ("segments asked on the TrainJob's own annotations do not reach its pods (Trainer does not copy "
                   "them onto the JobSet); ask them on the runtime's trainer pod template or in the TrainJob's "
                   "spec.runtimePatches" if asked and not carried else "its segments differ from the plan's")
            found.append(f"replicatedJob {change.replicated_job!r} carries {carried or 'no segment keys'}, not "
                         f"{asked or 'none'}: {why}")
    return found


# What the admission policy writes on the pod templates of a gang in segments (kai_fn/core/segments.py).
_SEGMENT_MARKS = frozenset({keys.SEGMENT_SIZE_LABEL, keys.SEGMENT_PARENT_ANNOTATION, keys.SEGMENT_JOB_PODS_ANNOTATION,
                            keys.KAI_SUBGROUP_LABEL})


def let_go(state: State, context: Context, why: str) -> Action:
    """Out of scope: left as it is."""
    return LetGo(why)


def waits_for(state: State, context: Context) -> str | None:
    """Why the gang, once made, must not start yet: kai_fn is told to wait, or its TrainJob is suspended (Trainer
    resumes the JobSet when the TrainJob is resumed; Kueue resumes the TrainJob it admits)."""
    if (hold := objects.hold_reason(context.trainjob)) is not None:
        return hold
    if not context.resume:
        return "KAI_FN_RESUME is false"
    if state.suspended and (kueue := objects.queued_by_kueue(context.trainjob)) is not None:
        return kueue
    if state.suspended:
        return "the TrainJob is suspended: it starts when it is resumed"
    return None


def gang(state: State, context: Context, plan: Plan) -> Action:
    """The gang and the JobSet's patch, from the JobSet as read now (``context.jobset``): one admission did not name,
    suspended (Kubernetes 1.33: its TrainJob was submitted suspended). Its pod templates are named and the decision
    written; it stays suspended (Trainer resumes it with its TrainJob). Told to wait while its TrainJob runs
    (kai-fn/hold, KAI_FN_RESUME=false): templates only, no decision."""
    assert context.jobset is not None
    waits = waits_for(state, context)
    decision: dict[str, str] | None = None
    if waits is None or state.suspended:
        decision = {keys.MARKER_PODGROUP: plan.podgroup_name or ""}
    if decision is not None and plan.reserves:
        decision[keys.RESERVES_ANNOTATION] = plan.reserves
    try:
        ops = jobset_patch(plan, context.jobset, decision)
    except MissingReplicatedJob as missing:
        name = objects.meta(context.jobset).get("name")
        return Refuse(reasons.JOBSET_MISMATCH,
                      f"JobSet {name} has no replicatedJob {missing.args[0]!r}, which the runtime has")
    if ops and not objects.suspended(context.jobset):
        return MarkTooLate(tuple(jobset_patch(None, context.jobset, {keys.MARKER_SKIPPED: "running"})))
    if (refused := unlike_its_plan(plan, context.jobset)) is not None:
        return refused
    return MakeGang(plan, tuple(ops), waits, precheck=context.precheck and plan.queue is not None,
                    placeholders=(), remember=(waits is None or state.suspended) and not plan.reserves)
