"""Whether a TrainJob is KAI's to gang-schedule, and the gang's queue, priority, preemptibility and topology."""
from __future__ import annotations

from dataclasses import dataclass, field

from kai_fn.core import keys, validation
from kai_fn.core.models import KaiPolicy, Runtime, TrainJob
from kai_fn.core.podsets import PodSet
from kai_fn.core.schedule_timeout import seconds_problem

DEFAULT_SCHEDULE_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Problem:
    """Something the plan cannot or should not do; ``field`` says where the bad value came from."""

    field: str
    message: str
    blocking: bool = True

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" + ("" if self.blocking else " (warning)")


@dataclass(frozen=True)
class Topology:
    topology: str
    required_level: str | None = None
    preferred_level: str | None = None


@dataclass(frozen=True)
class GangPolicy:
    queue: str
    queue_source: str
    schedule_timeout_seconds: int | None  # None: the runtime has no podGroupPolicy.kai
    priority_class: str | None = None
    preemptibility: str | None = None
    topology: Topology | None = None
    problems: tuple[Problem, ...] = field(default=())


def out_of_scope(job: TrainJob, runtime: Runtime) -> str | None:
    """The reason a TrainJob is not ours, or None. Another gang plugin or controller always wins over a label."""
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
    return (f"neither the TrainJob nor {runtime.kind} {runtime.metadata.name} asks for KAI "
            f"({keys.KAI_QUEUE_LABEL} label or podGroupPolicy.kai)")


def _kai_policy(runtime: Runtime) -> KaiPolicy | None:
    return runtime.spec.pod_group_policy.kai if runtime.spec.pod_group_policy else None


def gang_policy(job: TrainJob, runtime: Runtime, sets: list[PodSet], default_queue: str) -> GangPolicy:
    problems: list[Problem] = []
    kai = _kai_policy(runtime)
    queue, source = _queue(job, runtime, default_queue)
    if (why := validation.label_value(queue)) or not queue:
        problems.append(Problem(source, why or "the queue name must not be empty"))

    priority = job.metadata.labels.get(keys.KAI_PRIORITY_LABEL)
    priority_source = f"TrainJob metadata.labels[{keys.KAI_PRIORITY_LABEL}]"
    if priority is None:
        priority = _runtime_priority(sets)
        priority_source = f"{runtime.kind} pod template spec.priorityClassName"
    if priority is not None and (why := validation.dns_subdomain(priority)):
        problems.append(Problem(priority_source, why))

    preemptibility = job.metadata.labels.get(keys.KAI_PREEMPTIBILITY_LABEL)
    if preemptibility is not None and preemptibility not in keys.PREEMPTIBILITY_VALUES:
        problems.append(Problem(
            f"TrainJob metadata.labels[{keys.KAI_PREEMPTIBILITY_LABEL}]",
            f"{preemptibility!r} is not one of {', '.join(keys.PREEMPTIBILITY_VALUES)}",
        ))

    topology, topology_problems = _topology(job)
    problems += topology_problems
    if why := seconds_problem(job.metadata.annotations):
        problems.append(Problem(f"TrainJob metadata.annotations[{keys.SCHEDULE_TIMEOUT_ANNOTATION}]", why))
    timeout = None
    if kai is not None:
        timeout = DEFAULT_SCHEDULE_TIMEOUT_SECONDS if kai.schedule_timeout_seconds is None else kai.schedule_timeout_seconds
    return GangPolicy(queue, source, timeout, priority, preemptibility, topology, tuple(problems))


def _queue(job: TrainJob, runtime: Runtime, default_queue: str) -> tuple[str, str]:
    """Highest first: TrainJob label, runtime policy, runtime label, the KAI_DEFAULT_QUEUE setting."""
    kai = _kai_policy(runtime)
    if keys.KAI_QUEUE_LABEL in job.metadata.labels:
        return job.metadata.labels[keys.KAI_QUEUE_LABEL], f"TrainJob metadata.labels[{keys.KAI_QUEUE_LABEL}]"
    if kai is not None and kai.queue_name is not None:
        return kai.queue_name, f"{runtime.kind} spec.podGroupPolicy.kai.queueName"
    if keys.KAI_QUEUE_LABEL in runtime.metadata.labels:
        return runtime.metadata.labels[keys.KAI_QUEUE_LABEL], f"{runtime.kind} metadata.labels[{keys.KAI_QUEUE_LABEL}]"
    return default_queue, "setting KAI_DEFAULT_QUEUE"


def _runtime_priority(sets: list[PodSet]) -> str | None:
    """The trainer's pod template decides; else the first pod template that names a priority class."""
    ordered = sorted(sets, key=lambda ps: ps.ancestor != keys.ANCESTOR_TRAINER)
    return next((ps.pod_spec.priority_class_name for ps in ordered if ps.pod_spec.priority_class_name), None)


def _topology(job: TrainJob) -> tuple[Topology | None, list[Problem]]:
    notes = job.metadata.annotations
    name = notes.get(keys.KAI_TOPOLOGY)
    required = notes.get(keys.KAI_TOPOLOGY_REQUIRED)
    preferred = notes.get(keys.KAI_TOPOLOGY_PREFERRED)
    where = "TrainJob metadata.annotations"
    if name is None:
        stray = [k for k, v in ((keys.KAI_TOPOLOGY_REQUIRED, required), (keys.KAI_TOPOLOGY_PREFERRED, preferred)) if v]
        if stray:
            return None, [Problem(f"{where}[{stray[0]}]", f"needs {keys.KAI_TOPOLOGY} to name the Topology")]
        return None, []
    problems = []
    if why := validation.dns_subdomain(name):
        problems.append(Problem(f"{where}[{keys.KAI_TOPOLOGY}]", why))
    for key, level in ((keys.KAI_TOPOLOGY_REQUIRED, required), (keys.KAI_TOPOLOGY_PREFERRED, preferred)):
        if level is not None and not level.strip():
            problems.append(Problem(f"{where}[{key}]", "must name a topology level (a node label key)"))
    return Topology(name, required or None, preferred or None), problems
