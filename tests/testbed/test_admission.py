"""The admission policy from knative/, on a real API server: a TrainJob submitted plainly comes back suspended and
marked in an opted-in namespace, and untouched wherever the policy must not act; the function then releases it."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client

from tests.ce import resource, send
from tests.conftest import sample_object
from tests.testbed.kai_fn_install import (
    AUDIENCE, NAMESPACE, SOURCE, SOURCE_SA, TRAINER, admission_policy, create_ignoring_conflict, create_trainjob,
    enabled_namespace, function_process, trainjob,
)

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

AUTO = "kai-fn/auto-suspended"


@pytest.fixture(scope="module")
def policy(testbed: LiveCluster) -> Iterator[None]:
    with admission_policy(testbed):
        yield


@pytest.fixture(scope="module")
def enabled(testbed: LiveCluster, policy: None) -> Iterator[str]:
    name = enabled_namespace(testbed, "adm-on")
    yield name
    client.CoreV1Api(testbed.api).delete_namespace(name)


@pytest.fixture(scope="module")
def other(testbed: LiveCluster, policy: None) -> Iterator[str]:
    name = enabled_namespace(testbed, "adm-off", labels=None)
    yield name
    client.CoreV1Api(testbed.api).delete_namespace(name)


CASES = [
    # (id, the TrainJob as submitted, in the enabled namespace?, suspended and marked by the policy?)
    ("plain", trainjob("plain", "torch"), True, True),
    ("plain-with-annotations", trainjob("annotated", "torch", annotations={"team": "a"}), True, True),
    ("plain-with-labels", trainjob("labelled", "torch", labels={"kai.scheduler/queue": "team-a"}), True, True),
    ("managed-by-trainer", trainjob("trainer-managed", "torch",
                                    spec={"managedBy": "trainer.kubeflow.org/trainjob-controller"}), True, True),
    ("other-namespace", trainjob("elsewhere", "torch"), False, False),
    ("suspended-by-its-author", trainjob("paused", "torch", spec={"suspend": True}), True, False),
    ("kueue", trainjob("queued", "torch", labels={"kueue.x-k8s.io/queue-name": "lq"}), True, False),
    ("multikueue", trainjob("remote", "torch", spec={"managedBy": "kueue.x-k8s.io/multikueue"}), True, False),
]


@pytest.mark.parametrize("submitted,in_enabled,marked", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_policy_suspends_and_marks_exactly_the_trainjobs_kai_fn_will_release(
        testbed: LiveCluster, enabled: str, other: str, submitted: dict[str, Any], in_enabled: bool, marked: bool):
    made = create_trainjob(testbed, enabled if in_enabled else other, copy.deepcopy(submitted))
    notes = made["metadata"].get("annotations") or {}
    if marked:
        assert made["spec"]["suspend"] is True and notes.get(AUTO) == "true"
        assert {k: v for k, v in notes.items() if k != AUTO} == (submitted["metadata"].get("annotations") or {})
    else:
        assert made["spec"].get("suspend", False) is bool(submitted["spec"].get("suspend")) and AUTO not in notes
    assert made["metadata"].get("labels") == submitted["metadata"].get("labels")


def test_the_policy_is_cluster_scoped_although_kustomize_renders_a_namespace(testbed: LiveCluster, policy: None):
    shown = testbed.kubectl("get", "mutatingadmissionpolicies.admissionregistration.k8s.io", "kai-fn-auto-suspend",
                            "-o", "jsonpath={.metadata.namespace}|{.spec.failurePolicy}").stdout
    assert shown == "|Fail"


# -- and then the function releases it -------------------------------------------------------------------------------

def _as_trainer_would(jobset: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """The sample JobSet, owned by the TrainJob just created (Trainer's controllers do not run on this testbed)."""
    jobset = copy.deepcopy(jobset)
    meta = jobset["metadata"]
    meta.pop("uid", None)
    meta["namespace"] = job["metadata"]["namespace"]
    meta["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
    return jobset


@pytest.fixture(scope="module")
def function(testbed: LiveCluster, policy: None):
    for name in ("clustertrainingruntime-torch-kai", "clustertrainingruntime-torch"):
        runtime = sample_object(name)
        create_ignoring_conflict(lambda: client.CustomObjectsApi(testbed.api).create_cluster_custom_object(
            *TRAINER, "clustertrainingruntimes", runtime))
    for name in ("queue-default-parent", "queue-team-a"):  # the queue pre-check needs the gang's leaf Queue
        queue = sample_object(name)
        create_ignoring_conflict(lambda: client.CustomObjectsApi(testbed.api).create_cluster_custom_object(
            "scheduling.run.ai", "v2", "queues", queue))
    with function_process(testbed, KAI_FN_AUDIENCE=AUDIENCE, KAI_FN_SENDERS=SOURCE) as fn:
        yield fn


def test_a_plainly_submitted_trainjob_in_scope_is_released_with_its_gang(testbed: LiveCluster, enabled: str, function):
    objs = client.CustomObjectsApi(testbed.api)
    submitted = sample_object("trainjob-llama-finetune")
    del submitted["spec"]["suspend"], submitted["metadata"]["uid"]
    submitted["metadata"]["namespace"] = enabled
    job = create_trainjob(testbed, enabled, submitted)
    assert job["spec"]["suspend"] is True
    objs.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", enabled, "jobsets",
                                         _as_trainer_would(sample_object("jobset-llama-finetune"), job))
    token = testbed.sa_token(NAMESPACE, SOURCE_SA, [AUDIENCE])
    answer = send(function.url, resource(job), token=token)
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done"), answer.body
    live = objs.get_namespaced_custom_object(*TRAINER, enabled, "trainjobs", job["metadata"]["name"])
    podgroup = f"pg-{job['metadata']['name']}-{job['metadata']['uid']}"
    assert live["spec"]["suspend"] is False and live["metadata"]["annotations"]["kai-fn/podgroup"] == podgroup
    pg = objs.get_namespaced_custom_object("scheduling.run.ai", "v2alpha2", enabled, "podgroups", podgroup)
    assert pg["spec"]["minMember"] == 4
    jobset = objs.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", enabled, "jobsets", job["metadata"]["name"])
    templates = [rj["template"]["spec"]["template"]["metadata"] for rj in jobset["spec"]["replicatedJobs"]]
    assert all(t["annotations"]["pod-group-name"] == podgroup for t in templates)


def test_a_plainly_submitted_trainjob_out_of_scope_is_released_without_a_gang(testbed: LiveCluster, enabled: str,
                                                                              function):
    objs = client.CustomObjectsApi(testbed.api)
    job = create_trainjob(testbed, enabled, trainjob("resnet-eval", "torch-distributed"))
    assert job["spec"]["suspend"] is True
    token = testbed.sa_token(NAMESPACE, SOURCE_SA, [AUDIENCE])
    answer = send(function.url, resource(job), token=token)
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done"), answer.body
    live = objs.get_namespaced_custom_object(*TRAINER, enabled, "trainjobs", "resnet-eval")
    assert live["spec"]["suspend"] is False
    assert live["metadata"]["annotations"]["kai-fn/skipped"] == "out-of-scope"
    podgroups = objs.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", enabled, "podgroups")["items"]
    assert [pg for pg in podgroups if pg["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]] == []
