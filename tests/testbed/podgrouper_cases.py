"""TrainJobs and clusters for the differential test against KAI's podgrouper (test_podgrouper_parity.py).

A :class:`Case` is what KAI's podgrouper reads: the TrainJob, the runtime (whose ``spec.template.metadata`` Trainer
puts on the JobSet), the trainer's pod template, the Job templates' topology, the PriorityClasses that exist and KAI's
defaults ConfigMap (not configured, configured and missing, unreadable, or a list of per-kind defaults). It renders
the same TrainJob for kai_fn's planner and, as Trainer and JobSet would make them, the JobSet, a Job and a pod for KAI.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from kai_fn.core.owner_metadata import KaiCluster

NS, NAME, UID = "team-a", "llm", "7d3c1a52-0f7e-4b7e-9a1d-3c5e2f9b8a10"
JOBSET_UID = "5a1e9c07-2b3d-4f6a-8c9e-0d1f2a3b4c5d"
RUNTIME_QUEUE = "rt-queue"  # kai_fn's own source (the runtime's label): what it uses where KAI says default-queue
CLASSES = ("train", "build", "inference")
TOPOLOGY = ("kai.scheduler/topology", "kai.scheduler/topology-required-placement",
            "kai.scheduler/topology-preferred-placement")
NODE_POOL = "kai.scheduler/node-pool"


@dataclass(frozen=True)
class Case:
    job_labels: dict[str, str] = field(default_factory=dict)
    job_notes: dict[str, str] = field(default_factory=dict)
    jobset_labels: dict[str, str] = field(default_factory=dict)  # the runtime template's metadata
    jobset_notes: dict[str, str] = field(default_factory=dict)
    pod_labels: dict[str, str] = field(default_factory=dict)
    pod_notes: dict[str, str] = field(default_factory=dict)
    pod_priority: str | None = None  # spec.priorityClassName
    node_topology: dict[str, str] = field(default_factory=dict)  # the trainer Job template's annotations
    node_replicas: int = 1
    initializer: bool = False  # a dataset initializer the trainer dependsOn (kai_fn: a wave of its own)
    classes: tuple[str, ...] = CLASSES
    defaults: str = "none"  # none | missing | unreadable | types
    types: tuple[dict[str, str], ...] = ()
    node_pool_key: str = NODE_POOL

    def cluster(self) -> KaiCluster:
        return KaiCluster(priority_classes=frozenset(self.classes), defaults_configured=self.defaults != "none",
                          defaults=self.configmap(), node_pool_label=self.node_pool_key)

    def configmap(self) -> dict[str, str] | None:
        if self.defaults == "unreadable":
            return {"types": "[{not json"}
        return {"types": json.dumps(list(self.types))} if self.defaults == "types" else None

    def trainjob(self) -> dict[str, Any]:
        return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": NAME, "namespace": NS, "uid": UID, "labels": dict(self.job_labels),
                             "annotations": dict(self.job_notes)},
                "spec": {"runtimeRef": {"name": "rt"}}}

    def replicated_jobs(self) -> list[dict[str, Any]]:
        pod = {"metadata": {"labels": dict(self.pod_labels), "annotations": dict(self.pod_notes)},
               "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "node", "image": "x"}]}}
        if self.pod_priority is not None:
            pod["spec"]["priorityClassName"] = self.pod_priority
        node = {"name": "node", "replicas": self.node_replicas,
                "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"},
                                          "annotations": dict(self.node_topology)},
                             "spec": {"parallelism": 2, "template": pod}}}
        if not self.initializer:
            return [node]
        init = {"name": "dataset-initializer",
                "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
                             "spec": {"template": {"spec": {"schedulerName": "kai-scheduler",
                                                             "containers": [{"name": "dataset-initializer", "image": "x"}]}}}}}
        node["dependsOn"] = [{"name": "dataset-initializer", "status": "Complete"}]
        return [init, node]

    def runtime(self) -> dict[str, Any]:
        return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                "metadata": {"name": "rt", "labels": {"kai.scheduler/queue": RUNTIME_QUEUE}},
                "spec": {"mlPolicy": {"numNodes": 2, "torch": {}},
                         "template": {"metadata": {"labels": dict(self.jobset_labels),
                                                   "annotations": dict(self.jobset_notes)},
                                      "spec": {"replicatedJobs": self.replicated_jobs()}}}}

    def oracle_input(self) -> dict[str, Any]:
        """The objects as they are once Trainer, JobSet and Job made them: a trainer pod, its Job, its JobSet."""
        jobs = self.replicated_jobs()
        jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                  "metadata": {"name": NAME, "namespace": NS, "uid": JOBSET_UID, "labels": dict(self.jobset_labels),
                               "annotations": dict(self.jobset_notes),
                               "ownerReferences": [_owner("trainer.kubeflow.org/v1alpha1", "TrainJob", NAME, UID)]},
                  "spec": {"replicatedJobs": copy.deepcopy(jobs)}}
        node = next(rj for rj in jobs if rj["name"] == "node")
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": f"{NAME}-node-0", "namespace": NS, "uid": "job-uid",
                            "ownerReferences": [_owner("jobset.x-k8s.io/v1alpha2", "JobSet", NAME, JOBSET_UID)]}}
        template = node["template"]["spec"]["template"]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{NAME}-node-0-0", "namespace": NS, "uid": "pod-uid",
                            "labels": {**template["metadata"]["labels"], "jobset.sigs.k8s.io/replicatedjob-name": "node",
                                       "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/jobset-name": NAME},
                            "annotations": dict(template["metadata"]["annotations"]),
                            "ownerReferences": [_owner("batch/v1", "Job", f"{NAME}-node-0", "job-uid")]},
               "spec": template["spec"]}
        return {"trainJob": self.trainjob(), "jobSet": jobset, "job": job, "pod": pod,
                "priorityClasses": list(self.classes), "defaultsConfigured": self.defaults != "none",
                "defaults": self.configmap(), "nodePoolLabelKey": self.node_pool_key}


def _owner(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


_PRIORITY = st.sampled_from(["train", "build", "inference", "gone", ""])
_PREEMPT = st.sampled_from(["preemptible", "non-preemptible", ""])
_DELAY = st.sampled_from(["30s", "90s", "1m", "1.5h", "0", "-5s", "soon", "250ms"])
_STALE = st.sampled_from(["-1s", "45s", "2m", "0", "later"])
_QUEUE = st.sampled_from(["q-team", "q-other"])
_WORD = st.sampled_from(["a", "b", "c"])


def _maybe(key: str, values: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, str]]:
    return st.one_of(st.just({}), values.map(lambda v: {key: v}))


def _labels() -> st.SearchStrategy[dict[str, str]]:
    """The keys KAI reads from an owner's or a pod's labels, and one it only copies."""
    parts = [_maybe("priorityClassName", _PRIORITY), _maybe("kai.scheduler/preemptibility", _PREEMPT),
             _maybe("kai.scheduler/queue", _QUEUE), _maybe("project", _WORD), _maybe("team", _WORD),
             _maybe("user", _WORD)]
    return st.tuples(*parts).map(lambda ds: {k: v for d in ds for k, v in d.items()})


def _notes() -> st.SearchStrategy[dict[str, str]]:
    parts = [_maybe("kai.scheduler/preemption-delay", _DELAY), _maybe("kai.scheduler/staleness-grace-period", _STALE),
             _maybe("note", _WORD), _maybe("user", _WORD)]
    return st.tuples(*parts).map(lambda ds: {k: v for d in ds for k, v in d.items()})


def _topology() -> st.SearchStrategy[dict[str, str]]:
    """A topology and its levels; a level is never drawn without the topology, nor the topology without a level
    (kai_fn refuses both on purpose: tests/core/test_plan.py, tests/core/test_segments.py; KAI never places a gang
    whose Topology names no level)."""
    levels = st.tuples(_maybe(TOPOLOGY[1], st.sampled_from(["rack", "zone"])),
                       _maybe(TOPOLOGY[2], st.sampled_from(["kubernetes.io/hostname", "rack"]))).filter(
        lambda ls: bool(ls[0] or ls[1]))
    return st.one_of(st.just({}), levels.map(lambda ls: {TOPOLOGY[0]: "racks", **ls[0], **ls[1]}))


def _type_default() -> st.SearchStrategy[dict[str, str]]:
    kind = st.sampled_from([("TrainJob", "trainer.kubeflow.org"), ("TrainJob", ""), ("JobSet", "jobset.x-k8s.io"),
                            ("JobSet", ""), ("Deployment", "apps")])
    return st.tuples(kind, _PRIORITY, st.sampled_from(["", "preemptible", "Non-Preemptible", "sometimes"])).map(
        lambda t: {"typeName": t[0][0], "group": t[0][1], "priorityName": t[1], "preemptibility": t[2]})


def cases() -> st.SearchStrategy[Case]:
    return st.builds(
        Case, job_labels=_labels(), job_notes=st.tuples(_notes(), _topology()).map(lambda t: {**t[0], **t[1]}),
        jobset_labels=_labels(), jobset_notes=st.one_of(st.just({}), _notes()),
        pod_labels=st.tuples(_labels(), _maybe(NODE_POOL, st.sampled_from(["pool-a", "pool-b"]))).map(
            lambda t: {**t[0], **t[1]}),
        pod_notes=_notes(), pod_priority=st.one_of(st.none(), _PRIORITY), node_topology=_topology(),
        node_replicas=st.sampled_from([1, 1, 2]), initializer=st.booleans(),
        classes=st.lists(st.sampled_from(CLASSES), unique=True).map(tuple),
        defaults=st.sampled_from(["none", "missing", "unreadable", "types", "types"]),
        types=st.lists(_type_default(), max_size=3).map(tuple),
        node_pool_key=st.sampled_from([NODE_POOL, NODE_POOL, "pool"]),
    )
