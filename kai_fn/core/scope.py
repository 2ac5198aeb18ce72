"""Whether a TrainJob is KAI's to gang-schedule, and the gang's queue, priority, preemptibility and topology."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kai_fn.core import keys, owner_metadata
from kai_fn.core.models import KaiPolicy, PodTemplate, ReplicatedJob, Runtime, TrainJob
from kai_fn.core.owner_metadata import KaiCluster, OwnerMetadata, Topology
from kai_fn.core.podsets import PodSet
from kai_fn.core.stages import main_stage, stages
from kai_fn.core.runtime import replicated_jobs

DEFAULT_SCHEDULE_TIMEOUT_SECONDS = 60


_SECONDS = re.compile(r"^[0-9]{1,9}$")


def parse_seconds(text: str | None) -> int | None:
    """A whole number of seconds, or None when absent or not one."""
    return int(text) if text is not None and _SECONDS.fullmatch(text) else None


def seconds_problem(notes: dict[str, str]) -> str | None:
    """What is wrong with a TrainJob's timeout annotation, for the plan to report."""
    value = notes.get(keys.SCHEDULE_TIMEOUT_ANNOTATION)
    if value is None or parse_seconds(value) is not None:
        return None
    return f"{value!r} is not a whole number of seconds (0 means no timeout)"


@dataclass(frozen=True)
class Problem:
    """Something the plan cannot or should not do; ``field`` says where the bad value came from."""

    field: str
    message: str
    blocking: bool = True

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" + ("" if self.blocking else " (warning)")


@dataclass(frozen=True)
class GangPolicy:
    queue: str
    queue_source: str
    schedule_timeout_seconds: int | None  # None: the runtime has no podGroupPolicy.kai
    priority_class: str | None = None
    preemptibility: str | None = None
    topology: Topology | None = None
    problems: tuple[Problem, ...] = field(default=())
    owner: OwnerMetadata | None = None  # the podgrouper's metadata for the PodGroup (KAI flavor)


def out_of_scope(job: TrainJob, runtime: Runtime) -> str | None:
    """The reason a TrainJob is not ours, or None. Another gang plugin or controller always wins. Any other TrainJob
    whose pods ask for KAI (``schedulerName``) is ganged, as KAI's podgrouper would group it, labelled or not; one
    that asks for KAI by a label or ``podGroupPolicy.kai`` is planned too, so that pods sent to another scheduler
    are named as the problem they are."""
    if job.spec.managed_by not in (None, keys.TRAINER_MANAGER):
        return f"managed by {job.spec.managed_by}, not by Trainer in this cluster"
    policy = runtime.spec.pod_group_policy
    if policy is not None and policy.coscheduling is not None:
        return f"{runtime.kind} {runtime.metadata.name} uses Trainer's coscheduling plugin"
    if policy is not None and policy.volcano is not None:
        return f"{runtime.kind} {runtime.metadata.name} uses Trainer's volcano plugin"
    if policy is not None and policy.kai is not None:
        return None
    if keys.KAI_QUEUE_LABEL in job.metadata.labels or keys.KAI_QUEUE_LABEL in runtime.metadata.labels:
        return None
    if any(rj.template.spec.template.spec.scheduler_name == keys.KAI_SCHEDULER_NAME
           for rj in replicated_jobs(job, runtime)):
        return None
    return (f"its pods do not ask for {keys.KAI_SCHEDULER_NAME} (schedulerName), and neither the TrainJob nor "
            f"{runtime.kind} {runtime.metadata.name} asks for KAI ({keys.KAI_QUEUE_LABEL} label or podGroupPolicy.kai)")


def _kai_policy(runtime: Runtime) -> KaiPolicy | None:
    return runtime.spec.pod_group_policy.kai if runtime.spec.pod_group_policy else None


def gang_policy(job: TrainJob, runtime: Runtime, sets: list[PodSet], default_queue: str,
                cluster: KaiCluster | None = None) -> GangPolicy:
    """Queue, priority, preemptibility, topology and the rest of the owner's metadata as KAI's podgrouper reads them
    (:mod:`kai_fn.core.owner_metadata`), from the trainer's pod template; kai_fn's schedule timeout."""
    kai = _kai_policy(runtime)
    jobs = replicated_jobs(job, runtime)
    pod = deciding.template.spec.template if (deciding := owner_metadata.deciding_job(jobs)) else PodTemplate()
    owner = owner_metadata.derive(job, owner_metadata.jobset_metadata(job, runtime), pod, cluster or KaiCluster(),
                                  runtime, default_queue)
    problems = [Problem(p.field, p.message, p.blocking) for p in owner.problems]
    topology = _job_topology(jobs, sets, problems, owner.topology)
    if why := seconds_problem(job.metadata.annotations):
        problems.append(Problem(f"TrainJob metadata.annotations[{keys.SCHEDULE_TIMEOUT_ANNOTATION}]", why))
    timeout = None
    if kai is not None:
        timeout = DEFAULT_SCHEDULE_TIMEOUT_SECONDS if kai.schedule_timeout_seconds is None else kai.schedule_timeout_seconds
    return GangPolicy(owner.queue, owner.queue_source, timeout, owner.priority_class, owner.preemptibility,
                      topology, tuple(problems), owner)


def _job_topology(jobs: list[ReplicatedJob], sets: list[PodSet], problems: list[Problem],
                  owners: Topology | None) -> Topology | None:
    """A replicatedJob's own constraint (KAI puts it on each replica's subgroup): kai_fn's gangs are flat, so it holds
    where the main wave is that one replicatedJob with one replica and the owners ask for none, and is then the main
    PodGroup's."""
    constrained = {rj.name: t for rj in jobs if (t := owner_metadata.job_topology(rj)) is not None}
    if not constrained:
        return owners
    main = main_stage(stages(sets, reserve=True)) if sets else None
    alone = owners is None and main is not None and len(main.pod_sets) == 1 and main.pod_sets[0].replicas == 1
    for name in constrained:
        if not (alone and main is not None and main.pod_sets[0].name == name):
            problems.append(Problem(
                f"replicatedJob {name!r} template.metadata.annotations[{keys.KAI_TOPOLOGY}]",
                "not applied: kai_fn gangs a wave flat, and a replicatedJob's own constraint holds only for the "
                "main wave's single replicatedJob with one replica, where the TrainJob and its runtime's template "
                "ask for none", blocking=False))
    return constrained.get(main.pod_sets[0].name) if alone and main is not None else owners
