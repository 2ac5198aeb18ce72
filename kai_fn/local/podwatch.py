"""Watches a namespace's pods on a live cluster and remembers what each looked like when first seen, when bound and
when gone.

Shared by ``demo --real`` (the live table), the chain benchmark (time to all pods bound) and the fault scenarios
(a pod that names a PodGroup which does not exist at the moment the pod is seen). The watch survives an API server
restart: on any error it lists again and watches from there, so a pod missed in the gap is still seen (and one
deleted in the gap is gone).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_fn.local import k8s

SP_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
KAI_GROUP_ANNOTATION = "pod-group-name"
# Where a pod names its PodGroup, and that PodGroup's API: KAI's annotation, or scheduler-plugins' label.
PODGROUP_APIS = {KAI_GROUP_ANNOTATION: ("scheduling.run.ai", "v2alpha2", "podgroups"),
                 SP_GROUP_LABEL: ("scheduling.x-k8s.io", "v1alpha1", "podgroups")}
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"


@dataclass
class PodSeen:
    name: str
    jobset: str | None
    group: str | None
    first_seen: float
    node: str | None = None
    bound_at: float | None = None
    phase: str = "Pending"
    gone_at: float | None = None  # when its deletion was seen
    labels: dict[str, str] = field(default_factory=dict)  # as first seen


@dataclass
class PodWatch:
    """Start with ``start()``; ``pods`` and ``violations`` fill in as the cluster changes; ``stop()`` ends it."""

    api: client.ApiClient
    namespace: str
    check_groups: bool = False
    pods: dict[str, PodSeen] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    errors: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._groups_seen: set[str] = set()
        self._thread = threading.Thread(target=self._run, name=f"podwatch-{self.namespace}", daemon=True)

    def start(self) -> PodWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def __enter__(self) -> PodWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def snapshot(self) -> list[PodSeen]:
        with self._lock:
            return sorted((PodSeen(**vars(p)) for p in self.pods.values()), key=lambda p: p.name)

    def by_jobset(self) -> dict[str, list[PodSeen]]:
        out: dict[str, list[PodSeen]] = {}
        for pod in self.snapshot():
            out.setdefault(pod.jobset or "-", []).append(pod)
        return out

    def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        while not self._stop.is_set():
            try:
                listed = core.list_namespaced_pod(self.namespace, _request_timeout=10)
                for pod in listed.items:
                    self._saw(k8s.as_json(self.api, pod))
                self._gone_unless({k8s.name(pod) for pod in listed.items})
                stream = k8s.Stream(core.list_namespaced_pod, self.namespace,
                                    resource_version=(listed.metadata or client.V1ListMeta()).resource_version,
                                    timeout_seconds=5, _request_timeout=10)
                for event in stream:
                    self._saw(k8s.as_json(self.api, event["object"]), gone=event["type"] == "DELETED")
                    if self._stop.is_set():
                        break
            except Exception:  # API server gone for a moment (restart scenario), or a watch that expired
                self.errors += 1
                self._stop.wait(0.5)

    def _gone_unless(self, listed: set[str]) -> None:
        """Pods deleted while the watch was down (a relist no longer has them)."""
        now = time.monotonic()
        with self._lock:
            for name, seen in self.pods.items():
                if name not in listed and seen.gone_at is None:
                    seen.gone_at = now

    def _saw(self, pod: dict[str, Any], gone: bool = False) -> None:
        now = time.monotonic()
        meta, spec = pod["metadata"], pod.get("spec") or {}
        labels = meta.get("labels") or {}
        name = meta["name"]
        key = KAI_GROUP_ANNOTATION if KAI_GROUP_ANNOTATION in (meta.get("annotations") or {}) else SP_GROUP_LABEL
        group = (meta.get("annotations") or {}).get(key) or labels.get(key)
        with self._lock:
            seen = self.pods.get(name)
            if seen is None:
                seen = self.pods[name] = PodSeen(name, labels.get(JOBSET_LABEL), group, now, labels=dict(labels))
            newly_bound = bool(spec.get("nodeName")) and seen.bound_at is None
            if newly_bound:
                seen.node, seen.bound_at = spec["nodeName"], now
            seen.phase = (pod.get("status") or {}).get("phase") or seen.phase
            if gone and seen.gone_at is None:
                seen.gone_at = now
        # A pod may exist before its PodGroup (KAI leaves it unbound); bound before it, it escaped its gang.
        if self.check_groups and newly_bound and seen.group and not self._group_exists(
                PODGROUP_APIS[key], seen.group, _scheduled(pod) or meta.get("creationTimestamp")):
            self.violations.append(f"pod {name} was bound while its PodGroup {seen.group} did not exist")

    def _group_exists(self, api: tuple[str, str, str], name: str, pod_created: str | None) -> bool:
        """The PodGroup exists now and was not made after ``pod_created`` (the pod's binding; timestamps are whole
        seconds: a later second is proof, the same second is not)."""
        if name in self._groups_seen:
            return True
        objs = client.CustomObjectsApi(self.api)
        for _ in range(20):  # the API server may be restarting: a 404 is an answer, an outage is not
            try:
                group = k8s.obj(objs.get_namespaced_custom_object(api[0], api[1], self.namespace, api[2], name,
                                                                  _request_timeout=5))
                if pod_created and group["metadata"]["creationTimestamp"][:19] > pod_created[:19]:  # UTC, to the second
                    return False
                self._groups_seen.add(name)
                return True
            except ApiException as e:
                if e.status == 404:
                    return False
            except Exception:
                pass
            time.sleep(0.5)
        self.errors += 1
        return True  # unknown, not a proven violation


def _scheduled(pod: dict[str, Any]) -> str | None:
    """When the pod was bound (its PodScheduled condition turned True), as the API server wrote it."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            when = condition.get("lastTransitionTime")
            return str(when) if when is not None else None
    return None
