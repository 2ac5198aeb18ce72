"""knative/base on the testbed, as far as a cluster without Knative can hold it: the admission policy, and the
function's Namespace, ServiceAccount, (Cluster)Roles and heartbeat Lease, applied from the rendered manifests with the
testbed's kubectl; and the function itself as a local process that talks to the API server with its ServiceAccount's token,
so the real RBAC authorizer judges each of its calls against what knative/base grants.
"""
from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from kai_fn.core import keys
from kai_fn.local.chain import SEGMENT_POLICY, wait_for_policy, wait_for_segment_policy
from kai_fn.local.process import FunctionProcess
from tests.conftest import sample_object
from tests.manifests import BASE, render

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

NAMESPACE = "kai-fn"
AUDIENCE = "kai-fn"
POLICY = keys.NAMING_POLICY_NAME
ENABLED = {"kai-fn.io/enabled": "true"}
TRAINER = ("trainer.kubeflow.org", "v1alpha1")
# The identity Knative gives the ApiServerSource when authentication-oidc is on (knative/base/apiserversource.yaml).
SOURCE_SA = "kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource"
SOURCE = f"system:serviceaccount:{NAMESPACE}:{SOURCE_SA}"
# The function's Namespace, identity and grants, and the heartbeat Lease its Role lets it patch.
_FUNCTION_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Lease"}
_POLICY_KINDS = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}


def apply(testbed: LiveCluster, objs: list[dict[str, Any]]) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump_all(objs, f)
        f.flush()
        testbed.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=kai-fn-tests", "-f", f.name)


def rendered(kinds: set[str]) -> list[dict[str, Any]]:
    return [o for o in render(BASE) if o["kind"] in kinds]


def enabled_namespace(testbed: LiveCluster, prefix: str, labels: dict[str, str] | None = ENABLED) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(testbed.api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    return name


def trainjob(name: str, runtime: str, *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None =
             None, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A TrainJob as a user writes it: no suspend."""
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta,
            "spec": {"runtimeRef": {"name": runtime}, **(spec or {})}}


def create_trainjob(testbed: LiveCluster, namespace: str, body: dict[str, Any], dry_run: bool = False
                    ) -> dict[str, Any]:
    return client.CustomObjectsApi(testbed.api).create_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", body, dry_run="All" if dry_run else None)


@contextmanager
def admission_policy(testbed: LiveCluster) -> Iterator[None]:
    """The policy and its binding from knative/base, loaded (the API server loads policies asynchronously: a
    dry-run create of a held JobSet in a labelled namespace tells when it acts), and removed afterwards: the testbed
    may be shared."""
    apply(testbed, rendered(_POLICY_KINDS))
    probe_ns = enabled_namespace(testbed, "adm-probe")
    try:
        wait_for_policy(testbed.api, probe_ns, "kai-scheduler")
        wait_for_segment_policy(testbed.api, probe_ns)
        yield
    finally:
        for _, plural in (("MutatingAdmissionPolicyBinding", "mutatingadmissionpolicybindings"),
                             ("MutatingAdmissionPolicy", "mutatingadmissionpolicies")):
            for name in (POLICY, SEGMENT_POLICY):
                testbed.kubectl("delete", f"{plural}.admissionregistration.k8s.io", name, "--ignore-not-found")
        # Unloaded, not only deleted: the next module's JobSets in labelled namespaces must not be named.
        wait_for_policy(testbed.api, probe_ns, "kai-scheduler", acting=False)
        wait_for_segment_policy(testbed.api, probe_ns, acting=False)
        client.CoreV1Api(testbed.api).delete_namespace(probe_ns)


def function_kubeconfig(testbed: LiveCluster, directory: Path) -> Path:
    """A kubeconfig holding only the token of ServiceAccount kai-fn/kai-fn, bound as knative/base binds it."""
    apply(testbed, rendered(_FUNCTION_KINDS))
    return token_kubeconfig(testbed, directory)


def token_kubeconfig(testbed: LiveCluster, directory: Path) -> Path:
    """A kubeconfig holding only the token of ServiceAccount kai-fn/kai-fn: what the function has in its pod."""
    token = testbed.sa_token(NAMESPACE, "kai-fn")
    admin = testbed.api.configuration
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "kai-fn",
        "clusters": [{"name": "testbed", "cluster": {"server": admin.host, "certificate-authority": admin.ssl_ca_cert}}],
        "users": [{"name": "kai-fn", "user": {"token": token}}],
        "contexts": [{"name": "kai-fn", "context": {"cluster": "testbed", "user": "kai-fn"}}],
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def function_process(testbed: LiveCluster, **settings: str) -> Iterator[FunctionProcess]:
    with tempfile.TemporaryDirectory() as tmp:
        # No namespace cache: a module's process outlives the namespaces its tests opt in after it started.
        env = {"KUBECONFIG": str(function_kubeconfig(testbed, Path(tmp))), "KAI_FN_RUNTIME_CACHE_SECONDS": "0",
               "KAI_FN_BACKGROUND_WORKERS": "0", "KAI_FN_NAMESPACE_CACHE_SECONDS": "0", **settings}
        with FunctionProcess(env) as fn:
            yield fn


def seed_samples(testbed: LiveCluster) -> None:
    """The ClusterTrainingRuntimes and Queues the llama samples need (the pre-check needs their queue to exist)."""
    objs = client.CustomObjectsApi(testbed.api)
    for name in ("clustertrainingruntime-torch-kai", "clustertrainingruntime-torch"):
        runtime = sample_object(name)
        create_ignoring_conflict(lambda: objs.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes",
                                                                          runtime))
    for name in ("queue-default-parent", "queue-team-a"):
        queue = sample_object(name)
        create_ignoring_conflict(lambda: objs.create_cluster_custom_object("scheduling.run.ai", "v2", "queues",
                                                                          queue))


def create_ignoring_conflict(create) -> None:
    try:
        create()
    except ApiException as e:
        if e.status != 409:
            raise


def wait_until_refused(policy: str, write: Callable[[], Any]) -> None:
    """The API server loads a policy asynchronously: a write it refuses, naming ``policy``, says it acts."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            write()
        except ApiException as error:
            if error.status in (403, 422) and policy in str(error.body):
                return
            raise
        time.sleep(0.5)
    raise AssertionError(f"{policy} did not act within 60 s")


def remove_validating_policy(testbed: LiveCluster, policy: str, write: Callable[[], Any]) -> None:
    """Deletes ``policy`` and its binding, then waits until ``write`` (one it refused) is admitted: the API server
    unloads a policy asynchronously, and the testbed is shared, so the next module must not meet it."""
    for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
        testbed.kubectl("delete", f"{plural}.admissionregistration.k8s.io", policy, "--ignore-not-found")
    deadline = time.monotonic() + 60
    while True:
        try:
            write()
            return
        except ApiException as error:
            if policy not in str(error.body) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
