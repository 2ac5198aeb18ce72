"""Trainer v2.3.0's own ClusterTrainingRuntimes on the chain, as a user runs them, and how their TrainJobs fared.

The runtimes are read from Trainer's module in the Go module cache (``manifests/base/runtimes``), never copied into
the tree, and changed only as a user would: ``schedulerName: kai-scheduler`` on the runtime's pod templates; on the
TrainJob the queue label, ``numNodes``, 8 GPUs per node and a ``nodeSelector`` keeping its pods on the scenario's own
pool (scenarios run side by side). :func:`volumes` reserves a PersistentVolume for each claim torchtune's
``volumeClaimPolicies`` make. Shared by the chain tier and ``python -m bench shapes``.
"""
from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_fn.core import keys
from kai_fn.core.models import Runtime, TrainJob, parse
from kai_fn.core.plan import plan
from kai_fn.local import k8s
from kai_fn.local.chain import POOL_LABEL, TRAINER, Testbed, for_scheduler
from kai_fn.local.process import REPO

MODULE = "github.com/kubeflow/trainer/v2"
RUNTIMES_DIR = ("manifests", "base", "runtimes")
INITIALIZERS = ("dataset-initializer", "model-initializer")
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
PODGROUPS = ("scheduling.run.ai", "v2alpha2")
GPUS_PER_POD = 8
VOLUMES_LABEL = "kai-fn.testbed/volumes-for"
POLL_S = 0.5


def module_dir() -> Path:
    """Trainer's module in the Go module cache, at the version testbed/launcher pins; fetched when the cache lacks it
    (``go list -m`` answers an empty directory then: a test collected before the testbed's first build saw none)."""
    found = subprocess.run(["go", "mod", "download", "-json", MODULE], cwd=REPO / "testbed" / "launcher",
                           capture_output=True, text=True, check=True).stdout
    directory = json.loads(found).get("Dir")
    if not directory:
        raise RuntimeError(f"go mod download {MODULE} gave no directory: {found[:300]}")
    return Path(directory)


def official() -> dict[str, dict[str, Any]]:
    """Every ClusterTrainingRuntime of the module's manifests/base/runtimes, by name, as shipped."""
    root = module_dir().joinpath(*RUNTIMES_DIR)
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(root.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "ClusterTrainingRuntime":
                found[doc["metadata"]["name"]] = doc
    return found


def jobs_of(runtime: dict[str, Any]) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return jobs


def initializers_of(runtime: dict[str, Any]) -> tuple[str, ...]:
    return tuple(j["name"] for j in jobs_of(runtime) if j["name"] in INITIALIZERS)


def gpu_jobs_of(runtime: dict[str, Any]) -> tuple[str, ...]:
    """The replicatedJobs that get the GPU request: every one but the initializers (Trainer merges
    resourcesPerNode into the ``trainer`` steps and, MPI with runLauncherAsNode, into ``node``)."""
    return tuple(j["name"] for j in jobs_of(runtime) if j["name"] not in INITIALIZERS)


def num_nodes_for(runtime: dict[str, Any]) -> int:
    """2 nodes; 1 for torchtune, as Trainer's torchtune validation demands of these models (``must be 1``) and as
    their one volume (ReadWriteOnce) can serve."""
    return 1 if runtime["metadata"].get("labels", {}).get("trainer.kubeflow.org/framework") == "torchtune" else 2


def gpu_pods_for(runtime: dict[str, Any], num_nodes: int) -> int:
    """The GPU pods that must run at once (Trainer's arithmetic): ``numNodes`` nodes; MPI with
    runLauncherAsNode counts its launcher as a node (``node`` gets max(numNodes-1, 1), the launcher 1)."""
    mpi = (runtime["spec"].get("mlPolicy") or {}).get("mpi") or {}
    return max(num_nodes - 1, 1) + 1 if mpi.get("runLauncherAsNode") else num_nodes


def as_user(runtime: dict[str, Any]) -> dict[str, Any]:
    """The runtime with ``schedulerName: kai-scheduler`` on every pod template, nothing else changed."""
    rt = for_scheduler(runtime, keys.KAI_SCHEDULER_NAME)
    rt["metadata"] = {k: v for k, v in rt["metadata"].items() if k in ("name", "labels", "annotations")}
    return rt


def trainjob(name: str, runtime: dict[str, Any], pool: str, num_nodes: int, queue: str = "default-queue"
             ) -> dict[str, Any]:
    """A TrainJob on ``runtime`` as a user writes one (see the module docstring)."""
    gpus = {"nvidia.com/gpu": str(GPUS_PER_POD)}
    pinned = [{"name": j["name"], "template": {"spec": {"template": {"spec": {"nodeSelector": {POOL_LABEL: pool}}}}}}
              for j in jobs_of(runtime)]
    return {"apiVersion": "/".join(TRAINER), "kind": "TrainJob",
            "metadata": {"name": name, "labels": {keys.KAI_QUEUE_LABEL: queue}},
            "spec": {"runtimeRef": {"name": runtime["metadata"]["name"], "kind": "ClusterTrainingRuntime",
                                    "apiGroup": TRAINER[0]},
                     "trainer": {"numNodes": num_nodes, "resourcesPerNode": {"requests": gpus, "limits": gpus}},
                     "runtimePatches": [{"manager": "kai-fn.testbed/pool", "trainingRuntimeSpec": {
                         "template": {"spec": {"replicatedJobs": pinned}}}}]}}


def volumes(runtime: dict[str, Any], namespace: str, trainjob_name: str) -> list[dict[str, Any]]:
    """A PersistentVolume reserved for each claim the runtime's volumeClaimPolicies make for the TrainJob's JobSet
    (JobSet names it ``<template>-<jobset>``, the JobSet is named after the TrainJob), of the claim's size and access
    modes, no StorageClass (the claims name none)."""
    made = []
    for policy in runtime["spec"]["template"]["spec"].get("volumeClaimPolicies") or []:
        for template in policy.get("templates") or []:
            claim = f"{template['metadata']['name']}-{trainjob_name}"
            name = f"{namespace}-{claim}"[:253]
            made.append({"apiVersion": "v1", "kind": "PersistentVolume",
                         "metadata": {"name": name, "labels": {VOLUMES_LABEL: namespace}},
                         "spec": {"capacity": {"storage": template["spec"]["resources"]["requests"]["storage"]},
                                  "accessModes": template["spec"]["accessModes"],
                                  "hostPath": {"path": f"/tmp/kai-fn-testbed/{name}"},
                                  "claimRef": {"namespace": namespace, "name": claim}}})
    return made


def delete_volumes(bed: Testbed, namespace: str) -> None:
    bed.kubectl("delete", "pv", "-l", f"{VOLUMES_LABEL}={namespace}", "--ignore-not-found", "--wait=false",
                check=False)


# -- how a TrainJob fared ----------------------------------------------------------------------------------------

@dataclass
class Watched:
    """``bound``: every GPU pod on a node (``seconds`` after ``began``); ``held_at_most``: the most GPU pods seen
    bound while not all were; ``initializers``: what was wrong with the initializers when the first GPU pod
    appeared (empty: all there and Succeeded)."""

    bound: bool
    seconds: float | None
    placed: int
    pods: int
    held_at_most: int = 0
    initializers: str = ""


def pods_of(core: client.CoreV1Api, ns: str, trainjob_name: str) -> list[client.V1Pod]:
    return [p for p in core.list_namespaced_pod(ns, label_selector=f"{JOBSET_LABEL}={trainjob_name}").items
            if k8s.meta(p).deletion_timestamp is None]


def _job(p: client.V1Pod) -> str:
    return (k8s.meta(p).labels or {}).get(REPLICATED_JOB_LABEL, "")


def watch(bed: Testbed, ns: str, name: str, runtime: dict[str, Any], want: int, began: float, deadline_s: float,
          until: Callable[[list[client.V1Pod]], bool] | None = None) -> Watched:
    """Polls the TrainJob's pods until its ``want`` GPU pods are all bound (or ``until`` says stop, or the
    deadline), noting the most GPU pods bound short of all, and the initializers' state when a GPU pod first exists."""
    core = client.CoreV1Api(bed.api)
    gpu_jobs, inits = gpu_jobs_of(runtime), initializers_of(runtime)
    seen = Watched(False, None, 0, 0, initializers="no GPU pod seen")
    while time.monotonic() - began < deadline_s:
        pods = pods_of(core, ns, name)
        gpu = [p for p in pods if _job(p) in gpu_jobs]
        if gpu and seen.initializers == "no GPU pod seen":
            done = sorted(_job(p) for p in pods if _job(p) in inits and k8s.pod_status(p).phase == "Succeeded")
            seen.initializers = "" if done == sorted(inits) else \
                f"a GPU pod existed while only {done or 'no'} initializers had Succeeded (of {list(inits)})"
        seen.placed, seen.pods = sum(1 for p in gpu if k8s.pod_spec(p).node_name), len(gpu)
        if len(gpu) >= want and seen.placed == len(gpu):
            seen.bound, seen.seconds = True, time.monotonic() - began
            return seen
        seen.held_at_most = max(seen.held_at_most, seen.placed)
        if until and until(pods):
            return seen
        time.sleep(POLL_S)
    return seen


def podgroups_of(bed: Testbed, ns: str, uid: str) -> list[tuple[str, int, str]]:
    """The KAI PodGroups of the namespace made for TrainJob ``uid`` (kai_fn's are owned by it; KAI's podgrouper's
    by the JobSet): name, minMember, queue."""
    found = k8s.items(client.CustomObjectsApi(bed.api).list_namespaced_custom_object(*PODGROUPS, ns, "podgroups"))
    return sorted((pg["metadata"]["name"], pg["spec"].get("minMember"), pg["spec"].get("queue"))
                  for pg in found if uid in pg["metadata"]["name"]
                  or any(o.get("uid") == uid for o in pg["metadata"].get("ownerReferences") or []))


def planned(bed: Testbed, ns: str, name: str) -> list[tuple[str, int, str]]:
    """kai_fn's plan (:func:`kai_fn.core.plan.plan`, default settings) for the live TrainJob and its runtime."""
    objs = client.CustomObjectsApi(bed.api)
    job = k8s.obj(objs.get_namespaced_custom_object(*TRAINER, ns, "trainjobs", name))
    rt = k8s.obj(objs.get_cluster_custom_object(*TRAINER, "clustertrainingruntimes", job["spec"]["runtimeRef"]["name"]))
    result = plan(parse(TrainJob, job), parse(Runtime, rt))
    return sorted((pg["metadata"]["name"], pg["spec"]["minMember"], pg["spec"]["queue"]) for pg in result.podgroups)


def kai_says_why(bed: Testbed, ns: str, runtime: dict[str, Any], pods: list[client.V1Pod]) -> bool:
    """KAI wrote a scheduling condition on the PodGroup of a GPU pod that waits: it tried that gang and left it
    waiting. Not every GPU pod need exist: MPI's launcher-as-node runtimes make their launcher only once the nodes are
    Ready, and until then a placeholder holds its place in the nodes' PodGroup (docs/reservation.md)."""
    gpu = [p for p in pods if _job(p) in gpu_jobs_of(runtime)]
    waiting = {(k8s.meta(p).annotations or {}).get(keys.KAI_POD_GROUP_ANNOTATION) for p in gpu
               if not k8s.pod_spec(p).node_name}
    if not waiting - {None}:
        return False
    found = k8s.items(client.CustomObjectsApi(bed.api).list_namespaced_custom_object(*PODGROUPS, ns, "podgroups"))
    return any((pg.get("status") or {}).get("schedulingConditions") for pg in found
               if pg["metadata"]["name"] in waiting)


KEYS = {"torch-distributed": "torch", "torch-distributed-with-cache": "cache", "deepspeed-distributed": "ds",
        "mlx-distributed": "mlx", "jax-distributed": "jax", "xgboost-distributed": "xgb",
        "torchtune-llama3.2-1b": "tt1b", "torchtune-llama3.2-3b": "tt3b", "torchtune-qwen2.5-1.5b": "ttqw"}


def key_of(name: str) -> str:
    """A short name for the runtime's TrainJobs and pool (JobSet's Job names must stay within 63 characters)."""
    return KEYS.get(name) or name.split("-")[0][:8]


@dataclass
class Run:
    """One runtime's scenario: a first TrainJob (``<key>-a``) on a pool that fits it and, when contended, one more
    node when its gang has more than one GPU pod (room for part of a second); then a second one (``<key>-b``) while
    the first holds the pool, then the first deleted."""

    runtime: str
    path: str  # kai-fn or podgrouper
    num_nodes: int
    want: int  # GPU pods that must run at once
    pool_nodes: int
    first: Watched | None = None
    podgroups: list[tuple[str, int, str]] = field(default_factory=list)
    planned: list[tuple[str, int, str]] = field(default_factory=list)
    claims: dict[str, str] = field(default_factory=dict)  # the first's claims -> their bind-completed annotation
    waiting: Watched | None = None  # the second while the first holds the pool
    said_s: float | None = None  # the second's create to KAI's reason for its wait, first seen
    second: Watched | None = None  # the second after the first is deleted
    seconds: float = 0.0
    error: str = ""


def uid_of(bed: Testbed, ns: str, name: str) -> str:
    return str(k8s.obj(client.CustomObjectsApi(bed.api).get_namespaced_custom_object(
        *TRAINER, ns, "trainjobs", name))["metadata"]["uid"])


def claims_of(bed: Testbed, ns: str, names: set[str]) -> dict[str, str]:
    return {k8s.name(c): (k8s.meta(c).annotations or {}).get("pv.kubernetes.io/bind-completed", "no")
            for c in client.CoreV1Api(bed.api).list_namespaced_persistent_volume_claim(ns).items
            if k8s.name(c) in names}


def scenario(bed: Testbed, runtime: dict[str, Any], ns: str, pool: str, path: str, *, contention: bool = True,
             deadline_s: float = 60.0, hold_s: float = 3.0) -> Run:
    """Runs one runtime's scenario in namespace ``ns`` (shared: names are the runtime's key) on simnodes pool
    ``pool`` (made here; the caller deletes it, the namespace, and :func:`delete_volumes`). The
    ClusterTrainingRuntime must exist (:func:`as_user`)."""
    began = time.monotonic()
    n = num_nodes_for(runtime)
    want = gpu_pods_for(runtime, n)
    run = Run(runtime["metadata"]["name"], path, n, want, want + (1 if contention and want > 1 else 0))
    first, second = f"{key_of(run.runtime)}-a", f"{key_of(run.runtime)}-b"
    objs = client.CustomObjectsApi(bed.api)
    try:
        bed.nodes(f"{run.pool_nodes}x{GPUS_PER_POD}", pool)
        pvs = [*volumes(runtime, ns, first), *volumes(runtime, ns, second)]
        if pvs:
            bed.apply(pvs)
        claims = {pv["spec"]["claimRef"]["name"] for pv in pvs}
        t0 = time.monotonic()
        objs.create_namespaced_custom_object(*TRAINER, ns, "trainjobs", trainjob(first, runtime, pool, n))
        run.first = watch(bed, ns, first, runtime, want, t0, deadline_s)
        run.podgroups = podgroups_of(bed, ns, uid_of(bed, ns, first))
        run.planned = planned(bed, ns, first)
        run.claims = claims_of(bed, ns, claims)
        if not (contention and run.first.bound):
            return run
        t1 = time.monotonic()
        objs.create_namespaced_custom_object(*TRAINER, ns, "trainjobs", trainjob(second, runtime, pool, n))
        said: list[float] = []

        def settled(pods: list[client.V1Pod]) -> bool:
            """KAI has tried the second gang and said why it waits, and ``hold_s`` more passed (not one GPU pod
            may bind meanwhile)."""
            if not said and kai_says_why(bed, ns, runtime, pods):
                said.append(time.monotonic())
            return bool(said) and time.monotonic() - said[0] >= hold_s

        run.waiting = watch(bed, ns, second, runtime, want, t1, deadline_s, until=settled)
        run.said_s = said[0] - t1 if said else None
        objs.delete_namespaced_custom_object(*TRAINER, ns, "trainjobs", first)
        run.second = watch(bed, ns, second, runtime, want, time.monotonic(), deadline_s)
        return run
    except ApiException as e:
        run.error = f"{e.status} {e.reason}: {e.body}"[:400]
        return run
    finally:
        run.seconds = time.monotonic() - began
