"""A gang's state as the scheduler left it: which pods are bound, and why KAI says it cannot place the rest.

Pure functions over the PodGroup and its pods as the API returns them. :func:`judge` is the one answer to "is the
gang bound?", asked by the status path (``GangBound``, ``kai-fn/bound``), the schedule timeout, ``status`` and
``explain``. A pod is on a node when ``spec.nodeName`` is set, the one thing every scheduler writes (KAI's binder and
kube-scheduler alike); KAI clears ``status.schedulingConditions`` once it allocates, before the pods are bound, so
conditions alone cannot say "bound".

What counts is kai_fn's own: the plan's ``minMember`` (:class:`Planned`), never the PodGroup's spec, which anyone
allowed to patch PodGroups could lower; and only pods that name the PodGroup **and** whose controller is a Job the
plan's replicatedJobs produce (``<jobset>-<replicatedJob>-<index>``). A pod's labels and annotations are its
creator's to write: a tenant's pod made with ``nodeName`` (bound without any scheduler) and the gang's labels used to
count as one of the gang. It can still forge the controller reference: the Job's name and uid are readable in its
namespace. That is enough: a pod naming a uid no Job has is deleted by the garbage collector, and one naming the
real Job is that Job's own to the Job controller, which deletes the pods above its parallelism; all a tenant gains
is its own gang called bound (its own schedule timeout ended), which it may already ask for with
``kai-fn/schedule-timeout-seconds``. Reading the Jobs would prove no more and cost a LIST per look.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kai_fn.core import keys, objects
from kai_fn.core.quantity import Quantity


@dataclass(frozen=True)
class Part:
    """One leaf subgroup (or the whole gang when it has none): its minimum and its pods."""

    name: str | None
    min_member: int
    bound: int
    waiting: int

    @property
    def satisfied(self) -> bool:
        return self.bound >= max(self.min_member, 1)


@dataclass(frozen=True)
class Planned:
    """What kai_fn's plan says one PodGroup gangs: ``min_member`` pods of the Jobs named ``jobs``, which JobSet makes
    of the PodGroup's replicatedJobs (``<jobset>-<replicatedJob>-<index>``, one per replica)."""

    podgroup: str
    min_member: int
    jobs: frozenset[str]


@dataclass(frozen=True)
class GangCount:
    """The gang's pods that count (:func:`judge`), by leaf subgroup for people, against the plan's minMember."""

    parts: tuple[Part, ...]
    planned: int = 0  # the plan's minMember; 0: no plan, so never bound

    @property
    def bound(self) -> bool:
        """At least the plan's minMember pods of the gang's own Jobs on nodes."""
        return self.planned > 0 and self.bound_pods >= self.planned

    @property
    def any_bound(self) -> bool:
        return any(p.bound for p in self.parts)

    @property
    def min_member(self) -> int:
        return self.planned

    @property
    def bound_pods(self) -> int:
        return sum(p.bound for p in self.parts)

    def summary(self) -> str:
        if len(self.parts) == 1 and self.parts[0].name is None:
            return f"{self.bound_pods} of minMember {self.min_member} pods bound"
        return ", ".join(f"{p.name} {p.bound}/{p.min_member}" for p in self.parts) + " pods bound"


def minima(podgroup: dict[str, Any]) -> dict[str | None, int]:
    """minMember per leaf subgroup, or ``{None: minMember}`` for a flat gang."""
    spec = podgroup.get("spec") or {}
    subgroups = [s for s in spec.get("subGroups") or [] if isinstance(s, dict) and s.get("name")]
    parents = {s.get("parent") for s in subgroups}
    leaves = {s["name"]: _int(s.get("minMember")) for s in subgroups if s["name"] not in parents}
    return leaves or {None: _int(spec.get("minMember"))}


def members(podgroup: dict[str, Any], pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods that name this PodGroup (annotation for KAI, label for scheduler-plugins), not being deleted."""
    name = podgroup.get("metadata", {}).get("name")
    sp = str(podgroup.get("apiVersion", "")).startswith(keys.SP_GROUP + "/")

    def joined(pod: dict[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return False
        if sp:
            return bool((meta.get("labels") or {}).get(keys.SP_POD_GROUP_LABEL) == name)
        return bool((meta.get("annotations") or {}).get(keys.KAI_POD_GROUP_ANNOTATION) == name)

    return [p for p in pods if joined(p)]


def is_bound(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def judge(planned: Planned | None, podgroup: dict[str, Any], pods: Iterable[dict[str, Any]]) -> GangCount:
    """The gang of ``podgroup`` counted as kai_fn planned it: its pods that name it and that a planned Job controls
    (:func:`of_planned_job`), against the plan's minMember. No plan (``None``), or a plan of another PodGroup: never
    bound. A subgroup's minimum is shown, never trusted."""
    mine = [p for p in members(podgroup, pods) if planned is not None and of_planned_job(p, planned.jobs)]
    parts = []
    for name, minimum in minima(podgroup).items():
        group = [p for p in mine if name is None
                 or ((p.get("metadata") or {}).get("labels") or {}).get(keys.KAI_SUBGROUP_LABEL) == name]
        bound = sum(1 for p in group if is_bound(p))
        parts.append(Part(name, minimum, bound, len(group) - bound))
    same = planned is not None and planned.podgroup == (podgroup.get("metadata") or {}).get("name")
    return GangCount(tuple(parts), planned.min_member if planned is not None and same else 0)


def of_planned_job(pod: dict[str, Any], jobs: frozenset[str]) -> bool:
    """The pod's controller is a Job of ``jobs`` (``batch/v1``), as the Job controller makes its pods."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    controller = next((r for r in refs if isinstance(r, dict) and r.get("controller") is True), None)
    return (controller is not None and controller.get("kind") == "Job" and controller.get("apiVersion") == "batch/v1"
            and controller.get("name") in jobs)


def per_replicated_job(pods: Iterable[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """(bound, waiting) pods per replicatedJob, by JobSet's label; for people reading ``explain``."""
    tally: dict[str, tuple[int, int]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        name = (meta.get("labels") or {}).get(keys.REPLICATED_JOB_LABEL, "?")
        bound, waiting = tally.get(name, (0, 0))
        tally[name] = (bound + 1, waiting) if is_bound(pod) else (bound, waiting + 1)
    return dict(sorted(tally.items()))


@dataclass(frozen=True)
class Reason:
    reason: str
    message: str
    queue: str | None = None


def unschedulable(podgroup: dict[str, Any]) -> tuple[Reason, ...]:
    """KAI's reasons from ``status.schedulingConditions[]`` (``reasons[]``, else the deprecated reason/message), each
    message made one line of whole sentences (:func:`sentences`)."""
    found: list[Reason] = []
    for condition in (podgroup.get("status") or {}).get("schedulingConditions") or []:
        if not isinstance(condition, dict):
            continue
        reasons = [r for r in condition.get("reasons") or [] if isinstance(r, dict)]
        for r in reasons:
            queue = ((r.get("details") or {}).get("queueDetails") or {}).get("name")
            found.append(Reason(str(r.get("reason") or "Unschedulable"), sentences(r.get("message")), queue))
        if not reasons and (condition.get("reason") or condition.get("message")):
            found.append(Reason(str(condition.get("reason") or "Unschedulable"), sentences(condition.get("message"))))
    unique = dict.fromkeys(found)
    return tuple(unique)


def nothing_to_tell(podgroup: dict[str, Any]) -> bool:
    """KAI counted the gang's pods and placed none, and gives no reason: a look can report nothing. KAI's
    podgroupcontroller writes ``resourcesStatus.requested`` for the gang's active pods and ``allocated`` for those
    scheduled (KAI v0.17.0, ``pkg/podgroupcontroller/controllers/patcher``), so the write that allocates one is a
    later event of its own. Only for a spec never edited (``generation`` 1: an edit is told, ``PodGroupEdited``) and
    a PodGroup that never held places for a later wave (``kai-fn/reserves``: its hand-over comes as a pod joins).
    A body that says so may skip a look; it can never make a report."""
    status = podgroup.get("status") or {}
    if not isinstance(status, dict) or status.get("schedulingConditions"):
        return False
    if objects.meta(podgroup).get("generation") != 1 or keys.RESERVES_ANNOTATION in objects.notes(podgroup):
        return False
    counted = status.get("resourcesStatus") or {}
    return isinstance(counted, dict) and _some(counted.get("requested")) and not _some(counted.get("allocated"))


def _some(resources: Any) -> bool:
    """A resource list with a quantity above zero; one KAI could not have written counts as some."""
    if not isinstance(resources, dict):
        return resources is not None
    try:
        return any(Quantity.parse(v).value > 0 for v in resources.values())
    except (TypeError, ValueError):
        return True


def sentences(message: Any) -> str:
    """KAI's message as one line of sentences, each ending in a stop. KAI v0.17.0 ends a reason's message without one
    ("... workload requested 8 GPUs") and joins a pod's per-node findings with ". \\n", so copied as written the
    Event ran on into whatever followed it, and ``kubectl get events`` cut it at the newline."""
    lines = [" ".join(line.split()) for line in str(message or "").splitlines()]
    text = " ".join(line if line[-1] in ".!?:;" else line + "." for line in lines if line)
    return _DOUBLE_STOP.sub(".", text)


_DOUBLE_STOP = re.compile(r"(?<!\.)\.\.(?!\.)")  # "selector.." (KAI adds a stop to a message that has one), not "..."


def describe(reasons: Iterable[Reason]) -> str:
    """KAI's reasons as sentences: ``OverLimit (queue q): <message>. PodSchedulingErrors: <message>.``"""
    parts = []
    for r in reasons:
        where = f" (queue {r.queue})" if r.queue and r.queue not in r.message else ""
        parts.append(f"{r.reason}{where}: {r.message}" if r.message else f"{r.reason}{where}.")
    return " ".join(parts)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
