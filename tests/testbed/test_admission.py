"""The admission policy from knative/ as the install renders it, on a real API server with JobSet's webhooks, and the
function on it: a JobSet that runs before its namespace opts in is never renamed by a later write; a TrainJob
submitted plainly gets its gang, its JobSet named at admission, neither written by kai_fn; one that never asks for
KAI is never touched. Which JobSets the policy names, and the names, are tests/testbed/test_gang_naming.py's. Trainer
itself runs on the chain (tests/chain/test_plain_submission.py); here its apply is made as it makes it."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client

from kai_fn.core import keys
from kai_fn.local.chain import probe_jobset, wait_for_policy
from kai_fn.function.migration.jobset_hold import HELD_LABEL
from tests.ce import resource, send
from tests.conftest import sample_object
from tests.testbed.kai_fn_install import (
    AUDIENCE, NAMESPACE, POLICY, SOURCE, SOURCE_SA, TRAINER, admission_policy, create_ignoring_conflict,
    create_trainjob, enabled_namespace, function_process, trainjob,
)
from tests.builders import held_by_0_2

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

JOBSETS = ("jobset.x-k8s.io", "v1alpha2")
NAMED = keys.NAMED_LABEL


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


def _jobset(name: str, scheduler: str = "kai-scheduler", *, owner: bool = True, controller: bool = True,
            annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
            suspend: bool | None = None) -> dict[str, Any]:
    body = probe_jobset(scheduler)
    body["metadata"]["name"] = name
    refs = body["metadata"]["ownerReferences"]
    refs[0]["controller"] = controller
    refs[0]["name"] = name  # the TrainJob of that name (the garbage collector deletes a JobSet whose owner is absent)
    if not owner:
        del body["metadata"]["ownerReferences"]
    if annotations:
        body["metadata"]["annotations"] = annotations
    if labels:
        body["metadata"]["labels"] = labels
    if suspend is not None:
        body["spec"]["suspend"] = suspend
    return body


def _trainer_apply(testbed: LiveCluster, namespace: str, body: dict[str, Any], suspend: bool) -> dict[str, Any]:
    """Server-side apply as Trainer's TrainJob controller makes it: field manager ``trainer``, forced, the JobSet
    whole with ``suspend`` taken from the TrainJob (pkg/controller/trainjob_controller.go, the JobSet plugin)."""
    applied = copy.deepcopy(body)
    applied["spec"]["suspend"] = suspend
    objs = client.CustomObjectsApi(testbed.api)
    objs.patch_namespaced_custom_object(*JOBSETS, namespace, "jobsets", applied["metadata"]["name"], applied,
                                        field_manager="trainer", force=True,
                                        _content_type="application/apply-patch+yaml")
    # The client maps no body for a 201 (an apply that creates): what was stored is read back.
    return objs.get_namespaced_custom_object(*JOBSETS, namespace, "jobsets", applied["metadata"]["name"])


def _pod_group_names(jobset: dict[str, Any]) -> set[str | None]:
    return {((rj["template"]["spec"]["template"].get("metadata") or {}).get("annotations") or {}).get(
        keys.KAI_POD_GROUP_ANNOTATION) for rj in jobset["spec"]["replicatedJobs"]}


def test_the_policy_is_cluster_scoped_although_kustomize_renders_a_namespace(testbed: LiveCluster, policy: None):
    shown = testbed.kubectl("get", "mutatingadmissionpolicies.admissionregistration.k8s.io", POLICY,
                            "-o", "jsonpath={.metadata.namespace}|{.spec.failurePolicy}").stdout
    assert shown == "|Fail"


def test_a_jobset_that_runs_before_its_namespace_opts_in_is_never_renamed_by_a_later_write(testbed: LiveCluster,
                                                                                            policy: None):
    objs, core = client.CustomObjectsApi(testbed.api), client.CoreV1Api(testbed.api)
    ns = enabled_namespace(testbed, "adm-late", labels=None)
    try:
        job = create_trainjob(testbed, ns, trainjob("early", "torch"))
        body = _jobset("early", suspend=False)
        body["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
        running = _trainer_apply(testbed, ns, body, suspend=False)
        assert _pod_group_names(running) == {None} and NAMED not in (running["metadata"].get("labels") or {})
        core.patch_namespace(ns, {"metadata": {"labels": {"kai-fn.io/enabled": "true"}}})
        wait_for_policy(testbed.api, ns, "kai-scheduler")  # the policy acts here now
        touched = objs.patch_namespaced_custom_object(*JOBSETS, ns, "jobsets", "early",
                                                      {"metadata": {"annotations": {"team": "a"}}})
        assert _pod_group_names(touched) == {None} and NAMED not in (touched["metadata"].get("labels") or {})
        again = _trainer_apply(testbed, ns, body, suspend=False)
        assert _pod_group_names(again) == {None} and NAMED not in (again["metadata"].get("labels") or {})
    finally:
        core.delete_namespace(ns)


# -- and then the function decides it --------------------------------------------------------------------------------

def _as_trainer_would(jobset: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """The sample JobSet, owned by the TrainJob just created, as Trainer submits it (not suspended, not labelled:
    the policy names it)."""
    jobset = copy.deepcopy(jobset)
    meta = jobset["metadata"]
    meta.pop("uid", None)
    meta["labels"].pop(HELD_LABEL, None)  # the sample shows the previous version's hold
    meta["namespace"] = job["metadata"]["namespace"]
    meta["ownerReferences"][0] |= {"uid": job["metadata"]["uid"], "name": job["metadata"]["name"]}
    jobset["spec"]["suspend"] = False
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


def test_a_plainly_submitted_trainjob_in_scope_gets_its_gang_and_is_never_written(testbed: LiveCluster, enabled: str,
                                                                                   function):
    objs = client.CustomObjectsApi(testbed.api)
    submitted = sample_object("trainjob-llama-finetune")
    del submitted["metadata"]["uid"]
    submitted["metadata"]["namespace"] = enabled
    job = create_trainjob(testbed, enabled, submitted)
    assert job["spec"].get("suspend") is False
    jobset = objs.create_namespaced_custom_object(*JOBSETS, enabled, "jobsets",
                                                  _as_trainer_would(held_by_0_2(sample_object("jobset-llama-finetune")), job))
    assert jobset["spec"]["suspend"] is False and jobset["metadata"]["labels"][NAMED] == "true"
    token = testbed.sa_token(NAMESPACE, SOURCE_SA, [AUDIENCE])
    answer = send(function.url, resource(jobset), token=token)  # the named JobSet's event
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done"), answer.body
    live = objs.get_namespaced_custom_object(*TRAINER, enabled, "trainjobs", job["metadata"]["name"])
    writers = {e["manager"] for e in live["metadata"].get("managedFields") or []}
    assert keys.FIELD_MANAGER not in writers and not any(k.startswith("kai-fn/") for k in
                                                         live["metadata"].get("annotations") or {}), live["metadata"]
    podgroup = f"pg-{job['metadata']['name']}-{job['metadata']['uid']}"
    pg = objs.get_namespaced_custom_object("scheduling.run.ai", "v2alpha2", enabled, "podgroups", podgroup)
    assert pg["spec"]["minMember"] == 4
    named = objs.get_namespaced_custom_object(*JOBSETS, enabled, "jobsets", job["metadata"]["name"])
    assert named["metadata"]["generation"] == jobset["metadata"]["generation"], "kai_fn wrote the JobSet's spec"
    assert keys.FIELD_MANAGER not in {e["manager"] for e in named["metadata"]["managedFields"]}
    assert _pod_group_names(named) == {podgroup} and keys.MARKER_PODGROUP not in named["metadata"]["annotations"]


def test_a_plainly_submitted_trainjob_that_never_asks_for_kai_is_never_named_nor_touched(testbed: LiveCluster,
                                                                                         enabled: str, function):
    objs = client.CustomObjectsApi(testbed.api)
    job = create_trainjob(testbed, enabled, trainjob("resnet-eval", "torch-distributed"))
    jobset = sample_object("jobset-whisper-asr")
    jobset["metadata"]["name"] = "resnet-eval"
    for rj in jobset["spec"]["replicatedJobs"]:  # its runtime sends its pods to the default scheduler
        rj["template"]["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    made = objs.create_namespaced_custom_object(*JOBSETS, enabled, "jobsets", _as_trainer_would(jobset, job))
    assert made["spec"]["suspend"] is False and NAMED not in made["metadata"]["labels"]
    token = testbed.sa_token(NAMESPACE, SOURCE_SA, [AUDIENCE])
    answer = send(function.url, resource(job), token=token)
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "ignored"), answer.body
    live = objs.get_namespaced_custom_object(*JOBSETS, enabled, "jobsets", "resnet-eval")
    assert live["metadata"]["generation"] == made["metadata"]["generation"]  # JobSet's status writes aside
    assert keys.FIELD_MANAGER not in {e["manager"] for e in live["metadata"]["managedFields"]}
    podgroups = objs.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", enabled, "podgroups")["items"]
    assert [pg for pg in podgroups if pg["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]] == []
