"""The pure planner: (TrainJob, runtime, settings) → a Plan of exactly what must exist in the cluster.

Nothing here does I/O. The shell turns a Plan into API calls: create every PodGroup of :attr:`Plan.podgroups`,
patch the JobSet with :func:`kai_fn.core.patch.jobset_patch`, then release the TrainJob.

The KAI flavor makes one flat PodGroup per start wave of the runtime's replicatedJobs (:mod:`kai_fn.core.stages`
says why): a runtime without ``dependsOn`` gets one, ``pg-<name>-<uid>``. Each sets ``stalenessGracePeriod``
(``KAI_FN_STALENESS_GRACE_PERIOD``, default ``-1s``: never), because KAI v0.17.0 no longer sees a finished pod and
would evict the rest of a gang whose pods finish at different times (KAI issue #1968, fixed after v0.17.0); JobSet
owns the pods' lifecycle, as the per-PodGroup override intends.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from kai_fn.core import keys, owner_metadata, reserve, segments, validation
from kai_fn.core.gang import Planned
from kai_fn.core.models import Runtime, TrainJob
from kai_fn.core.owner_metadata import KaiCluster
from kai_fn.core.podsets import PodSet, count_problems, pod_sets, total_requests
from kai_fn.core.queue_check import Gang, gangs
from kai_fn.core.runtime import check_matches
from kai_fn.core.scope import DEFAULT_SCHEDULE_TIMEOUT_SECONDS, GangPolicy, Problem, gang_policy, out_of_scope
from kai_fn.core.stages import MAX_CHAIN, Stage, chain_depth, main_stage, stages

Flavor = Literal["kai", "scheduler-plugins"]  # which PodGroup API the gang is written to
Layout = Literal["flat", "staged"]  # staged: more than one start wave (dependsOn), so more than one PodGroup
NEVER_STALE = "-1s"


@dataclass(frozen=True)
class PodTemplateChange:
    """Labels and annotations one replicatedJob's pod template must carry for its pods to join the gang."""

    replicated_job: str
    labels: dict[str, str]
    annotations: dict[str, str]


@dataclass(frozen=True)
class PodSetSummary:
    name: str
    count: int
    requests: dict[str, str]
    replicas: int = 1  # the replicatedJob's Jobs: JobSet makes one per replica


@dataclass(frozen=True)
class StageSummary:
    """One PodGroup of the plan: its replicatedJobs and the ``minMember`` KAI holds them to."""

    podgroup: str
    replicated_jobs: tuple[str, ...]
    min_member: int
    main: bool


@dataclass(frozen=True)
class Plan:
    namespace: str
    trainjob: str
    uid: str
    flavor: Flavor
    ignored: str | None = None
    podgroup: dict[str, Any] | None = None  # the main gang's: bound, timed and named on the TrainJob
    stage_podgroups: tuple[dict[str, Any], ...] = ()  # the other waves' (KAI flavor, dependsOn), in start order
    stages: tuple[StageSummary, ...] = ()
    pod_templates: tuple[PodTemplateChange, ...] = ()
    jobset_annotations: dict[str, str] = field(default_factory=dict)
    layout: Layout = "flat"
    min_member: int = 0
    min_resources: dict[str, str] = field(default_factory=dict)
    queue: str | None = None
    priority_class: str | None = None
    preemptibility: str | None = None
    schedule_timeout_seconds: int | None = None
    pod_sets: tuple[PodSetSummary, ...] = ()
    gangs: tuple[Gang, ...] = ()  # what KAI must place at once, in KAI's units (the queue pre-check)
    problems: tuple[Problem, ...] = ()
    # KAI flavor: pods of later waves held in an earlier wave's gang until JobSet makes them (kai_fn/core/reserve.py)
    placeholders: tuple[dict[str, Any], ...] = ()
    reserves: str = ""  # `launcher=1`: the replicatedJobs whose places are held, and their pods
    segments: segments.Segments | None = None  # the trainer's pods in segments (kai_fn/core/segments.py)

    @property
    def blocked(self) -> bool:
        return any(p.blocking for p in self.problems)

    @property
    def actionable(self) -> bool:
        return self.ignored is None and not self.blocked and self.podgroup is not None

    @property
    def non_preemptible(self) -> bool:
        """As far as kai_fn can tell: the label says so. A priority class's value (>= 100 is non-preemptible to
        KAI) is known only by name here, so such a gang is checked as preemptible and KAI has the last word."""
        return self.preemptibility == "non-preemptible"

    @property
    def podgroup_name(self) -> str | None:
        return self.podgroup["metadata"]["name"] if self.podgroup else None

    @property
    def podgroups(self) -> tuple[dict[str, Any], ...]:
        """Every PodGroup to create, each before any pod can name it."""
        return (*self.stage_podgroups, self.podgroup) if self.podgroup else ()


def planned_gangs(plan: Plan) -> dict[str, Planned]:
    """Each PodGroup of the plan, by name, with the plan's minMember and the Jobs whose pods are its own: what
    :func:`kai_fn.core.gang.judge` counts. Trainer names the JobSet as the TrainJob, and JobSet each Job
    ``<jobset>-<replicatedJob>-<index>``."""
    replicas = {ps.name: ps.replicas for ps in plan.pod_sets}

    def jobs(names: tuple[str, ...]) -> frozenset[str]:
        return frozenset(f"{plan.trainjob}-{rj}-{i}" for rj in names for i in range(replicas.get(rj, 1)))

    if plan.stages:
        return {s.podgroup: Planned(s.podgroup, s.min_member, jobs(s.replicated_jobs)) for s in plan.stages}
    if plan.flavor == "scheduler-plugins" and plan.pod_sets:
        return {plan.trainjob: Planned(plan.trainjob, plan.min_member, jobs(tuple(p.name for p in plan.pod_sets)))}
    return {}


def kai_podgroup_name(job: TrainJob) -> str:
    """KAI's podgrouper's convention, ``pg-<top owner>-<uid>``, as the admission policy names it too."""
    return f"pg-{job.metadata.name}-{job.metadata.uid}"


def plan(job: TrainJob, runtime: Runtime, *, flavor: Flavor = "kai", default_queue: str = "default-queue",
         schedule_timeout_seconds: int | None = None, staleness_grace_period: str | None = NEVER_STALE,
         placeholder_image: str = reserve.DEFAULT_IMAGE, cluster: KaiCluster | None = None,
         topologies: Mapping[str, segments.TopologyResource | None] | None = None) -> Plan:
    """``schedule_timeout_seconds``: kai_fn's own timeout for a KAI gang whose runtime has no podGroupPolicy.kai.
    ``staleness_grace_period``: each KAI PodGroup's ``stalenessGracePeriod`` (a Go duration), None for KAI's, where
    the TrainJob does not ask for its own.
    ``placeholder_image``: the image of the pods that hold a later wave's places (KAI flavor).
    ``cluster``: what KAI's podgrouper would read besides the TrainJob (PriorityClasses, its defaults ConfigMap);
    None: nothing read, every PriorityClass named is taken to exist.
    ``topologies``: the Topologies the gang names, as read (None: absent); their levels are checked, the others'
    not (:func:`kai_fn.core.segments.topologies_asked` says which to read)."""
    check_matches(job, runtime)
    base = Plan(namespace=job.metadata.namespace, trainjob=job.metadata.name, uid=job.metadata.uid, flavor=flavor)
    if reason := out_of_scope(job, runtime):
        return replace(base, ignored=reason)

    sets = pod_sets(job, runtime)
    policy = gang_policy(job, runtime, sets, default_queue, cluster)
    resources = {k: str(q) for k, q in sorted(total_requests(sets).items())}
    waves = stages(sets, reserve=flavor == "kai")
    problems = list(policy.problems) + _pod_set_problems(sets)
    problems += [Problem(where, why) for where, why in count_problems(job, sets)]
    segs, segment_problems = segments.requested(job, runtime, sets, main_stage(waves) if waves else None, flavor)
    problems += segment_problems + segments.level_problems(policy.topology, segs, topologies or {})
    if (policy.topology and not (policy.topology.required_level or policy.topology.preferred_level)
            and not (segs or segment_problems)):
        problems.append(Problem(f"TrainJob metadata.annotations[{keys.KAI_TOPOLOGY}]",
                                f"names Topology {policy.topology.topology!r} but no level "
                                f"({keys.KAI_TOPOLOGY_REQUIRED} or {keys.KAI_TOPOLOGY_PREFERRED}): KAI never places "
                                "such a gang"))
    base = replace(
        base,
        layout="staged" if len(waves) > 1 and flavor == "kai" else "flat",
        min_member=sum(ps.count for ps in sets),
        min_resources=resources,
        queue=policy.queue if flavor == "kai" else None,
        priority_class=policy.priority_class,
        preemptibility=policy.preemptibility,
        schedule_timeout_seconds=_timeout(policy, flavor, schedule_timeout_seconds),
        segments=segs,
        pod_sets=tuple(PodSetSummary(ps.name, ps.count, {k: str(q) for k, q in sorted(ps.requests.items())},
                                     max(ps.replicas, 1)) for ps in sets),
    )
    if flavor == "kai":
        base = replace(base, gangs=gangs(waves))
        return _kai(base, job, waves, policy, problems, staleness_grace_period, placeholder_image)
    return _scheduler_plugins(base, job, sets, waves, problems)


def _timeout(policy: GangPolicy, flavor: Flavor, label_only: int | None) -> int | None:
    """The policy's; for the coscheduling PodGroup Trainer's default, for KAI (which has none) the setting."""
    if policy.schedule_timeout_seconds is not None:
        return policy.schedule_timeout_seconds
    return DEFAULT_SCHEDULE_TIMEOUT_SECONDS if flavor == "scheduler-plugins" else label_only


def _kai(base: Plan, job: TrainJob, waves: tuple[Stage, ...], policy: GangPolicy, problems: list[Problem],
         staleness: str | None, image: str) -> Plan:
    main_name = kai_podgroup_name(job)
    names = {stage.wave: stage.podgroup_name(main_name) for stage in waves}
    problems += _kai_problems(job, waves, names)
    podgroups = {stage.wave: owner_metadata.dress(_podgroup(keys.KAI_PODGROUP_API, names[stage.wave], job,
                                                            _kai_spec(stage, policy, staleness, base.segments),
                                                            base, stage),
                                                  policy.owner)
                 for stage in waves}
    main = main_stage(waves) if waves else None
    held = _placeholders(job, waves, names, policy, base.segments, image, problems)
    for s in waves:
        if s.reserved:
            podgroups[s.wave]["metadata"]["annotations"][keys.RESERVES_ANNOTATION] = reserve.reserves_text(s.reserved)
    base = replace(
        base,
        stages=tuple(StageSummary(names[s.wave], s.names, s.min_member, s.main) for s in waves),
        stage_podgroups=tuple(podgroups[s.wave] for s in waves if not s.main),
        placeholders=held,
        reserves=reserve.reserves_text(ps for s in waves for ps in s.reserved),
    )
    return _finish(base, problems, podgroups[main.wave] if main else None,
                   _kai_templates(waves, names, policy.queue, main, base.segments),
                   {keys.KAI_SKIP_PODGROUPER: "true"})


def _kai_problems(job: TrainJob, waves: tuple[Stage, ...], names: dict[int, str]) -> list[Problem]:
    """What stops KAI from taking the gang: a PodGroup name the API refuses, an identity label, a pod template
    sent to another scheduler."""
    problems = [Problem(f"PodGroup metadata.name {names[stage.wave]!r}", why)
                for stage in waves if (why := validation.dns_subdomain(names[stage.wave]))]
    problems += _identity_label_problems(job)
    sets = [ps for stage in waves for ps in stage.pod_sets]
    if (depth := chain_depth(sets)) > MAX_CHAIN:
        problems.append(Problem("runtime spec.template.spec.replicatedJobs[].dependsOn",
                                f"a chain of {depth} dependsOn, one after another: the admission policy names the "
                                f"PodGroups of chains up to {MAX_CHAIN} deep"))
    for ps in sets:
        if ps.pod_spec.scheduler_name != keys.KAI_SCHEDULER_NAME:
            problems.append(Problem(
                f"replicatedJob {ps.name!r} spec.template.spec.schedulerName",
                f"is {ps.pod_spec.scheduler_name or 'unset (default-scheduler)'}: pods would not be scheduled by KAI; "
                f"set schedulerName: {keys.KAI_SCHEDULER_NAME} in the runtime's pod templates",
            ))
    return problems


def _kai_templates(waves: tuple[Stage, ...], names: dict[int, str], queue: str, main: Stage | None,
                   segs: segments.Segments | None) -> tuple[PodTemplateChange, ...]:
    """Each pod template's queue label, PodGroup annotation and KAI's podgrouper told to skip its pods (on the pod,
    it stops before reading the pod's owners, as the admission policy writes it), with the main wave's segment
    labels."""
    extra = segments.template_changes(main, segs) if main and segs else {}
    return tuple(
        PodTemplateChange(ps.name, labels={keys.KAI_QUEUE_LABEL: queue, **extra.get(ps.name, ({}, {}))[0]},
                          annotations={keys.KAI_POD_GROUP_ANNOTATION: names[stage.wave],
                                       keys.KAI_SKIP_PODGROUPER: "true", **extra.get(ps.name, ({}, {}))[1]})
        for stage in waves for ps in stage.pod_sets
    )


def _placeholders(job: TrainJob, waves: tuple[Stage, ...], names: dict[int, str], policy: GangPolicy,
                  segs: segments.Segments | None, image: str, problems: list[Problem]) -> tuple[dict[str, Any], ...]:
    """The placeholder pods that hold places in each gang for the pods a later wave makes; none, and a problem, when
    they would be more than kai_fn holds."""
    reserved = sum(ps.pods for s in waves for ps in s.reserved)
    if reserved > reserve.MAX_PLACEHOLDERS:
        problems.append(Problem(
            "replicatedJobs " + ", ".join(repr(ps.name) for s in waves for ps in s.reserved) + " (dependsOn Ready)",
            f"{reserved} pods would need places held in the gang before they exist; kai_fn holds at most "
            f"{reserve.MAX_PLACEHOLDERS} (MPI's launcher is 1)"))
        return ()
    held = tuple(p for s in waves for p in reserve.placeholders(
        namespace=job.metadata.namespace, trainjob=job.metadata.name, uid=job.metadata.uid,
        podgroup=names[s.wave], queue=policy.queue, sets=s.reserved, image=image,
        subgroup=bool(s.main and segs)))
    problems += [Problem(f"placeholder pod metadata.name {pod['metadata']['name']!r}", why)
                 for pod in held if (why := validation.dns_subdomain(pod["metadata"]["name"]))]
    return held


def _kai_spec(stage: Stage, policy: GangPolicy, staleness: str | None,
              segs: segments.Segments | None) -> dict[str, Any]:
    """A gang of the stage's pods, flat unless the main one has segments. Topology binds only the main gang: an
    initializer needs no placement. A constraint without a level is left out: KAI never places one."""
    spec: dict[str, Any] = {"queue": policy.queue, "minMember": stage.min_member}
    if policy.priority_class:
        spec["priorityClassName"] = policy.priority_class
    if policy.preemptibility:
        spec["preemptibility"] = policy.preemptibility
    if staleness is not None:
        spec["stalenessGracePeriod"] = staleness
    if policy.topology and stage.main and (policy.topology.required_level or policy.topology.preferred_level):
        constraint = {"topology": policy.topology.topology}
        if policy.topology.required_level:
            constraint["requiredTopologyLevel"] = policy.topology.required_level
        if policy.topology.preferred_level:
            constraint["preferredTopologyLevel"] = policy.topology.preferred_level
        spec["topologyConstraint"] = constraint
    if segs is not None and stage.main:
        spec["subGroups"] = segments.subgroups(stage, segs)
    return spec


def _scheduler_plugins(base: Plan, job: TrainJob, sets: list[PodSet], waves: tuple[Stage, ...],
                       problems: list[Problem]) -> Plan:
    """One flat gang, as Trainer's coscheduling plugin counts it. With ``dependsOn`` only the main wave is ganged
    (:mod:`kai_fn.core.stages`): a gang over pods that are never pending together could never be met, and
    Coscheduling has one PodGroup per pod; the other waves' pods are scheduled one by one."""
    name = job.metadata.name
    if why := validation.label_value(name):
        problems.append(Problem(f"TrainJob metadata.name (the {keys.SP_POD_GROUP_LABEL} label value)", why))
    problems += _identity_label_problems(job)
    ganged = list(main_stage(waves).pod_sets) if len(waves) > 1 else sets
    if ganged is not sets:
        base = replace(
            base,
            min_member=sum(ps.count for ps in ganged),
            min_resources={k: str(q) for k, q in sorted(total_requests(ganged).items())},
            pod_sets=tuple(p for p in base.pod_sets if p.name in {ps.name for ps in ganged}),
        )
    problems += [
        Problem(f"replicatedJob {ps.name!r} spec.template.spec.schedulerName",
                "is unset (default-scheduler): the gang is only honoured where the scheduler runs Coscheduling; "
                "name that scheduler's profile (e.g. scheduler-plugins-scheduler) in the runtime's pod templates",
                blocking=False)
        for ps in ganged if not ps.pod_spec.scheduler_name
    ]
    spec = {
        "minMember": base.min_member,
        "minResources": base.min_resources,
        "scheduleTimeoutSeconds": base.schedule_timeout_seconds,
    }
    templates = tuple(PodTemplateChange(ps.name, labels={keys.SP_POD_GROUP_LABEL: name}, annotations={})
                      for ps in ganged)
    return _finish(base, problems, _podgroup(keys.SP_PODGROUP_API, name, job, spec, base), templates, {})


def _pod_set_problems(sets: list[PodSet]) -> list[Problem]:
    if not sets:
        return [Problem("runtime spec.template.spec.replicatedJobs", "is empty: there are no pods to gang-schedule")]
    return [
        Problem(f"replicatedJob {ps.name!r} requests.{k}", f"{q} is negative")
        for ps in sets for k, q in ps.requests.items() if q.value < 0
    ]


def _identity_label_problems(job: TrainJob) -> list[Problem]:
    return [
        Problem(f"TrainJob metadata.{field_name} (the {key} label value)", why)
        for field_name, key, value in (("name", keys.TRAINJOB_NAME_LABEL, job.metadata.name),
                                       ("uid", keys.TRAINJOB_UID_LABEL, job.metadata.uid))
        if (why := validation.label_value(value))
    ]


def _podgroup(api_version: str, name: str, job: TrainJob, spec: dict[str, Any], base: Plan,
              stage: Stage | None = None) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": job.metadata.namespace,
            "labels": {
                keys.MANAGED_BY_LABEL: keys.MANAGED_BY,
                keys.TRAINJOB_NAME_LABEL: job.metadata.name,
                keys.TRAINJOB_UID_LABEL: job.metadata.uid,
            },
            "annotations": _podgroup_annotations(base, stage),
            "ownerReferences": [{
                "apiVersion": keys.TRAINER_API,
                "kind": keys.TRAINJOB_KIND,
                "name": job.metadata.name,
                "uid": job.metadata.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }],
        },
        "spec": spec,
    }


def _podgroup_annotations(base: Plan, stage: Stage | None) -> dict[str, str]:
    """``minResources`` of the pods this PodGroup gangs (Trainer's arithmetic: ``replicas`` left out), for people."""
    sets = list(stage.pod_sets) if stage is not None and base.layout == "staged" else None
    resources = ({k: str(q) for k, q in sorted(total_requests(sets).items())} if sets is not None
                 else base.min_resources)
    notes = {keys.MIN_RESOURCES_ANNOTATION: ",".join(f"{k}={v}" for k, v in resources.items())}
    if stage is not None and base.layout == "staged":
        notes[keys.STAGE_ANNOTATION] = ",".join(stage.names)
    if base.flavor == "kai" and base.schedule_timeout_seconds is not None and (stage is None or stage.main):
        notes[keys.SCHEDULE_TIMEOUT_ANNOTATION] = str(base.schedule_timeout_seconds)
    return notes


def _finish(base: Plan, problems: list[Problem], podgroup: dict[str, Any] | None, templates: tuple[PodTemplateChange, ...],
            jobset_annotations: dict[str, str]) -> Plan:
    if any(p.blocking for p in problems):
        return replace(base, problems=tuple(problems), placeholders=())
    return replace(base, podgroup=podgroup, pod_templates=templates, jobset_annotations=jobset_annotations,
                    problems=tuple(problems))
