"""What kai_fn's own ServiceAccount may write, on a real API server with knative/base's RBAC and the
ValidatingAdmissionPolicy ``kai-fn-identity`` (docs/security.md, "kai_fn's identity"; issue 39, attack 8): pods only
as its placeholders, and writes only in namespaces labelled ``kai-fn.io/enabled=true``. Before it, kai_fn's token
could create any pod (any image, any ServiceAccount's token, the host's network) and PodGroups in ``kube-system``.

Creates are server-side dry runs: admission runs in full and nothing is stored."""
from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kai_fn.core.reserve import DEFAULT_IMAGE
from tests.core.test_reserve import launcher, make, mpi
from tests.testbed.kai_fn_install import (
    NAMESPACE, apply, create_trainjob, enabled_namespace, remove_validating_policy, rendered, trainjob,
    wait_until_refused,
)

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

POLICY = "kai-fn-identity"
KAI_PG = ("scheduling.run.ai", "v2alpha2")
_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ClusterRole", "ClusterRoleBinding",
          "ServiceAccount", "Namespace"}


@pytest.fixture(scope="module")
def identity_policy(testbed: LiveCluster) -> Iterator[None]:
    apply(testbed, [o for o in rendered(_KINDS)
                    if not o["kind"].startswith("ValidatingAdmissionPolicy") or o["metadata"]["name"] == POLICY])
    yield
    remove_identity_policy(testbed)


def remove_identity_policy(testbed: LiveCluster) -> None:
    """The policy gone, and unloaded: kai_fn's ServiceAccount may make any pod in a namespace that never opted in."""
    plain = enabled_namespace(testbed, "unloaded", labels=None)
    kai_fn = testbed.client_for_token(testbed.sa_token(NAMESPACE, "kai-fn"))
    try:
        remove_validating_policy(testbed, POLICY, lambda: _create_pod(kai_fn, _pod(plain, image="busybox")))
    finally:
        client.CoreV1Api(testbed.api).delete_namespace(plain)


@pytest.fixture(scope="module")
def places(testbed: LiveCluster, identity_policy: None) -> Iterator[dict[str, Any]]:
    """An opted-in namespace, one that never opted in, and kai_fn's client (its ServiceAccount's token)."""
    enabled, plain = enabled_namespace(testbed, "ident"), enabled_namespace(testbed, "plain", labels=None)
    kai_fn = testbed.client_for_token(testbed.sa_token(NAMESPACE, "kai-fn"))
    wait_until_refused(POLICY, lambda: _create_pod(kai_fn, _pod(enabled, image="busybox")))
    yield {"enabled": enabled, "plain": plain, "kube-system": "kube-system", "kai-fn": kai_fn}
    for ns in (enabled, plain):
        client.CoreV1Api(testbed.api).delete_namespace(ns)


def _pod(namespace: str, **change: Any) -> dict[str, Any]:
    """The placeholder kai_fn really makes (kai_fn.core.reserve, through the planner), then ``change``d: ``image``
    of its container, or keys of its ``spec`` (``None`` removes one), or ``owners``."""
    (pod,) = copy.deepcopy(make(mpi(launcher()), placeholder_image=DEFAULT_IMAGE).placeholders)
    pod["metadata"]["namespace"] = namespace
    if "image" in change:
        pod["spec"]["containers"][0]["image"] = change.pop("image")
    if "owners" in change:
        pod["metadata"]["ownerReferences"] = change.pop("owners")
    if "container" in change:
        pod["spec"]["containers"][0] |= change.pop("container")
    for key, value in change.items():
        if value is None:
            pod["spec"].pop(key, None)
        else:
            pod["spec"][key] = value
    return pod


def _create_pod(api: client.ApiClient, pod: dict[str, Any]) -> Any:
    return client.CoreV1Api(api).create_namespaced_pod(pod["metadata"]["namespace"], pod, dry_run="All")


def _podgroup(api: client.ApiClient, namespace: str) -> Any:
    body = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg-probe"},
            "spec": {"minMember": 1, "queue": "default-queue"}}
    return client.CustomObjectsApi(api).create_namespaced_custom_object(*KAI_PG, namespace, "podgroups", body,
                                                                        dry_run="All")


def _event(api: client.ApiClient, namespace: str) -> Any:
    body = {"metadata": {"name": "probe.kai-fn"}, "involvedObject": {"kind": "TrainJob", "name": "x",
            "namespace": namespace}, "reason": "Probe", "message": "probe", "type": "Normal"}
    return client.CoreV1Api(api).create_namespaced_event(namespace, body, dry_run="All")


# (id, the write as kai_fn, given the namespaces; refused with this in the message, or None: admitted)
WRITES: list[tuple[str, Callable[[client.ApiClient, dict[str, str]], Any], str | None]] = [
    ("the placeholder kai_fn makes", lambda api, ns: _create_pod(api, _pod(ns["enabled"])), None),
    ("another image", lambda api, ns: _create_pod(api, _pod(ns["enabled"], image="busybox")),
     "the placeholder image"),
    ("a volume", lambda api, ns: _create_pod(api, _pod(ns["enabled"], volumes=[{"name": "v", "emptyDir": {}}])),
     "no volumes"),
    ("a Secret as a volume", lambda api, ns: _create_pod(api, _pod(
        ns["enabled"], volumes=[{"name": "s", "secret": {"secretName": "team-secret"}}])), "no volumes"),
    ("the host's network", lambda api, ns: _create_pod(api, _pod(ns["enabled"], hostNetwork=True)),
     "no host network"),
    ("the host's PID namespace", lambda api, ns: _create_pod(api, _pod(ns["enabled"], hostPID=True)),
     "no host network"),
    ("a ServiceAccount token", lambda api, ns: _create_pod(api, _pod(ns["enabled"], automountServiceAccountToken=True)),
     "automountServiceAccountToken: false"),
    ("a token by default", lambda api, ns: _create_pod(api, _pod(ns["enabled"], automountServiceAccountToken=None)),
     "automountServiceAccountToken: false"),
    ("privileged", lambda api, ns: _create_pod(api, _pod(ns["enabled"], container={"securityContext": {
        "privileged": True, "allowPrivilegeEscalation": True}})), "no privilege"),
    ("a Secret in its env", lambda api, ns: _create_pod(api, _pod(ns["enabled"], container={"env": [
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "team-secret", "key": "k"}}}]})), "no env"),
    ("placed on a node by name", lambda api, ns: _create_pod(api, _pod(ns["enabled"], nodeName="node-1")),
     "no nodeName"),
    ("no TrainJob controlling it", lambda api, ns: _create_pod(api, _pod(ns["enabled"], owners=[])),
     "a TrainJob as its controller"),
    ("the placeholder in a namespace that never opted in", lambda api, ns: _create_pod(api, _pod(ns["plain"])),
     "only in namespaces labelled kai-fn.io/enabled=true"),
    ("the placeholder in kube-system", lambda api, ns: _create_pod(api, _pod(ns["kube-system"])),
     "kube-system is not"),
    ("a PodGroup in an opted-in namespace", lambda api, ns: _podgroup(api, ns["enabled"]), None),
    ("a PodGroup in kube-system", lambda api, ns: _podgroup(api, ns["kube-system"]), "kube-system is not"),
    ("a PodGroup in a namespace that never opted in", lambda api, ns: _podgroup(api, ns["plain"]),
     "only in namespaces labelled"),
    ("an Event in an opted-in namespace", lambda api, ns: _event(api, ns["enabled"]), None),
    ("an Event in a namespace that never opted in", lambda api, ns: _event(api, ns["plain"]),
     "only in namespaces labelled"),
]


@pytest.mark.parametrize("write,refused", [w[1:] for w in WRITES], ids=[w[0] for w in WRITES])
def test_what_kai_fns_service_account_may_create(places, write, refused):
    if refused is None:
        assert write(places["kai-fn"], places) is not None
        return
    with pytest.raises(ApiException, match=r"\((403|422)\)") as error:
        write(places["kai-fn"], places)
    assert POLICY in str(error.value.body) and refused in str(error.value.body)


def test_anyone_else_is_not_judged_by_it(testbed, places):
    """The policy matches kai_fn's ServiceAccount alone: an admin's busybox pod in a namespace that never opted in
    is admitted."""
    made = _create_pod(testbed.api, _pod(places["plain"], image="busybox", owners=[]))
    assert made is not None


@pytest.mark.parametrize("placeholder,refused", [(True, None), (False, "deletes only its placeholder pods")],
                         ids=["its-placeholder", "a-tenants-pod"])
def test_kai_fn_deletes_only_its_placeholders(testbed, places, placeholder, refused):
    ns = places["enabled"]
    owner = create_trainjob(testbed, ns, trainjob(f"owner-{placeholder}".lower(), "torch-distributed-kai"))
    pod = _pod(ns, owners=[{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"], "controller": True}])
    if not placeholder:
        pod["metadata"]["labels"] = {"app": "tenant"}
    name = pod["metadata"]["name"] = f"victim-{placeholder}".lower()
    core = client.CoreV1Api(testbed.api)
    core.create_namespaced_pod(ns, pod)
    try:
        if refused is None:
            assert client.CoreV1Api(places["kai-fn"]).delete_namespaced_pod(name, ns, dry_run="All") is not None
        else:
            with pytest.raises(ApiException, match=refused):
                client.CoreV1Api(places["kai-fn"]).delete_namespaced_pod(name, ns, dry_run="All")
    finally:
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
