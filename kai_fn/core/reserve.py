"""Placeholders: how a wave that starts once an earlier one is ``Ready`` gets its place in that wave's gang.

MPI's launcher (Trainer's deepspeed and mlx runtimes: ``dependsOn: node, Ready``) cannot exist until the nodes run,
and KAI v0.17.0's PodGroup has no ``minResources`` to count it in advance. So kai_fn puts the launcher's pod set in
the nodes' PodGroup (``minMember`` = nodes + launcher, :mod:`kai_fn.core.stages`), has the launcher's pod template
name that PodGroup, and makes one placeholder pod per launcher pod before the JobSet is released: same effective
requests, same scheduling constraints (schedulerName, nodeSelector, tolerations, affinity, priority, queue), in the
same PodGroup. KAI binds the nodes and the placeholders whole, or nothing. When JobSet makes the launcher pod, kai_fn
deletes its placeholder; the launcher, pending in a gang below its ``minMember``, is placed before any other gang of
its queue and priority made after that PodGroup (KAI's job order: priority, then below-minMember first, then the
PodGroup's age: docs/reservation.md).

Everything here is pure: the placeholder pods as the plan makes them, and what to do with them given what exists
(:func:`step`); kai_fn/function/reserve.py does the calls.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kai_fn.core import keys
from kai_fn.core.podsets import PodSet

DEFAULT_IMAGE = "registry.k8s.io/pause:3.10"
# The most places kai_fn holds for one TrainJob: MPI's launcher is one pod. A runtime any tenant can write may say
# more (parallelism: 1000000); such a gang is refused with a Warning before a single placeholder is planned.
MAX_PLACEHOLDERS = 64
PLACEHOLDER_CONTAINER = "placeholder"
# Requests the API server lets a container have without an equal limit; any other (nvidia.com/gpu, hugepages-*)
# must have its limit set, and to the same amount.
_OVERCOMMITTABLE = frozenset({"cpu", "memory", "ephemeral-storage"})
# The template labels a placeholder carries for KAI as the real pod would (the rest, JobSet's and Trainer's, would
# make it look like one of their pods to them).
_KAI_LABELS = (keys.KAI_PRIORITY_LABEL, keys.KAI_PREEMPTIBILITY_LABEL)


def name(trainjob: str, replicated_job: str, index: int) -> str:
    return f"{trainjob}-{replicated_job}-placeholder-{index}"


def reserves_text(sets: Iterable[PodSet]) -> str:
    """``launcher=1``: the replicatedJobs whose places are held, and how many pods each."""
    return ",".join(f"{ps.name}={ps.pods}" for ps in sets)


def parse_reserves(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in (text or "").split(","):
        job, _, count = part.partition("=")
        if job.strip() and count.strip().isdigit():
            out[job.strip()] = int(count)
    return out


def placeholders(*, namespace: str, trainjob: str, uid: str, podgroup: str, queue: str | None,
                 sets: Sequence[PodSet], image: str = DEFAULT_IMAGE, subgroup: bool = False) -> tuple[dict[str, Any], ...]:
    """One pod per pod of each reserved set, in the gang's PodGroup, placed as that pod would be; with
    ``subgroup`` (a gang in segments) in its set's SubGroup, as that pod is (:mod:`kai_fn.core.segments`)."""
    return tuple(_pod(namespace, trainjob, uid, podgroup, queue, ps, i, image, subgroup)
                 for ps in sets for i in range(ps.pods))


def _pod(namespace: str, trainjob: str, uid: str, podgroup: str, queue: str | None, ps: PodSet, index: int,
         image: str, subgroup: bool) -> dict[str, Any]:
    requests = {k: str(q) for k, q in sorted(ps.requests.items())}
    resources: dict[str, Any] = {"requests": requests}
    if limits := {k: v for k, v in requests.items() if k not in _OVERCOMMITTABLE}:
        resources["limits"] = limits
    labels = {keys.MANAGED_BY_LABEL: keys.MANAGED_BY, keys.TRAINJOB_NAME_LABEL: trainjob,
              keys.TRAINJOB_UID_LABEL: uid, keys.PLACEHOLDER_LABEL: ps.name}
    labels |= {k: ps.labels[k] for k in _KAI_LABELS if k in ps.labels}
    if queue:
        labels[keys.KAI_QUEUE_LABEL] = queue
    if subgroup:
        labels[keys.KAI_SUBGROUP_LABEL] = ps.name
    spec = ps.pod_spec
    pod_spec: dict[str, Any] = {
        "schedulerName": spec.scheduler_name or keys.KAI_SCHEDULER_NAME,
        "containers": [{"name": PLACEHOLDER_CONTAINER, "image": image, "resources": resources,
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        # Admitted where Pod Security is "restricted": it runs nothing (pause runs as 65535).
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65535, "seccompProfile": {"type": "RuntimeDefault"}},
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 0,  # its place is freed the moment it is deleted
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    for key, value in (("priorityClassName", spec.priority_class_name), ("nodeSelector", spec.node_selector),
                       ("tolerations", spec.tolerations), ("affinity", spec.affinity)):
        if value:
            pod_spec[key] = value
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name(trainjob, ps.name, index),
            "namespace": namespace,
            "labels": labels,
            "annotations": {keys.KAI_POD_GROUP_ANNOTATION: podgroup, keys.KAI_SKIP_PODGROUPER: "true"},
            "ownerReferences": [{"apiVersion": keys.TRAINER_API, "kind": keys.TRAINJOB_KIND, "name": trainjob,
                                 "uid": uid, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": pod_spec,
    }


# -- what to do with them, given what exists -------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """``create``: names of placeholders missing; ``delete``: names to delete; ``handed_over``: every reserved pod
    exists now (its placeholder gone or going); ``why``: in a few words; ``finished``: the JobSet is done."""

    create: tuple[str, ...]
    delete: tuple[str, ...]
    handed_over: bool
    why: str
    finished: bool = False


def step(*, trainjob: str, reserves: dict[str, int], running: bool, finished: bool, pods: Iterable[dict[str, Any]],
         held: Iterable[dict[str, Any]]) -> Step:
    """The desired placeholders: for each reserved replicatedJob, as many as its pods JobSet has not made yet, while
    the JobSet runs and has not finished; none otherwise. ``pods``: the JobSet's; ``held``: the placeholders that
    exist (both as listed; ones being deleted are left out)."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    have = {held_name for p in held if (held_name := (p.get("metadata") or {}).get("name"))
            and not (p.get("metadata") or {}).get("deletionTimestamp")}
    made = {job: sum(1 for p in live if ((p.get("metadata") or {}).get("labels") or {}).get(keys.REPLICATED_JOB_LABEL)
                     == job) for job in reserves}
    wanted: set[str] = set()
    if running and not finished:
        wanted = {name(trainjob, job, i) for job, count in reserves.items() for i in range(max(count - made[job], 0))}
    create = tuple(sorted(wanted - have))
    delete = tuple(sorted(have - wanted))
    handed_over = running and not finished and all(made[job] >= count for job, count in reserves.items())
    if finished:
        why = "the JobSet finished: no place to hold"
    elif not running:
        why = "the JobSet is suspended: its pods are gone, and so are the places held for them"
    elif handed_over:
        why = "JobSet made " + ", ".join(f"{job} ({made[job]})" for job in reserves) + ": places handed over"
    else:
        why = "holding places for " + ", ".join(f"{job} ({count - made[job]} of {count})"
                                                for job, count in reserves.items() if count > made[job])
    return Step(create, delete, handed_over, why, finished)


def ended(podgroup: dict[str, Any] | None) -> tuple[str, str] | None:
    """``(time, why)`` from the main PodGroup's mark once kai_fn deleted the last placeholder, else None."""
    text = (((podgroup or {}).get("metadata") or {}).get("annotations") or {}).get(keys.RESERVATION_ENDED_ANNOTATION)
    if not text:
        return None
    moment, _, why = text.partition(" ")
    return moment, why or "ended"


def finished(jobset: dict[str, Any] | None) -> bool:
    """JobSet's terminal conditions: ``Completed`` or ``Failed`` True."""
    return any(c.get("type") in ("Completed", "Failed") and c.get("status") == "True"
               for c in ((jobset or {}).get("status") or {}).get("conditions") or [])
