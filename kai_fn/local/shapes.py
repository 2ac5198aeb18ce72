"""Every runtime shape Trainer has, as TrainingRuntimes for the chain, and how one TrainJob of each fared on it.

Shared by the chain tier (each shape bound whole through kai_fn, and a second gang held back whole while the first
holds the nodes) and ``python -m bench shapes`` (the same shapes through kai_fn and through KAI's podgrouper alone,
side by side). A shape's GPU pods ask for a whole 8-GPU node each; initializers and MPI's separate launcher ask for
CPU only. Pods stay on the scenario's own simnodes pool.
"""
from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from kai_fn.local import k8s
from kai_fn.local.chain import POOL_LABEL, TRAINER, Testbed

GPU = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "8"}
CPU = {"cpu": "500m", "memory": "512Mi"}
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETE_AFTER = "kai-fn.testbed/complete-after"  # testbed/kwok: a Running pod goes Succeeded that long after


def _job(name: str, container: str, requests: dict[str, str], *, ancestor: str | None,
         depends_on: tuple[tuple[str, str], ...] = (), parallelism: int | None = None, replicas: int | None = None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": {"annotations": dict(annotations)} if annotations else {},
                           "spec": {"schedulerName": "kai-scheduler", "restartPolicy": "Never",
                                    "containers": [{"name": container, "image": "testbed/none",
                                                    "resources": {"requests": dict(requests),
                                                                  "limits": {k: v for k, v in requests.items()
                                                                             if k == "nvidia.com/gpu"}}}]}}
    spec: dict[str, Any] = {"template": pod}
    if parallelism is not None:
        spec["parallelism"] = spec["completions"] = parallelism
    job: dict[str, Any] = {"name": name, "template": {"spec": spec}}
    if ancestor:
        job["template"]["metadata"] = {"labels": {ANCESTOR: ancestor}}
    if depends_on:
        job["dependsOn"] = [{"name": n, "status": s} for n, s in depends_on]
    if replicas is not None:
        job["replicas"] = replicas
    return job


def initializer(name: str, runs_for: str | None = None) -> dict[str, Any]:
    return _job(name, name, CPU, ancestor=name, annotations={COMPLETE_AFTER: runs_for} if runs_for else None)


def node(*, depends_on: tuple[tuple[str, str], ...] = (), finishes_after: str | None = None) -> dict[str, Any]:
    return _job("node", "node", GPU, ancestor="trainer", depends_on=depends_on,
                annotations={COMPLETE_AFTER: finishes_after} if finishes_after else None)


def launcher(requests: dict[str, str]) -> dict[str, Any]:
    """MPI's launcher, which JobSet creates once the nodes are Ready (Trainer's mpi runtimes)."""
    return _job("launcher", "node", requests, ancestor="trainer", depends_on=(("node", "Ready"),))


@dataclass(frozen=True)
class Shape:
    """A runtime shape: its replicatedJobs and mlPolicy, the TrainJob's numNodes, the nodes one TrainJob fills
    (``NxG`` for simnodes), its trainer replicatedJobs and how many pods they have (the gang that must bind whole;
    initializers come and go before it)."""

    name: str
    jobs: tuple[dict[str, Any], ...]
    ml_policy: dict[str, Any] | None
    num_nodes: int | None
    nodes: str
    trainer_jobs: tuple[str, ...] = ("node",)
    trainer_pods: int = 2
    stages: int = 1  # the PodGroups kai_fn makes: one per start wave (a Ready-dependent wave joins its predecessor's)

    def runtime(self, namespace: str, pool: str, name: str | None = None) -> dict[str, Any]:
        jobs = []
        for job in self.jobs:
            job = copy.deepcopy(job)
            job["template"]["spec"]["template"]["spec"]["nodeSelector"] = {POOL_LABEL: pool}
            jobs.append(job)
        spec: dict[str, Any] = {"template": {"spec": {"replicatedJobs": jobs}}}
        if self.ml_policy is not None:
            spec["mlPolicy"] = self.ml_policy
        return {"apiVersion": f"{TRAINER[0]}/{TRAINER[1]}", "kind": "TrainingRuntime",
                "metadata": {"name": name or self.name, "namespace": namespace,
                             "labels": {"kai.scheduler/queue": "default-queue"}},
                "spec": spec}


INITIALIZERS = (("dataset-initializer", "Complete"), ("model-initializer", "Complete"))

# As Trainer's own runtimes: mlPolicy.numNodes 1, the TrainJob's numNodes sets the size (for MPI, of `node` only:
# the launcher, a `trainer` step too, keeps the policy's 1).
SHAPES = (
    Shape("flat-torch", (node(),), {"numNodes": 1, "torch": {}}, 2, "2x8"),
    Shape("torch-initializers", (initializer("dataset-initializer"), initializer("model-initializer"),
                                 node(depends_on=INITIALIZERS)), {"numNodes": 1, "torch": {}}, 2, "2x8", stages=2),
    # MPI: the launcher's place is held in the nodes' gang (kai_fn/core/reserve.py): one PodGroup, nodes + launcher.
    Shape("mpi-launcher-apart", (node(), launcher(CPU)), {"numNodes": 1, "mpi": {"runLauncherAsNode": False}}, 2,
          "2x8", ("node", "launcher"), 3),
    Shape("mpi-launcher-as-node", (node(), launcher(GPU)), {"numNodes": 1, "mpi": {"runLauncherAsNode": True}}, 3,
          "3x8", ("node", "launcher"), 3),
    Shape("jax", (node(),), {"numNodes": 1, "jax": {}}, 2, "2x8"),
    Shape("replicas", (_job("worker", "worker", GPU, ancestor=None, parallelism=1, replicas=2),), None, None, "2x8",
          ("worker",)),
)


# -- how a TrainJob fared ----------------------------------------------------------------------------------------

@dataclass
class Fared:
    """``bound`` every trainer pod on a node; ``partly bound`` some but not all at the deadline; ``deadlocked``
    none."""

    outcome: str
    seconds: float | None  # creation to every trainer pod bound
    bound: int
    pods: int
    note: str = ""


def trainer_pods(core: client.CoreV1Api, ns: str, trainjob: str, shape: Shape) -> list[client.V1Pod]:
    found = core.list_namespaced_pod(ns, label_selector=f"{JOBSET_LABEL}={trainjob}").items
    return [p for p in found if k8s.meta(p).deletion_timestamp is None
            and (k8s.meta(p).labels or {}).get(REPLICATED_JOB_LABEL) in shape.trainer_jobs]


def submit(bed: Testbed, ns: str, name: str, shape: Shape, runtime: str) -> float:
    job: dict[str, Any] = {"apiVersion": f"{TRAINER[0]}/{TRAINER[1]}", "kind": "TrainJob",
                           "metadata": {"name": name, "namespace": ns},
                           "spec": {"runtimeRef": {"name": runtime, "kind": "TrainingRuntime", "apiGroup": TRAINER[0]}}}
    if shape.num_nodes is not None:
        job["spec"]["trainer"] = {"numNodes": shape.num_nodes}
    began = time.monotonic()
    for _ in range(40):
        try:
            client.CustomObjectsApi(bed.api).create_namespaced_custom_object(*TRAINER, ns, "trainjobs", job)
            return began
        except client.ApiException as e:
            # Trainer's webhook checks the runtime in its informer's cache, which may not have the one just made yet.
            if e.status != 403 or "must be created before the TrainJob" not in str(e.body):
                raise
        time.sleep(0.25)
    raise RuntimeError(f"Trainer's webhook never saw {ns}/{runtime} (TrainingRuntime)")


def watch_fare(bed: Testbed, ns: str, name: str, shape: Shape, began: float, deadline_s: float,
               on_poll: Callable[[list[client.V1Pod]], None] | None = None) -> Fared:
    """Poll until every trainer pod of the TrainJob is bound, or the deadline."""
    core = client.CoreV1Api(bed.api)
    want = shape.trainer_pods
    pods: list[client.V1Pod] = []
    while time.monotonic() - began < deadline_s:
        pods = trainer_pods(core, ns, name, shape)
        if on_poll:
            on_poll(pods)
        if len(pods) >= want and all(k8s.pod_spec(p).node_name for p in pods):
            return Fared("bound", time.monotonic() - began, len(pods), len(pods))
        time.sleep(0.2)
    placed = sum(1 for p in pods if k8s.pod_spec(p).node_name)
    return Fared("partly bound" if placed else "deadlocked", None, placed, len(pods))
