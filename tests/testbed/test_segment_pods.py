"""The segment pods' policy (knative/components/segment-policy) on a real API server with the Job controller and
JobSet: every pod of a segmented trainer is created in its KAI SubGroup, computed from the completion index the Job
controller sets and the job index JobSet sets, both present when the pod is admitted (a witness policy of the test's
own writes what they were at that admission); a pod that has no index is
refused rather than made in no SubGroup; any other pod is left alone."""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kai_fn.core import keys
from kai_fn.local.chain import SEGMENT_POLICY, probe_segment_pod
from tests.testbed.conftest import wait_for
from tests.testbed.kai_fn_install import admission_policy, apply, enabled_namespace

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

pytestmark = pytest.mark.testbed
SUBGROUP = keys.KAI_SUBGROUP_LABEL


INDEXES_SEEN = "kai-fn-test/indexes-at-create"
# A policy of the test's own, beside kai_fn's: it writes on each pod what its index labels were at its CREATE
# admission, so the labels are proved there at that moment, not merely on the pod afterwards.
WITNESS = [{
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
    "metadata": {"name": "kai-fn-test-indexes-at-create"},
    "spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                                "operations": ["CREATE"]}],
                             "objectSelector": {"matchExpressions": [{"key": keys.SEGMENT_SIZE_LABEL,
                                                                      "operator": "Exists"}]}},
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
            f'[JSONPatch{{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("{INDEXES_SEEN}"), value: '
            f'(("{keys.JOB_COMPLETION_INDEX_LABEL}" in object.metadata.labels) ? '
            f'object.metadata.labels["{keys.JOB_COMPLETION_INDEX_LABEL}"] : "none") + "." + '
            f'(("{keys.JOBSET_JOB_INDEX_LABEL}" in object.metadata.labels) ? '
            f'object.metadata.labels["{keys.JOBSET_JOB_INDEX_LABEL}"] : "none")}}]')}}],
        "reinvocationPolicy": "Never", "failurePolicy": "Fail"}},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
     "metadata": {"name": "kai-fn-test-indexes-at-create"}, "spec": {"policyName": "kai-fn-test-indexes-at-create"}}]


@pytest.fixture(scope="module")
def namespaces(testbed: LiveCluster) -> Iterator[tuple[str, str]]:
    with admission_policy(testbed):
        apply(testbed, WITNESS)
        on, off = enabled_namespace(testbed, "seg-on"), enabled_namespace(testbed, "seg-off", labels=None)
        wait_for("the witness policy acts", lambda: INDEXES_SEEN in _dry_run(testbed, on, probe_segment_pod()))
        yield on, off
        for name in (on, off):
            client.CoreV1Api(testbed.api).delete_namespace(name)
        for plural in ("mutatingadmissionpolicybindings", "mutatingadmissionpolicies"):
            testbed.kubectl("delete", f"{plural}.admissionregistration.k8s.io", "kai-fn-test-indexes-at-create",
                            "--ignore-not-found")


def _dry_run(testbed: LiveCluster, namespace: str, pod: dict[str, Any]) -> dict[str, str]:
    made = client.CoreV1Api(testbed.api).create_namespaced_pod(namespace, pod, dry_run="All")
    return made.metadata.labels or {}


DRY_RUNS = [  # (completion index, job index) of a pod in segments of 4, 3 pods per Job -> its SubGroup
    (0, None, "node-0"), (3, None, "node-0"), (4, None, "node-1"), (5, None, "node-1"), (11, None, "node-2"),
    (0, 0, "node-0"), (2, 1, "node-1"), (0, 2, "node-1"), (2, 2, "node-2"),
]


@pytest.mark.parametrize("completion, job_index, subgroup", DRY_RUNS)
def test_a_segment_pod_is_admitted_in_the_subgroup_of_its_indexes(testbed, namespaces, completion, job_index,
                                                                    subgroup):
    assert _dry_run(testbed, namespaces[0], probe_segment_pod(completion, job_index))[SUBGROUP] == subgroup


def test_the_index_annotation_serves_where_the_label_is_absent(testbed, namespaces):
    pod = probe_segment_pod()
    del pod["metadata"]["labels"][keys.JOB_COMPLETION_INDEX_LABEL]
    pod["metadata"]["annotations"][keys.JOB_COMPLETION_INDEX_LABEL] = "7"
    assert _dry_run(testbed, namespaces[0], pod)[SUBGROUP] == "node-1"


def test_a_segment_pod_without_an_index_is_refused_naming_the_policy(testbed, namespaces):
    pod = probe_segment_pod()
    del pod["metadata"]["labels"][keys.JOB_COMPLETION_INDEX_LABEL]
    with pytest.raises(ApiException, match=SEGMENT_POLICY):
        _dry_run(testbed, namespaces[0], pod)


@pytest.mark.parametrize("where", ["unmarked-pod", "namespace-not-enabled"])
def test_other_pods_are_left_alone(testbed, namespaces, where):
    pod = probe_segment_pod()
    if where == "unmarked-pod":
        del pod["metadata"]["labels"][keys.SEGMENT_SIZE_LABEL]
    labels = _dry_run(testbed, namespaces[0] if where == "unmarked-pod" else namespaces[1], pod)
    assert SUBGROUP not in labels


def _jobset(name: str, replicas: int, parallelism: int, size: int) -> dict[str, Any]:
    """A JobSet whose trainer's template carries what kai_fn's patch writes on it (no owner: never held)."""
    template = {
        "metadata": {"labels": {keys.SEGMENT_SIZE_LABEL: str(size)},
                     "annotations": {keys.SEGMENT_PARENT_ANNOTATION: "node",
                                     keys.SEGMENT_JOB_PODS_ANNOTATION: str(parallelism)}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "node", "image": "busybox"}]},
    }
    return {"apiVersion": keys.JOBSET_API, "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "node", "replicas": replicas, "template": {"spec": {
                "parallelism": parallelism, "completions": parallelism, "template": template}}}]}}


JOBSETS = [  # (replicas, parallelism, size) -> pods per SubGroup
    pytest.param(1, 6, 4, {"node-0": 4, "node-1": 2}, id="one-job-six-pods-in-fours"),
    pytest.param(2, 3, 4, {"node-0": 4, "node-1": 2}, id="two-jobs-of-three-in-fours"),
    pytest.param(2, 2, 2, {"node-0": 2, "node-1": 2}, id="two-jobs-of-two-in-twos"),
]


@pytest.mark.parametrize("replicas, parallelism, size, expected", JOBSETS)
def test_jobset_and_the_job_controller_make_every_pod_in_its_segment(testbed, namespaces, replicas, parallelism,
                                                                      size, expected):
    """No scheduler runs here: each pod is as the Job controller created it, through the policy."""
    namespace = namespaces[0]
    name = f"seg-{replicas}-{parallelism}-{size}"
    client.CustomObjectsApi(testbed.api).create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", _jobset(name, replicas, parallelism, size))
    core = client.CoreV1Api(testbed.api)
    selector = f"{keys.JOBSET_NAME_LABEL}={name}"

    def made() -> list[Any] | None:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        return pods if len(pods) == replicas * parallelism else None

    pods = wait_for(f"{replicas * parallelism} pods of JobSet {name}", made, deadline_s=90)
    counts: dict[str, int] = {}
    for pod in pods:
        labels = pod.metadata.labels
        assert labels[INDEXES_SEEN] == (f"{labels[keys.JOB_COMPLETION_INDEX_LABEL]}."
                                        f"{labels[keys.JOBSET_JOB_INDEX_LABEL]}"), "both index labels at CREATE"
        index = int(labels[keys.JOBSET_JOB_INDEX_LABEL]) * parallelism + int(labels[keys.JOB_COMPLETION_INDEX_LABEL])
        assert labels[SUBGROUP] == f"node-{index // size}", pod.metadata.name
        counts[labels[SUBGROUP]] = counts.get(labels[SUBGROUP], 0) + 1
    assert counts == expected
