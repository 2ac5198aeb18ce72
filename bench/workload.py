"""The objects the benchmark seeds and the events it sends, shaped like the samples in ``samples/``.

A TrainJob in scope is ``samples/events/resource-add.json``'s object (managedFields included, as the watch
sends it) under a fresh name and uid; its JobSet is ``samples/cluster/jobset-llama-finetune.yaml`` owned by it.
"""
from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import yaml

from kai_fn.core import keys
from kai_fn.local.emulator import Emulator, naming
from kai_fn.local.process import REPO

NAMESPACE = "bench"
SAMPLES = REPO / "samples"
KAI_RUNTIME = "torch-distributed-kai"  # labelled kai.scheduler/queue: in scope
PLAIN_RUNTIME = "torch-distributed"  # no label, no podGroupPolicy: out of scope
QUEUE_LABEL = "kai.scheduler/queue"


def _yaml(name: str) -> dict[str, Any]:
    return yaml.safe_load((SAMPLES / "cluster" / f"{name}.yaml").read_text())


_TRAINJOB = json.loads((SAMPLES / "events" / "resource-add.json").read_text())["body"]
_JOBSET = _yaml("jobset-llama-finetune")


def seed_cluster(api: Emulator) -> None:
    """The namespace, opted in, and the runtimes and Queues every run needs (the function reads both: the Queues
    for its queue pre-check)."""
    api.opt_in(NAMESPACE)
    for name in ("clustertrainingruntime-torch-kai", "clustertrainingruntime-torch",
                 "queue-default-parent", "queue-team-a"):
        api.put(_yaml(name))


def trainjob(name: str, *, in_scope: bool = True) -> dict[str, Any]:
    obj = copy.deepcopy(_TRAINJOB)
    meta = obj["metadata"]
    meta.update(name=name, namespace=NAMESPACE, uid=str(uuid.uuid4()))
    for drop in ("resourceVersion", "creationTimestamp", "generation"):
        meta.pop(drop, None)
    if not in_scope:
        meta.get("labels", {}).pop(QUEUE_LABEL, None)
        obj["spec"]["runtimeRef"]["name"] = PLAIN_RUNTIME
    return obj


def jobset_for(job: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(_JOBSET)
    meta = obj["metadata"]
    meta.update(name=job["metadata"]["name"], namespace=NAMESPACE, uid=str(uuid.uuid4()))
    meta["labels"]["trainer.kubeflow.org/trainjob-name"] = job["metadata"]["name"]
    meta["ownerReferences"][0].update(name=job["metadata"]["name"], uid=job["metadata"]["uid"])
    for rj in obj["spec"]["replicatedJobs"]:  # the sample's names are its own TrainJob's: named again for this one
        (rj["template"]["spec"]["template"].get("metadata") or {}).get("annotations", {}).pop(
            keys.KAI_POD_GROUP_ANNOTATION, None)
    obj["spec"]["suspend"] = bool((job.get("spec") or {}).get("suspend"))  # Trainer's, from its TrainJob
    return naming.named(obj)


def seed_new(api: Emulator, prefix: str, count: int) -> list[dict[str, Any]]:
    """``count`` suspended in-scope TrainJobs, each with its suspended JobSet; returns the TrainJobs as stored
    (what the watch would send in a resource-mode add event). Direct state access: no API call is logged."""
    stored = []
    for i in range(count):
        job = api.put(trainjob(f"{prefix}-{i:05d}"))
        api.put(jobset_for(job))
        stored.append(job)
    return stored
