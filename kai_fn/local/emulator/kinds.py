"""The kinds the emulator serves, as the upstream CRDs and core/v1 declare them, and the media types it knows."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

Validator = Callable[[dict[str, Any]], list[str]]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
WRITE_VERBS = frozenset({"create", "patch", "update", "delete", "deletecollection"})
# Groups served by kube-apiserver itself: their kinds take strategic merge patches, as the core group's do.
BUILTIN_GROUPS = frozenset({"", "coordination.k8s.io", "scheduling.k8s.io"})


@dataclasses.dataclass(frozen=True)
class KindInfo:
    """What the API server knows about a resource; ``status`` is whether it has a status subresource."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    status: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def custom(self) -> bool:
        """Custom resources take no strategic merge patch and need resourceVersion on update."""
        return self.group not in BUILTIN_GROUPS

    @property
    def resource(self) -> str:
        """The qualified resource as it appears in API server messages (``podgroups.scheduling.run.ai``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


def _kinds(*infos: KindInfo) -> Mapping[tuple[str, str], KindInfo]:
    return MappingProxyType({(i.api_version, i.kind): i for i in infos})


# Scope and status subresources as declared by the upstream CRDs in ../shared/crds.
KINDS: Mapping[tuple[str, str], KindInfo] = _kinds(
    KindInfo("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs", True, status=True),
    KindInfo("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime", "trainingruntimes", True),
    KindInfo("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes", False),
    KindInfo("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", True, status=True),
    KindInfo("scheduling.run.ai", "v2alpha2", "PodGroup", "podgroups", True, status=True),
    KindInfo("scheduling.run.ai", "v2", "Queue", "queues", False, status=True),
    KindInfo("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups", True, status=True),
    KindInfo("kai.scheduler", "v1alpha1", "Topology", "topologies", False),
    KindInfo("", "v1", "Event", "events", True),
    KindInfo("", "v1", "Pod", "pods", True, status=True),  # stored and listed only: no kubelet, no pod validation
    KindInfo("", "v1", "Namespace", "namespaces", False, status=True),
    KindInfo("", "v1", "Pod", "pods", True, status=True),
    KindInfo("coordination.k8s.io", "v1", "Lease", "leases", True),  # kai_fn's resync heartbeat
    # What KAI's podgrouper reads besides the workload (kai_fn/plan_inputs.py), read only.
    KindInfo("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False),
    KindInfo("", "v1", "ConfigMap", "configmaps", True),
)
BY_RESOURCE: Mapping[tuple[str, str, str], KindInfo] = MappingProxyType(
    {(i.group, i.version, i.plural): i for i in KINDS.values()}
)
