"""The kube layer's status-to-exception table (kai_fn/kube/errors.py) on the real kube-apiserver: the same provoked
refusals as the emulator tier (tests/kube/refusals.py) map to the same exceptions, and the two refusals the emulator
cannot provoke, a namespace being deleted and RBAC's, are told apart by the Status's cause, not its message."""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from kai_fn.kube import ApiServer, Forbidden, Gone, Terminating, api_client
from kai_fn.kube.errors import status_body
from kai_fn.kube.session import path
from kai_fn.local.emulator.errors import terminating
from kai_fn.local.emulator.kinds import KINDS
from tests.kube.refusals import CASES, configmap
from tests.testbed.conftest import LiveCluster, wait_for

HOLD = "kai-fn.test/hold"


def session(testbed: LiveCluster, api: client.ApiClient | None = None):
    return ApiServer(api or api_client(str(testbed.kubeconfig)), 10.0).session()


@pytest.fixture
def namespace(testbed: LiveCluster) -> Iterator[str]:
    name = f"refusals-{uuid.uuid4().hex[:8]}"
    testbed.ensure_namespace(name)
    yield name
    client.CoreV1Api(testbed.api).delete_namespace(name)


@pytest.fixture
def terminating_namespace(testbed: LiveCluster) -> Iterator[str]:
    """A namespace being deleted, held so by a ConfigMap with a finalizer until the test ends."""
    name = f"refusals-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(testbed.api)
    testbed.ensure_namespace(name)
    core.create_namespaced_config_map(name, {"metadata": {"name": "held", "finalizers": [HOLD]}})
    core.delete_namespace(name)
    wait_for(f"namespace {name} terminating",
             lambda: core.read_namespace(name).status.phase == "Terminating")
    yield name
    core.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}})


@pytest.mark.parametrize("provoke, raised, status", CASES.values(), ids=CASES.keys())
def test_each_refusal_the_real_server_gives_is_its_exception(testbed, namespace, provoke, raised, status):
    with pytest.raises(raised, match=f"^API {status} ") as caught:
        provoke(session(testbed), namespace)
    assert (type(caught.value), caught.value.status) == (raised, status)


def test_a_create_in_a_namespace_being_deleted_is_terminating_by_its_cause(testbed, terminating_namespace):
    with pytest.raises(Terminating, match="^API 403 Forbidden$") as caught:
        configmap(session(testbed), terminating_namespace, "late")
    real = status_body(caught.value.body)
    emulated = terminating(KINDS["v1", "ConfigMap"], "late", terminating_namespace).body()
    assert (real["code"], real["reason"], real["details"]["causes"]) == (
        emulated["code"], emulated["reason"], emulated["details"]["causes"])
    assert real["message"] == emulated["message"]


def test_a_placeholder_in_a_namespace_being_deleted_is_gone(testbed, terminating_namespace):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": terminating_namespace},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    with pytest.raises(Gone, match="is being deleted"):
        session(testbed).create_pod(pod)


def test_an_rbac_refusal_is_forbidden_and_not_terminating(testbed, namespace):
    token = testbed.sa_token(namespace, "nobody")
    with pytest.raises(Forbidden, match="^API 403 Forbidden$") as caught:
        session(testbed, testbed.client_for_token(token)).request(
            "GET", path("v1", "configmaps", namespace, "x"), namespace=namespace, name="x")
    assert type(caught.value) is Forbidden and caught.value.status == 403
    assert status_body(caught.value.body)["reason"] == "Forbidden", json.dumps(status_body(caught.value.body))
