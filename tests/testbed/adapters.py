"""For the tests of Knative's own ApiServerSource adapter on the testbed (kai_fn/local/adapter.py): knative/base's
sources as rendered, their RBAC, and the objects the tests change."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubernetes import client

from tests.manifests import BASE, render
from tests.testbed.kai_fn_install import _FUNCTION_KINDS, apply

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

TRAINER = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
KAI_PG = ("scheduling.run.ai", "v2alpha2", "podgroups")
MANAGED = {"app.kubernetes.io/managed-by": "kai-fn"}
ENABLED = {"kai-fn.io/enabled": "true"}


def sources() -> dict[str, dict[str, Any]]:
    """knative/base's ApiServerSources as rendered (namespace kai-fn), by name."""
    return {o["metadata"]["name"]: o for o in render(BASE) if o["kind"] == "ApiServerSource"}


def install(testbed: LiveCluster) -> None:
    """The accounts and grants of knative/base: the sources' ``kai-fn-source`` (and the function's)."""
    apply(testbed, [o for o in render(BASE) if o["kind"] in _FUNCTION_KINDS])


def namespace(testbed: LiveCluster, name: str, *, enabled: bool, labels: dict[str, str] | None = None) -> str:
    client.CoreV1Api(testbed.api).create_namespace(client.V1Namespace(
        metadata=client.V1ObjectMeta(name=name, labels={**(ENABLED if enabled else {}), **(labels or {})})))
    return name


def trainjob(name: str) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": True}}


def podgroup(name: str, *, managed: bool = True) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "labels": MANAGED if managed else {"app": "other"}},
            "spec": {"minMember": 1, "queue": "default-queue"}}


class Objects:
    """Create, label and delete namespaced custom objects as the admin."""

    def __init__(self, testbed: LiveCluster) -> None:
        self.api = client.CustomObjectsApi(testbed.api)

    def create(self, gvr: tuple[str, str, str], namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.api.create_namespaced_custom_object(*gvr[:2], namespace, gvr[2], body)

    def label(self, gvr: tuple[str, str, str], namespace: str, name: str, **labels: str) -> dict[str, Any]:
        return self.api.patch_namespaced_custom_object(*gvr[:2], namespace, gvr[2], name,
                                                       {"metadata": {"labels": labels}})

    def delete(self, gvr: tuple[str, str, str], namespace: str, name: str) -> None:
        self.api.delete_namespaced_custom_object(*gvr[:2], namespace, gvr[2], name)
