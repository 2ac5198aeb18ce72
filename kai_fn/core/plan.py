"""The pure planner: (TrainJob, runtime, settings) → a Plan of exactly what must exist in the cluster.

Nothing here does I/O. The shell turns a Plan into API calls: create :attr:`Plan.podgroup`, patch the JobSet
with :func:`kai_fn.core.patch.jobset_patch`, then release the TrainJob.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from kai_fn.core import keys, validation
from kai_fn.core.models import Runtime, TrainJob
from kai_fn.core.podsets import PodSet, pod_sets, total_requests
from kai_fn.core.queue_check import Gang, gangs
from kai_fn.core.runtime import check_matches
from kai_fn.core.scope import DEFAULT_SCHEDULE_TIMEOUT_SECONDS, GangPolicy, Problem, gang_policy, out_of_scope

Flavor = Literal["kai", "scheduler-plugins"]  # which PodGroup API the gang is written to
Layout = Literal["flat", "staged"]


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


@dataclass(frozen=True)
class Plan:
    namespace: str
    trainjob: str
    uid: str
    flavor: Flavor
    ignored: str | None = None
    podgroup: dict[str, Any] | None = None
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

    def summary(self) -> dict[str, Any]:
        """What the plan decided, for the CLI, Events and logs."""
        out: dict[str, Any] = {"trainJob": f"{self.namespace}/{self.trainjob}", "flavor": self.flavor}
        if self.ignored:
            return {**out, "ignored": self.ignored}
        out |= {
            "podGroup": self.podgroup_name,
            "layout": self.layout,
            "minMember": self.min_member,
            "minResources": self.min_resources,
            "queue": self.queue,
            "podSets": [{"name": p.name, "count": p.count, "requests": p.requests} for p in self.pod_sets],
        }
        for key, value in (("priorityClassName", self.priority_class), ("preemptibility", self.preemptibility)):
            if value:
                out[key] = value
        if self.flavor == "scheduler-plugins" or self.schedule_timeout_seconds is not None:
            out["scheduleTimeoutSeconds"] = self.schedule_timeout_seconds
        return out


def kai_podgroup_name(job: TrainJob) -> str:
    return f"pg-{job.metadata.name}-{job.metadata.uid}"


def plan(job: TrainJob, runtime: Runtime, *, flavor: Flavor = "kai", default_queue: str = "default-queue",
         schedule_timeout_seconds: int | None = None) -> Plan:
    """``schedule_timeout_seconds``: kai_fn's own timeout for a KAI gang whose runtime has no podGroupPolicy.kai."""
    check_matches(job, runtime)
    base = Plan(namespace=job.metadata.namespace, trainjob=job.metadata.name, uid=job.metadata.uid, flavor=flavor)
    if reason := out_of_scope(job, runtime):
        return replace(base, ignored=reason)

    sets = pod_sets(job, runtime)
    policy = gang_policy(job, runtime, sets, default_queue)
    resources = {k: str(q) for k, q in sorted(total_requests(sets).items())}
    staged = any(ps.depends_on for ps in sets)
    problems = list(policy.problems) + _pod_set_problems(sets)
    base = replace(
        base,
        layout="staged" if staged and flavor == "kai" else "flat",
        min_member=sum(ps.count for ps in sets),
        min_resources=resources,
        queue=policy.queue if flavor == "kai" else None,
        priority_class=policy.priority_class,
        preemptibility=policy.preemptibility,
        schedule_timeout_seconds=_timeout(policy, flavor, schedule_timeout_seconds),
        pod_sets=tuple(PodSetSummary(ps.name, ps.count, {k: str(q) for k, q in sorted(ps.requests.items())}) for ps in sets),
    )
    if flavor == "kai":
        base = replace(base, gangs=gangs(sets, base.layout == "staged"))
        return _kai(base, job, sets, policy, problems)
    return _scheduler_plugins(base, job, sets, problems)


def _timeout(policy: GangPolicy, flavor: Flavor, label_only: int | None) -> int | None:
    """The policy's; for the coscheduling PodGroup Trainer's default, for KAI (which has none) the setting."""
    if policy.schedule_timeout_seconds is not None:
        return policy.schedule_timeout_seconds
    return DEFAULT_SCHEDULE_TIMEOUT_SECONDS if flavor == "scheduler-plugins" else label_only


def _kai(base: Plan, job: TrainJob, sets: list[PodSet], policy: GangPolicy, problems: list[Problem]) -> Plan:
    name = kai_podgroup_name(job)
    if why := validation.dns_subdomain(name):
        problems.append(Problem("PodGroup metadata.name", why))
    problems += _identity_label_problems(job)
    for ps in sets:
        if ps.pod_spec.scheduler_name != keys.KAI_SCHEDULER_NAME:
            problems.append(Problem(
                f"replicatedJob {ps.name!r} spec.template.spec.schedulerName",
                f"is {ps.pod_spec.scheduler_name or 'unset (default-scheduler)'}: pods would not be scheduled by KAI; "
                f"set schedulerName: {keys.KAI_SCHEDULER_NAME} in the runtime's pod templates",
            ))
        if base.layout == "staged" and (why := validation.dns_label(ps.name)):
            problems.append(Problem(f"replicatedJob {ps.name!r} name (a KAI subgroup name)", why))

    spec: dict[str, Any] = {"queue": policy.queue}
    if base.layout == "staged":
        spec["minSubGroup"] = 1
        spec["subGroups"] = [{"name": ps.name, "minMember": ps.count} for ps in sets]
    else:
        spec["minMember"] = base.min_member
    if policy.priority_class:
        spec["priorityClassName"] = policy.priority_class
    if policy.preemptibility:
        spec["preemptibility"] = policy.preemptibility
    if policy.topology:
        constraint = {"topology": policy.topology.topology}
        if policy.topology.required_level:
            constraint["requiredTopologyLevel"] = policy.topology.required_level
        if policy.topology.preferred_level:
            constraint["preferredTopologyLevel"] = policy.topology.preferred_level
        spec["topologyConstraint"] = constraint

    templates = tuple(
        PodTemplateChange(
            ps.name,
            labels={keys.KAI_QUEUE_LABEL: policy.queue}
            | ({keys.KAI_SUBGROUP_LABEL: ps.name} if base.layout == "staged" else {}),
            annotations={keys.KAI_POD_GROUP_ANNOTATION: name},
        )
        for ps in sets
    )
    return _finish(base, problems, _podgroup(keys.KAI_PODGROUP_API, name, job, spec, base), templates,
                   {keys.KAI_SKIP_PODGROUPER: "true"})


def _scheduler_plugins(base: Plan, job: TrainJob, sets: list[PodSet], problems: list[Problem]) -> Plan:
    """One flat gang. With ``dependsOn`` only the trainer stage is ganged: Coscheduling has no subgroups, and a
    gang over every stage could never be met at once (the initializers must finish before the trainer starts)."""
    name = job.metadata.name
    if why := validation.label_value(name):
        problems.append(Problem(f"TrainJob metadata.name (the {keys.SP_POD_GROUP_LABEL} label value)", why))
    problems += _identity_label_problems(job)
    ganged = trainer_stage(sets)
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


def trainer_stage(sets: list[PodSet]) -> list[PodSet]:
    """The pod sets of a staged runtime that run together last: those of the trainer ancestor step, else those no
    other set depends on. ``sets`` itself when nothing depends on anything."""
    if not any(ps.depends_on for ps in sets):
        return sets
    trainer = [ps for ps in sets if ps.ancestor == keys.ANCESTOR_TRAINER]
    if trainer:
        return trainer
    needed = {d for ps in sets for d in ps.depends_on}
    return [ps for ps in sets if ps.name not in needed]


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


def _podgroup(api_version: str, name: str, job: TrainJob, spec: dict[str, Any], base: Plan) -> dict[str, Any]:
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
            "annotations": _podgroup_annotations(base),
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


def _podgroup_annotations(base: Plan) -> dict[str, str]:
    notes = {keys.MIN_RESOURCES_ANNOTATION: ",".join(f"{k}={v}" for k, v in base.min_resources.items())}
    if base.flavor == "kai" and base.schedule_timeout_seconds is not None:
        notes[keys.SCHEDULE_TIMEOUT_ANNOTATION] = str(base.schedule_timeout_seconds)
    return notes


def _finish(base: Plan, problems: list[Problem], podgroup: dict[str, Any], templates: tuple[PodTemplateChange, ...],
            jobset_annotations: dict[str, str]) -> Plan:
    if any(p.blocking for p in problems):
        return replace(base, problems=tuple(problems))
    return replace(base, podgroup=podgroup, pod_templates=templates, jobset_annotations=jobset_annotations,
                    problems=tuple(problems))
