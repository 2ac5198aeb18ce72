"""Whether a gang can ever fit its KAI queue, counted exactly as KAI v0.17.0 counts.

KAI refuses a gang when, for its leaf queue or any ancestor, ``limit != -1`` and ``allocated + request > limit``
(max_allowed_check.go), and a non-preemptible gang also when ``quota != -1`` and
``allocatedNonPreemptible + request > quota`` (quota_check.go). With nothing allocated these say "never": that is
all decided here, so a refusal is never a guess about what other jobs use.

Units are KAI's: CPU in millicores, memory in MB of 10^6 bytes, GPUs in devices; a resource the gang does not
request is never over. A pod's requests are those KAI reads from the pod, that is after the API server copied each
container's limits into its missing requests: a GPU given only as a limit counts here, though Trainer's
minResources leaves it out.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any, Literal

from pydantic import StrictFloat, StrictInt, StrictStr

from kai_fn.core.models import Container, InputError, Meta, Model, PodSpec, Resources, parse
from kai_fn.core.podsets import Requests, pod_requests
from kai_fn.core.stages import Stage

Resource = Literal["gpu", "cpu", "memory"]
Bound = Literal["limit", "quota"]
RESOURCES: tuple[Resource, ...] = ("gpu", "cpu", "memory")  # KAI's order (resource_share.AllResources)
UNITS: Mapping[Resource, str] = {"gpu": "GPUs", "cpu": "millicores", "memory": "MB"}
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
UNLIMITED = Decimal(-1)
_TOLERANCE = Decimal("1e-9")  # KAI compares float64s with this slack (LessOrEqualWithTolerance)
_MB = Decimal(10**6)

Amounts = dict[Resource, Decimal]


# -- what KAI reads from a Queue -----------------------------------------------------------------------------------

class QueueResource(Model):
    quota: StrictInt | StrictFloat | None = None
    limit: StrictInt | StrictFloat | None = None


class QueueResources(Model):
    gpu: QueueResource | None = None
    cpu: QueueResource | None = None
    memory: QueueResource | None = None


class QueueSpec(Model):
    parent_queue: StrictStr | None = None
    resources: QueueResources | None = None


class Queue(Model):
    metadata: Meta
    spec: QueueSpec = QueueSpec()

    def bound(self, resource: Resource, kind: Bound) -> Decimal:
        """A missing section or field is 0 (Go's zero value): nothing of that resource is allowed."""
        section = getattr(self.spec.resources, resource, None) if self.spec.resources else None
        value = getattr(section, kind, None) if section else None
        return Decimal(str(value)) if value is not None else Decimal(0)


@dataclass(frozen=True)
class QueueTree:
    """All Queues, as KAI's scheduler builds them: a queue is a leaf when no Queue names it as its parent."""

    queues: Mapping[str, Queue]
    children: Mapping[str, tuple[str, ...]]

    @classmethod
    def of(cls, items: Iterable[dict[str, Any]]) -> QueueTree:
        queues: dict[str, Queue] = {}
        for item in items:
            try:
                queue = parse(Queue, item)
            except InputError:
                continue  # the API server's schema keeps these out; one bad object must not hide the others
            if queue.metadata.name:
                queues[queue.metadata.name] = queue
        children: dict[str, list[str]] = {}
        for name, queue in sorted(queues.items()):
            if queue.spec.parent_queue:
                children.setdefault(queue.spec.parent_queue, []).append(name)
        return cls(queues, {k: tuple(v) for k, v in children.items()})

    def chain(self, name: str) -> list[Queue]:
        """The queue and its ancestors, leaf first; a missing parent ends it, as it ends KAI's walk."""
        out: list[Queue] = []
        seen: set[str] = set()
        current: str | None = name
        while current and current in self.queues and current not in seen:
            seen.add(current)
            out.append(self.queues[current])
            current = self.queues[current].spec.parent_queue
        return out


# -- what the gang asks for -----------------------------------------------------------------------------------------

def kai_amounts(requests: Requests) -> Amounts:
    """Kubernetes quantities in KAI's units; CPU and bytes round up as Go's MilliValue() and Value() do."""
    cpu = requests.get("cpu")
    memory = requests.get("memory")
    return {
        "gpu": sum((requests[name].value for name in GPU_RESOURCES if name in requests), Decimal(0)),
        "cpu": (cpu.value * 1000).to_integral_value(rounding=ROUND_CEILING) if cpu else Decimal(0),
        "memory": memory.value.to_integral_value(rounding=ROUND_CEILING) / _MB if memory else Decimal(0),
    }


def as_admitted(spec: PodSpec) -> PodSpec:
    """The pod spec as stored by the API server: limits copied into missing requests, per container and pod."""

    def defaulted(resources: Resources) -> Resources:
        return resources.model_copy(update={"requests": {**resources.limits, **resources.requests}})

    def fix(containers: list[Container]) -> list[Container]:
        return [c.model_copy(update={"resources": defaulted(c.resources)}) for c in containers]

    update: dict[str, object] = {"containers": fix(spec.containers), "init_containers": fix(spec.init_containers)}
    if spec.resources is not None:
        update["resources"] = defaulted(spec.resources)
    return spec.model_copy(update=update)


@dataclass(frozen=True)
class Members:
    """``pods`` alike pods, each asking ``kai`` as KAI counts it and ``trainer`` as Trainer's minResources does."""

    pods: int
    kai: Amounts
    trainer: Amounts


@dataclass(frozen=True)
class Gang:
    """``min_member`` pods out of ``members`` that KAI must place at once; ``stage`` names the replicatedJobs of a
    staged gang's PodGroup."""

    min_member: int
    members: tuple[Members, ...]
    stage: str | None = None

    def request(self, resource: Resource, view: Literal["kai", "trainer"] = "kai") -> Decimal:
        """What ``min_member`` of the pods ask for. When there are more pods than that (``replicas``), the least any
        ``min_member`` of them can ask for: a bound that KAI's own pick can only exceed, so a refusal stays sound."""
        total, need = Decimal(0), self.min_member
        for value, pods in sorted((getattr(m, view)[resource], m.pods) for m in self.members):
            take = min(pods, need)
            total += value * take
            need -= take
            if need <= 0:
                break
        return total


def gangs(waves: Sequence[Stage]) -> tuple[Gang, ...]:
    """What KAI places at once: each wave's PodGroup on its own (:mod:`kai_fn.core.stages`), every pod of it. The
    waves run one after the other, so each must fit alone; their sum need not."""
    staged = len(waves) > 1
    return tuple(
        Gang(stage.min_member,
             tuple(Members(ps.count * max(ps.replicas, 1), kai_amounts(pod_requests(as_admitted(ps.pod_spec))),
                           kai_amounts(ps.requests)) for ps in stage.pod_sets),
             ", ".join(stage.names) if staged else None)
        for stage in waves
    )


# -- the verdict -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Refusal:
    """Why the gang can never run in its queue. ``kind``: ``missing`` and ``not-leaf`` (KAI's QueueDoesNotExist),
    or ``over`` (a limit, or for a non-preemptible gang a quota, below the gang's request)."""

    kind: Literal["missing", "not-leaf", "over"]
    message: str
    queue: str
    at: str | None = None  # the queue (the leaf or an ancestor) whose bound is below the request
    resource: Resource | None = None
    request: Decimal | None = None
    bound: Decimal | None = None
    bound_kind: Bound | None = None


def check(tree: QueueTree, queue: str, demand: Sequence[Gang], non_preemptible: bool) -> Refusal | None:
    """None when KAI could place the gang in an empty ``queue``; else the first refusal in KAI's own order:
    limits before quotas, leaf before ancestors, GPU before CPU before memory."""
    if queue not in tree.queues:
        return Refusal("missing", f"Queue {queue} does not exist: KAI never schedules a gang in it "
                                  f"(QueueDoesNotExist); create it or name an existing leaf queue", queue)
    if children := tree.children.get(queue):
        shown = ", ".join(children[:3]) + (", ..." if len(children) > 3 else "")
        return Refusal("not-leaf", f"Queue {queue} is a parent queue (of {shown}): KAI schedules only in leaf "
                                   f"queues (QueueDoesNotExist); name one of its leaf queues", queue)
    chain = tree.chain(queue)
    for kind in ("limit", "quota") if non_preemptible else ("limit",):
        for gang in demand:
            for q in chain:
                for resource in RESOURCES:
                    bound = q.bound(resource, kind)
                    request = gang.request(resource)
                    if bound == UNLIMITED or request == 0 or request <= bound + _TOLERANCE:
                        continue
                    return Refusal("over", _over_message(gang, q, queue, resource, kind, request, bound), queue,
                                   q.metadata.name, resource, request, bound, kind)
    return None


def demand_of(gangs_: Sequence[Gang], resource: Resource) -> Decimal:
    """What KAI must fit at once of one resource: the largest gang (of a staged one, the largest stage)."""
    return max((g.request(resource) for g in gangs_), default=Decimal(0))


def _over_message(gang: Gang, q: Queue, leaf: str, resource: Resource, kind: Bound, request: Decimal,
                  bound: Decimal) -> str:
    unit = UNITS[resource]
    name = q.metadata.name
    where = f"Queue {name}" + (f" (an ancestor of {leaf})" if name != leaf else "")
    who = f"stage {gang.stage}: its {gang.min_member} pods" if gang.stage else f"its {gang.min_member} pods"
    message = (f"the gang can never fit: {who} request {resource} {show(request)} {unit}, over the {kind} "
               f"{show(bound)} {unit} of {where}")
    if kind == "quota":
        message += "; a non-preemptible gang may not exceed quota"
    from_limits = request - gang.request(resource, "trainer")
    if from_limits > 0:
        message += (f"; {show(from_limits)} {unit} of it are limits without requests, which the API server copies "
                    f"into requests (KAI counts them, Trainer's minResources does not)")
    return message


def show(value: Decimal) -> str:
    """At most three decimals, no exponent, no trailing zeros: 68719.476736 → 68719.477, 16.0 → 16."""
    if value == value.to_integral_value():
        return str(int(value))
    rounded = value.quantize(Decimal("0.001"))
    return format((rounded if rounded else value).normalize(), "f")
