"""Small constructors for the objects the tests feed the planner, in the upstream wire format."""
from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

from kai_fn.core.models import InputError, Runtime, TrainJob, parse
from kai_fn.core.podsets import pod_sets
from kai_fn.local.emulator import naming

UID = "11111111-2222-4333-8444-555555555555"


def container(name: str = "node", requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
              restart_policy: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    if resources:
        c["resources"] = resources
    if restart_policy:
        c["restartPolicy"] = restart_policy
    return c


def rjob(name: str = "node", *, ancestor: str | None = "trainer", parallelism: int | None = None,
         containers: list[dict[str, Any]] | None = None, init_containers: list[dict[str, Any]] | None = None,
         depends_on: list[str] | None = None, scheduler: str | None = "kai-scheduler",
         pod_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers if containers is not None else [container(name)]}
    if init_containers:
        spec["initContainers"] = init_containers
    if scheduler:
        spec["schedulerName"] = scheduler
    spec.update(pod_spec or {})
    job_spec: dict[str, Any] = {"template": {"spec": spec}}
    if parallelism is not None:
        job_spec["parallelism"] = parallelism
    out: dict[str, Any] = {"name": name, "template": {"spec": job_spec}}
    if ancestor:
        out["template"]["metadata"] = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}}
    if depends_on:
        out["dependsOn"] = [{"name": d, "status": "Complete"} for d in depends_on]
    return out


def runtime(*jobs: dict[str, Any], kind: str = "ClusterTrainingRuntime", name: str = "rt",
            labels: dict[str, str] | None = None, ml_policy: dict[str, Any] | None = None,
            pod_group_policy: dict[str, Any] | None = None, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"kai.scheduler/queue": "rt-queue"} if labels is None else labels}
    if namespace:
        meta["namespace"] = namespace
    spec: dict[str, Any] = {"template": {"spec": {"replicatedJobs": list(jobs) or [rjob()]}}}
    if ml_policy is not None:
        spec["mlPolicy"] = ml_policy
    if pod_group_policy is not None:
        spec["podGroupPolicy"] = pod_group_policy
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


def trainjob(*, name: str = "job", namespace: str = "ns", uid: str = UID, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, num_nodes: int | None = None,
             resources_per_node: dict[str, Any] | None = None, runtime_kind: str | None = None,
             runtime_name: str = "rt", suspend: bool | None = True, **spec: Any) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": runtime_name}
    if runtime_kind:
        ref["kind"] = runtime_kind
    body: dict[str, Any] = {"runtimeRef": ref, **spec}
    trainer: dict[str, Any] = {}
    if num_nodes is not None:
        trainer["numNodes"] = num_nodes
    if resources_per_node is not None:
        trainer["resourcesPerNode"] = resources_per_node
    if trainer:
        body["trainer"] = trainer
    if suspend is not None:
        body["suspend"] = suspend
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta, "spec": body}


def jobset_for(job: dict[str, Any], rt: dict[str, Any], *, suspend: bool = True,
               uid: str = "99999999-8888-4777-8666-555555555555", held: bool = False) -> dict[str, Any]:
    """The JobSet Trainer would make: the runtime's template, named like the TrainJob, owned by it. ``held``: as the
    previous version's policy left it, labelled ``kai-fn/held: "true"`` (pass ``suspend=True`` with it): what
    kai_fn/function/migration/jobset_hold.py releases."""
    spec = copy.deepcopy(rt["spec"]["template"]["spec"])
    spec["suspend"] = suspend
    try:  # Trainer writes each job's count (numNodes for the trainer) as its parallelism and completions
        counts = {ps.name: ps.count for ps in pod_sets(*typed(job, rt))}
    except (InputError, ValueError):
        counts = {}
    for rj in spec.get("replicatedJobs") or []:
        if rj.get("name") in counts:
            rj["template"]["spec"]["parallelism"] = rj["template"]["spec"]["completions"] = counts[rj["name"]]
    out = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": job["metadata"]["name"],
            "namespace": job["metadata"]["namespace"],
            "uid": uid,
            "ownerReferences": [{
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": job["metadata"]["name"],
                "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
            }],
        },
        "spec": spec,
    }
    if held:
        out["metadata"]["labels"] = {"kai-fn/held": "true"}
    return out


def named_jobset_for(job: dict[str, Any], rt: dict[str, Any], *, suspend: bool = False,
                     uid: str = "99999999-8888-4777-8666-555555555555") -> dict[str, Any]:
    """The JobSet Trainer would make, as the admission policy (knative/components/admission-policy) names it at
    CREATE: its twin (:mod:`kai_fn.local.emulator.naming`, held to the policy on one scenario table). Nothing
    suspended unless ``suspend``."""
    return naming.named(jobset_for(job, rt, suspend=suspend, uid=uid))


def typed(job: dict[str, Any], rt: dict[str, Any]) -> tuple[TrainJob, Runtime]:
    return parse(TrainJob, job), parse(Runtime, rt)


def unreachable_kubeconfig(directory: Path) -> Path:
    """A kubeconfig whose API server never answers (port 9 on loopback, nothing listens)."""
    config = directory / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}], "users": [{"name": "u", "user": {}}]}))
    return config


def owned_by(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    """A sample TrainJob given ``uid``, or a sample JobSet made the one the TrainJob of ``uid`` controls (its own uid
    derived from it): each test its own uids, since a function process remembers by uid the TrainJobs whose JobSet
    it decided (kai_fn/function/recent.py), and a sample's uid reused by a later test would cost it nothing."""
    out = copy.deepcopy(obj)
    if out["kind"] == "JobSet":
        out["metadata"]["uid"] = str(uuid.uuid5(uuid.UUID(uid), "jobset"))
        for ref in out["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "TrainJob":
                ref["uid"] = uid
    else:
        out["metadata"]["uid"] = uid
    return out


def job_owner(jobset: str, replicated_job: str = "node", index: int = 0) -> list[dict[str, Any]]:
    """A pod's ownerReferences as the Job controller writes them: its Job, ``<jobset>-<replicatedJob>-<index>``
    (JobSet's naming), as controller. kai_fn counts a gang's pods only under such a Job (kai_fn/core/gang.py)."""
    return [{"apiVersion": "batch/v1", "kind": "Job", "name": f"{jobset}-{replicated_job}-{index}",
             "uid": f"job-uid-{jobset}-{replicated_job}-{index}", "controller": True, "blockOwnerDeletion": True}]


def held_by_0_2(named: dict[str, Any]) -> dict[str, Any]:
    """A JobSet the admission policy named (a sample's), as the previous version's policy left it instead: never
    named, suspended, labelled ``kai-fn/held: "true"``: what kai_fn/function/migration/jobset_hold.py releases."""
    out = copy.deepcopy(named)
    meta = out["metadata"]
    meta["labels"] = {"kai-fn/held": "true", **{k: v for k, v in (meta.get("labels") or {}).items()
                                                if k != "kai-fn/named"}}
    _drop(meta, "annotations", "kai.scheduler/skip-podgrouper")
    for rj in out["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]
        _drop(pod.get("metadata") or {}, "annotations", "pod-group-name")
        if not pod.get("metadata"):
            pod.pop("metadata", None)
    out["spec"]["suspend"] = True
    return out


def _drop(meta: dict[str, Any], where: str, key: str) -> None:
    kept = {k: v for k, v in (meta.get(where) or {}).items() if k != key}
    if kept:
        meta[where] = kept
    else:
        meta.pop(where, None)
