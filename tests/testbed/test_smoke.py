"""The testbed is what it claims: the real JobSet webhook, kube-controller-manager, server-side apply."""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from tests.testbed.conftest import LiveCluster, wait_for

JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
JSON_PATCH = "application/json-patch+json"


def jobset(name: str, *, suspend: bool) -> dict[str, Any]:
    pod = {"metadata": {"labels": {"app": name}},
           "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "busybox"}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"suspend": suspend,
                     "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": pod}}}]}}


@pytest.fixture
def namespace(testbed: LiveCluster) -> Iterator[str]:
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    testbed.ensure_namespace(name)
    yield name
    client.CoreV1Api(testbed.api).delete_namespace(name)



@pytest.mark.parametrize(("suspend", "refused"), [(True, False), (False, True)],
                         ids=["suspended-accepts", "running-refuses"])
def test_jobset_webhook_guards_pod_template_labels_while_running(testbed: LiveCluster, namespace: str,
                                                                 suspend: bool, refused: bool) -> None:
    objs = client.CustomObjectsApi(testbed.api)
    objs.create_namespaced_custom_object(*JOBSET[:2], namespace, JOBSET[2], jobset("js", suspend=suspend))
    label = [{"op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/metadata/labels/changed",
              "value": "yes"}]
    if refused:
        with pytest.raises(ApiException, match=r"vjobset\.kb\.io\W{0,2} denied the request") as e:
            objs.patch_namespaced_custom_object(*JOBSET[:2], namespace, JOBSET[2], "js", label,
                                                _content_type=JSON_PATCH)
        assert e.value.status == 422  # its field error, relayed whole
        assert json.loads(e.value.body)["message"].startswith('admission webhook "vjobset.kb.io" denied the request')
    else:
        patched = objs.patch_namespaced_custom_object(*JOBSET[:2], namespace, JOBSET[2], "js", label,
                                                      _content_type=JSON_PATCH)
        assert patched["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"][
            "changed"] == "yes"


def test_kube_controller_manager_gives_a_job_its_pod(testbed: LiveCluster, namespace: str) -> None:
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="one"),
        spec=client.V1JobSpec(template=client.V1PodTemplateSpec(spec=client.V1PodSpec(
            restart_policy="Never", termination_grace_period_seconds=0,
            containers=[client.V1Container(name="c", image="busybox")]))))
    client.BatchV1Api(testbed.api).create_namespaced_job(namespace, job)
    core = client.CoreV1Api(testbed.api)
    pods = wait_for("a Pod for Job one",
                    lambda: core.list_namespaced_pod(namespace, label_selector="job-name=one").items)
    assert pods[0].metadata.owner_references[0].kind == "Job"


def test_forced_server_side_apply_as_trainer_takes_over_a_field(testbed: LiveCluster, namespace: str) -> None:
    resource = dynamic.DynamicClient(testbed.api).resources.get(api_version="jobset.x-k8s.io/v1alpha2",
                                                                 kind="JobSet")
    body = jobset("ssa", suspend=True)
    resource.server_side_apply(body=body, namespace=namespace, field_manager="kai-fn")
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]["app"] = "trainer"

    with pytest.raises(ApiException, match=r"(?s)^409\n.*Apply failed with 1 conflict") as conflict:
        resource.server_side_apply(body=body, namespace=namespace, field_manager="trainer")
    applied = resource.server_side_apply(body=body, namespace=namespace, field_manager="trainer",
                                         force_conflicts=True)

    assert conflict.value.status == 409
    assert applied.spec.replicatedJobs[0].template.spec.template.metadata.labels["app"] == "trainer"
    assert {(m.manager, m.operation) for m in applied.metadata.managedFields} >= {("trainer", "Apply")}


@pytest.mark.parametrize(("granted", "status"), [(False, 403), (True, 200)], ids=["unbound-403", "bound-200"])
def test_service_account_token_is_judged_by_rbac(testbed: LiveCluster, namespace: str, granted: bool,
                                                 status: int) -> None:
    if granted:
        rbac = client.RbacAuthorizationV1Api(testbed.api)
        rbac.create_namespaced_role(namespace, client.V1Role(
            metadata=client.V1ObjectMeta(name="read-pods"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["list"])]))
        rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="read-pods"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="read-pods"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="fn", namespace=namespace)]))
    as_sa = client.CoreV1Api(testbed.client_for_token(testbed.sa_token(namespace, "fn")))

    def list_pods() -> int:
        try:
            as_sa.list_namespaced_pod(namespace)
            return 200
        except ApiException as e:
            return e.status

    # RBAC's informers see a new RoleBinding a moment later: wait for the answer, which must come.
    wait_for(f"HTTP {status} for the ServiceAccount's pod list", lambda: list_pods() == status, deadline_s=30)
