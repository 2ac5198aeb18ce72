"""Trainer's pod-set arithmetic, ported exactly (pkg/runtime/core/trainingruntime.go and the mlPolicy plugins).

One PodSet per replicatedJob, in order. Its count is the Job's parallelism, or for the ``trainer`` ancestor
``mlPolicy.numNodes``, at least 1; ``TrainJob.spec.trainer.numNodes`` then sets one PodSet's count as given, 0
included (MPI: the one named ``node``, less one when the launcher runs as a node; otherwise the first ``trainer``).
``replicas`` is not multiplied in, as upstream. Checked against Trainer's own code by tests/testbed.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from kai_fn.core import keys
from kai_fn.core.models import Container, MLPolicy, PodSpec, ReplicatedJob, Resources, Runtime, TrainJob
from kai_fn.core.quantity import Quantity
from kai_fn.core.runtime import replicated_jobs

Requests = dict[str, Quantity]


def _pod_level(name: str) -> bool:
    """What pod-level ``resources`` may set (k8s component-helpers IsSupportedPodLevelResource)."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int
    ancestor: str | None
    requests: Requests  # one pod's effective requests
    pod_spec: PodSpec
    depends_on: tuple[str, ...]
    replicas: int = 1  # not in count (as Trainer), but more pods than minMember may exist
    labels: dict[str, str] = field(default_factory=dict)  # the pod template's
    after_ready: bool = False  # every dependsOn is `Ready`: JobSet makes its pods once those jobs run

    @property
    def pods(self) -> int:
        """Every pod of the set, ``replicas`` included: what a wave's gang and its placeholders count."""
        return self.count * max(self.replicas, 1)


def pod_sets(job: TrainJob, runtime: Runtime) -> list[PodSet]:
    ml = runtime.spec.ml_policy
    trainer = job.spec.trainer
    per_node = trainer.resources_per_node if trainer else None
    launcher_as_node = ml is not None and ml.mpi is not None and ml.mpi.run_launcher_as_node
    sets = []
    for rj in replicated_jobs(job, runtime):
        ancestor = rj.template.metadata.labels.get(keys.ANCESTOR_LABEL)
        spec = rj.template.spec.template.spec
        if per_node is not None and ml is not None and (
                ancestor == keys.ANCESTOR_TRAINER or (launcher_as_node and rj.name == keys.NODE)):
            spec = _with_node_resources(spec, per_node)
        sets.append(PodSet(
            name=rj.name,
            count=max(_declared_count(rj, ancestor, ml), 1),
            ancestor=ancestor,
            requests=pod_requests(spec),
            pod_spec=spec,
            depends_on=tuple(d.name for d in rj.depends_on),
            replicas=rj.replicas,
            labels=dict(rj.template.spec.template.metadata.labels),
            after_ready=bool(rj.depends_on) and all(d.status == keys.READY for d in rj.depends_on),
        ))
    if trainer is not None and trainer.num_nodes is not None:
        _set_num_nodes(sets, ml, trainer.num_nodes)
    return sets


# Trainer's CRDs declare every count (numNodes, replicas, parallelism) an int32, as KAI's PodGroup its minMember.
INT32_MAX = 2**31 - 1


def count_problems(job: TrainJob, sets: list[PodSet]) -> list[tuple[str, str]]:
    """(field, why) of each count no gang can have: ``numNodes`` 0 (a gang of no trainer pods, which KAI reads as no
    gang at all), a count past Trainer's int32, or a gang of more pods than a PodGroup's int32 ``minMember``."""
    num_nodes = job.spec.trainer.num_nodes if job.spec.trainer else None
    field_name = "TrainJob spec.trainer.numNodes"
    if num_nodes == 0:
        return [(field_name, "is 0: a gang of no trainer pods, which KAI takes for no gang at all; give 1 or more")]
    if num_nodes is not None and num_nodes > INT32_MAX:
        return [(field_name, f"{num_nodes} is more than Trainer's CRD allows (an int32: at most {INT32_MAX})")]
    too_many = [ps for ps in sets if max(ps.count, ps.replicas) > INT32_MAX]
    if too_many:
        return [(f"replicatedJob {ps.name!r}", f"{max(ps.count, ps.replicas)} pods or replicas is more than Trainer's "
                 f"CRD allows (an int32: at most {INT32_MAX})") for ps in too_many]
    if (total := sum(ps.pods for ps in sets)) > INT32_MAX:
        return [("the gang", f"{total} pods is more than a PodGroup's minMember can hold (an int32: at most "
                 f"{INT32_MAX})")]
    return []


def _set_num_nodes(sets: list[PodSet], ml: MLPolicy | None, num_nodes: int) -> None:
    """``TrainJob.spec.trainer.numNodes`` as the mlPolicy plugins apply it: on one PodSet only, as given (0 too).

    MPI: the first PodSet named ``node``, one less (at least 1) when the launcher runs as a node. Torch, JAX,
    XGBoost and PlainML (no mlPolicy, or one without torch/mpi/jax): the first PodSet whose ancestor is ``trainer``.
    """
    if ml is not None and ml.mpi is not None:
        index = next((i for i, ps in enumerate(sets) if ps.name == keys.NODE), None)
        count = max(num_nodes - 1, 1) if ml.mpi.run_launcher_as_node else num_nodes
    else:
        index = next((i for i, ps in enumerate(sets) if ps.ancestor == keys.ANCESTOR_TRAINER), None)
        count = num_nodes
    if index is not None:
        sets[index] = replace(sets[index], count=count)


def _declared_count(rj: ReplicatedJob, ancestor: str | None, ml: MLPolicy | None) -> int:
    if ancestor == keys.ANCESTOR_TRAINER and ml is not None:
        return 1 if ml.num_nodes is None else ml.num_nodes
    parallelism = rj.template.spec.parallelism
    return 1 if parallelism is None else parallelism


def _with_node_resources(spec: PodSpec, per_node: Resources) -> PodSpec:
    """``resourcesPerNode`` merged key by key into the ``node`` container's requests and limits."""
    containers = []
    for c in spec.containers:
        if c.name == keys.NODE:
            merged = Resources(
                requests={**c.resources.requests, **per_node.requests},
                limits={**c.resources.limits, **per_node.limits},
            )
            c = c.model_copy(update={"resources": merged})
        containers.append(c)
    return spec.model_copy(update={"containers": containers})


def pod_requests(spec: PodSpec) -> Requests:
    """k8s component-helpers ``PodRequests``: requests only, sidecars and init containers, overhead, pod level."""
    total: Requests = {}
    for c in spec.containers:
        _add(total, _requests(c))
    sidecars: Requests = {}
    init_peak: Requests = {}
    for c in spec.init_containers:
        if c.restart_policy == "Always":
            _add(total, _requests(c))
            _add(sidecars, _requests(c))
            _max(init_peak, sidecars)
        else:
            during: Requests = {}
            _add(during, _requests(c))
            _add(during, sidecars)
            _max(init_peak, during)
    _max(total, init_peak)
    if spec.resources is not None:
        for name, value in spec.resources.requests.items():
            if _pod_level(name):
                total[name] = Quantity.parse(value)
    _add(total, {k: Quantity.parse(v) for k, v in spec.overhead.items()})
    return total


def _requests(c: Container) -> Requests:
    return {k: Quantity.parse(v) for k, v in c.resources.requests.items()}


def _add(into: Requests, more: Requests) -> None:
    for k, q in more.items():
        into[k] = into[k] + q if k in into else q


def _max(into: Requests, other: Requests) -> None:
    for k, q in other.items():
        if k not in into or q.value > into[k].value:
            into[k] = q


def total_requests(sets: list[PodSet]) -> Requests:
    """Σ count × per-pod requests, the format of each sum that of its first term (as Go's Quantity.Add)."""
    total: Requests = {}
    for ps in sets:
        _add(total, {k: q * ps.count for k, q in ps.requests.items()})
    return total
