"""kai_fn's marks, and the spec of its PodGroups, are kai_fn's alone, on a real API server with knative/base's
policies and RBAC (docs/security.md): the ValidatingAdmissionPolicy ``kai-fn-own-marks`` refuses every write of a
``kai-fn/*`` decision, and every edit of the spec of a PodGroup kai_fn made but for the two fields KAI leaves to
others, by a tenant (here a ServiceAccount allowed everything on TrainJobs, runtimes, JobSets and PodGroups in its
namespace), lets through what KAI v0.17.0 writes on such a PodGroup, and lets kai_fn's ServiceAccount, an operator
bound to ``kai-fn-marks`` and cluster admins write them; the label the naming policy writes at a JobSet's CREATE is
admitted only on a JobSet a TrainJob controls; the function, under its own token, still makes the gang of a named
JobSet with both policies in place, writing nothing on the JobSet."""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kai_fn.core import keys
from kai_fn.function.migration.jobset_hold import HELD_LABEL
from tests.ce import resource, send
from tests.testbed.kai_fn_install import (
    NAMESPACE, TRAINER, admission_policy, apply, create_trainjob, enabled_namespace, function_process, rendered,
    seed_samples, trainjob, wait_until_refused,
)
from tests.testbed.test_admission import JOBSETS, _jobset
from tests.testbed.test_identity_policy import remove_identity_policy

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

POLICY = "kai-fn-own-marks"
KAI_PG = ("scheduling.run.ai", "v2alpha2")
_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ClusterRole", "ClusterRoleBinding",
          "ServiceAccount", "Namespace"}


@pytest.fixture(scope="module")
def marks_policy(testbed: LiveCluster) -> Iterator[None]:
    with admission_policy(testbed):
        apply(testbed, rendered(_KINDS))
        yield
        testbed.kubectl("delete", "validatingadmissionpolicybindings.admissionregistration.k8s.io", POLICY,
                        "--ignore-not-found")
        testbed.kubectl("delete", "validatingadmissionpolicies.admissionregistration.k8s.io", POLICY,
                        "--ignore-not-found")
        remove_identity_policy(testbed)  # rendered with the rest; it would refuse the function's writes elsewhere


def _grant(testbed: LiveCluster, namespace: str, sa: str, rules: list[dict[str, Any]]) -> client.ApiClient:
    """A ServiceAccount of ``namespace`` with ``rules`` there, and a client that authenticates as it."""
    rbac = client.RbacAuthorizationV1Api(testbed.api)
    token = testbed.sa_token(namespace, sa)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": sa}, "rules": rules})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": sa}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]})
    return testbed.client_for_token(token)


EVERYTHING = [{"apiGroups": ["trainer.kubeflow.org", "jobset.x-k8s.io", "scheduling.run.ai"],
               "resources": ["*"], "verbs": ["*"]}]


@pytest.fixture(scope="module")
def team(testbed: LiveCluster, marks_policy: None) -> Iterator[dict[str, Any]]:
    """An opted-in namespace, a tenant allowed everything on the kinds kai_fn reads there, and an operator who may
    also write kai_fn's marks (bound to the ClusterRole kai-fn-marks)."""
    ns = enabled_namespace(testbed, "marks")
    tenant = _grant(testbed, ns, "tenant", EVERYTHING)
    operator = _grant(testbed, ns, "operator", EVERYTHING)
    client.RbacAuthorizationV1Api(testbed.api).create_cluster_role_binding({
        "metadata": {"name": f"kai-fn-marks-{ns}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kai-fn-marks"},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": ns}]})
    kai_fn = testbed.client_for_token(testbed.sa_token(NAMESPACE, "kai-fn"))
    wait_until_refused(POLICY, lambda: _create_trainjob(tenant, ns, "probe", {keys.MARKER_SKIPPED: "x"}))
    yield {"ns": ns, "tenant": tenant, "operator": operator, "kai-fn": kai_fn, "admin": testbed.api}
    client.CoreV1Api(testbed.api).delete_namespace(ns)
    client.RbacAuthorizationV1Api(testbed.api).delete_cluster_role_binding(f"kai-fn-marks-{ns}")


def _create_trainjob(api: client.ApiClient, ns: str, name: str, annotations: dict[str, str] | None = None,
                     spec: dict[str, Any] | None = None, dry_run: bool = True) -> dict[str, Any]:
    body = trainjob(name, "torch-distributed-kai", annotations=annotations, spec=spec)
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        *TRAINER, ns, "trainjobs", body, dry_run="All" if dry_run else None)


def _patch_template(key: str) -> dict[str, Any]:
    return {"runtimePatches": [{"manager": "tenant.example.com/tool", "trainingRuntimeSpec": {
        "template": {"metadata": {"annotations": {key: "out-of-scope"}}}}}]}


def _runtime(key: str) -> dict[str, Any]:
    from tests.conftest import sample_object
    rt = sample_object("clustertrainingruntime-torch-kai")
    rt["kind"], rt["metadata"] = "TrainingRuntime", {"name": "tenant-runtime"}
    rt["spec"]["template"].setdefault("metadata", {})["annotations"] = {key: "pg-forged"}
    return rt


def _podgroup(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "labels": labels or {}}, "spec": {"minMember": 1, "queue": "default-queue"}}


# (id, who, the write as a function of (client, namespace), refused with this in the message or None: admitted)
CREATES: list[tuple[str, str, Callable[[client.ApiClient, str], Any], str | None]] = [
    ("tenant: TrainJob marked skipped", "tenant",
     lambda api, ns: _create_trainjob(api, ns, "a", {keys.MARKER_SKIPPED: "out-of-scope"}), "kai-fn/skipped"),
    ("tenant: TrainJob marked with a PodGroup", "tenant",
     lambda api, ns: _create_trainjob(api, ns, "b", {keys.MARKER_PODGROUP: "pg-x"}), "kai-fn/podgroup"),
    ("tenant: TrainJob marked released in 9999", "tenant",
     lambda api, ns: _create_trainjob(api, ns, "c", {keys.RELEASED_AT_ANNOTATION: "9999-12-31T23:59:59Z"}),
     "kai-fn/released-at"),
    ("tenant: TrainJob asking to hold, with a timeout", "tenant",
     lambda api, ns: _create_trainjob(api, ns, "d", {keys.HOLD_ANNOTATION: "true",
                                                     keys.SCHEDULE_TIMEOUT_ANNOTATION: "600"}), None),
    ("tenant: runtimePatches copying kai-fn/skipped onto the JobSet", "tenant",
     lambda api, ns: _create_trainjob(api, ns, "e", spec=_patch_template(keys.MARKER_SKIPPED)),
     "Trainer copies this template metadata onto the JobSet"),
    ("tenant: a TrainingRuntime whose JobSet metadata carries kai-fn/podgroup", "tenant",
     lambda api, ns: client.CustomObjectsApi(api).create_namespaced_custom_object(
         *TRAINER, ns, "trainingruntimes", _runtime(keys.MARKER_PODGROUP), dry_run="All"),
     "Trainer copies this template metadata onto the JobSet"),
    ("tenant: a JobSet carrying kai-fn/skipped (Trainer would copy it)", "tenant",
     lambda api, ns: client.CustomObjectsApi(api).create_namespaced_custom_object(
         *JOBSETS, ns, "jobsets", _jobset("s", annotations={keys.MARKER_SKIPPED: "x"}), dry_run="All"),
     "kai-fn/skipped"),
    ("tenant: a plain JobSet, named by the other policy", "tenant",
     lambda api, ns: client.CustomObjectsApi(api).create_namespaced_custom_object(
         *JOBSETS, ns, "jobsets", _jobset("plain"), dry_run="All"), None),
    ("tenant: a JobSet no TrainJob controls, claiming to be named", "tenant",
     lambda api, ns: client.CustomObjectsApi(api).create_namespaced_custom_object(
         *JOBSETS, ns, "jobsets", _jobset("claims", owner=False, labels={keys.NAMED_LABEL: "true"}), dry_run="All"),
     keys.NAMED_LABEL),
    ("tenant: a JobSet claiming the previous version's hold", "tenant",
     lambda api, ns: client.CustomObjectsApi(api).create_namespaced_custom_object(
         *JOBSETS, ns, "jobsets", _jobset("hold", owner=False, labels={HELD_LABEL: "true"}), dry_run="All"),
     HELD_LABEL),
    ("tenant: a PodGroup labelled managed-by kai-fn", "tenant",
     lambda api, ns: client.CustomObjectsApi(api).create_namespaced_custom_object(
         *KAI_PG, ns, "podgroups", _podgroup("pg-y", {keys.MANAGED_BY_LABEL: keys.MANAGED_BY}), dry_run="All"),
     "app.kubernetes.io/managed-by"),
    ("tenant: a PodGroup of its own (kai_fn's adoption check refuses it as a gang)", "tenant",
     lambda api, ns: client.CustomObjectsApi(api).create_namespaced_custom_object(
         *KAI_PG, ns, "podgroups", _podgroup("pg-z"), dry_run="All"), None),
    ("operator: a JobSet released by operator", "operator",
     lambda api, ns: client.CustomObjectsApi(api).create_namespaced_custom_object(
         *JOBSETS, ns, "jobsets", _jobset("op", annotations={keys.MARKER_SKIPPED: "released-by-operator"}),
         dry_run="All"), None),
    ("admin: TrainJob marked skipped", "admin",
     lambda api, ns: _create_trainjob(api, ns, "f", {keys.MARKER_SKIPPED: "x"}), None),
]


@pytest.mark.parametrize("who, write, refused", [c[1:] for c in CREATES], ids=[c[0] for c in CREATES])
def test_who_may_write_kai_fns_marks_at_create(team: dict[str, Any], who: str,
                                               write: Callable[[client.ApiClient, str], Any], refused: str | None):
    if refused is None:
        write(team[who], team["ns"])
        return
    with pytest.raises(ApiException, match=r"\(403\)") as denied:
        write(team[who], team["ns"])
    assert POLICY in denied.value.body and refused in denied.value.body


def _named(testbed: LiveCluster, ns: str, name: str) -> dict[str, Any]:
    """A JobSet as Trainer makes it for a TrainJob, named by the mutating policy."""
    job = create_trainjob(testbed, ns, trainjob(name, "torch-distributed-kai"))
    body = _jobset(name)
    body["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
    made = client.CustomObjectsApi(testbed.api).create_namespaced_custom_object(*JOBSETS, ns, "jobsets", body)
    assert made["metadata"]["labels"][keys.NAMED_LABEL] == "true" and not made["spec"].get("suspend")
    return made


def _decide(api: client.ApiClient, ns: str, name: str, annotations: dict[str, str]) -> dict[str, Any]:
    ops = [{"op": "add", "path": f"/metadata/annotations/{k.replace('/', '~1')}", "value": v}
           for k, v in annotations.items()]
    return client.CustomObjectsApi(api).patch_namespaced_custom_object(
        *JOBSETS, ns, "jobsets", name, ops, dry_run="All", _content_type="application/json-patch+json")


UPDATES = [
    ("named-1", "tenant", {keys.MARKER_SKIPPED: "out-of-scope"}, "kai-fn/skipped"),
    ("named-2", "tenant", {keys.MARKER_PODGROUP: "pg-z"}, "kai-fn/podgroup"),
    ("named-3", "operator", {keys.MARKER_SKIPPED: keys.SKIPPED_BY_OPERATOR}, None),
    ("named-4", "kai-fn", {keys.MARKER_PODGROUP: "pg-held"}, None),
]


@pytest.mark.parametrize("name, who, annotations, refused", UPDATES,
                         ids=["tenant: skipped", "tenant: its own PodGroup as the decision",
                              "operator: released by operator", "kai_fn: a decision"])
def test_who_may_write_a_decision_on_a_named_jobset(testbed: LiveCluster, team: dict[str, Any], name: str, who: str,
                                                    annotations: dict[str, str], refused: str | None):
    _named(testbed, team["ns"], name)
    if refused is None:
        assert _decide(team[who], team["ns"], name, annotations)["metadata"]["annotations"].items() >= \
            annotations.items()
        return
    with pytest.raises(ApiException, match=r"\(403\)") as denied:
        _decide(team[who], team["ns"], name, annotations)
    assert POLICY in denied.value.body and refused in denied.value.body


def test_a_tenant_may_not_drop_the_naming_nor_mark_a_gang_bound_but_may_change_anything_else(
        testbed: LiveCluster, team: dict[str, Any]):
    ns, objs = team["ns"], client.CustomObjectsApi(team["tenant"])
    _named(testbed, ns, "kept")
    # The label alone: the naming policy writes it again in the same request (so nothing changes a mark).
    kept = objs.patch_namespaced_custom_object(*JOBSETS, ns, "jobsets", "kept", [
        {"op": "remove", "path": "/metadata/labels/kai-fn~1named"}], _content_type="application/json-patch+json")
    assert kept["metadata"]["labels"][keys.NAMED_LABEL] == "true"
    objs.patch_namespaced_custom_object(*JOBSETS, ns, "jobsets", "kept", {"metadata": {"labels": {"team": "a"}}})
    pg = copy.deepcopy(_podgroup("pg-kept", {keys.MANAGED_BY_LABEL: keys.MANAGED_BY}))
    client.CustomObjectsApi(team["kai-fn"]).create_namespaced_custom_object(*KAI_PG, ns, "podgroups", pg)
    with pytest.raises(ApiException, match=r"\(403\)") as marked:
        objs.patch_namespaced_custom_object(*KAI_PG, ns, "podgroups", "pg-kept", {
            "metadata": {"annotations": {keys.GANG_BOUND_ANNOTATION: "2026-01-01T00:00:00Z"}}})
    assert POLICY in marked.value.body and keys.GANG_BOUND_ANNOTATION in marked.value.body
    objs.patch_namespaced_custom_object(*KAI_PG, ns, "podgroups", "pg-kept", {"metadata": {"annotations": {
        "team": "a"}}})


def test_the_function_under_its_own_token_makes_the_gang_of_a_named_jobset_with_both_policies(
        testbed: LiveCluster, team: dict[str, Any]):
    seed_samples(testbed)
    ns = team["ns"]
    job = create_trainjob(testbed, ns, trainjob("made-by-kai-fn", "torch-distributed-kai",
                                                labels={"kai.scheduler/queue": "team-a"}))
    body = _jobset("made-by-kai-fn")
    body["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
    made = client.CustomObjectsApi(testbed.api).create_namespaced_custom_object(*JOBSETS, ns, "jobsets", body)
    with function_process(testbed) as fn:
        answer = send(fn.url, resource(job))
    assert answer.status == 200 and answer.headers["X-Kai-Fn-Outcome"] == "done", answer.body
    live = client.CustomObjectsApi(testbed.api).get_namespaced_custom_object(*JOBSETS, ns, "jobsets",
                                                                             "made-by-kai-fn")
    assert live["metadata"]["generation"] == made["metadata"]["generation"]
    assert keys.MARKER_PODGROUP not in (live["metadata"].get("annotations") or {})
    name = f"pg-made-by-kai-fn-{job['metadata']['uid']}"
    pg = client.CustomObjectsApi(testbed.api).get_namespaced_custom_object(*KAI_PG, ns, "podgroups", name)
    assert pg["metadata"]["labels"][keys.MANAGED_BY_LABEL] == keys.MANAGED_BY


def _patch_pg(api: client.ApiClient, ns: str, name: str, body: Any, *, json_patch: bool = False,
              status: bool = False) -> dict[str, Any]:
    objs = client.CustomObjectsApi(api)
    kw = {"_content_type": "application/json-patch+json"} if json_patch else {}
    patch = objs.patch_namespaced_custom_object_status if status else objs.patch_namespaced_custom_object
    return patch(*KAI_PG, ns, "podgroups", name, body, **kw)


# A tenant's edits of the spec of kai_fn's PodGroup (issue 39, attack 6): refused.
SPEC_EDITS = {
    "minMember down to 1": {"spec": {"minMember": 1}},
    "another queue": {"spec": {"queue": "someone-elses"}},
    "subgroups that ask for less": {"spec": {"subGroups": [{"name": "node", "minMember": 1}]}},
    "minMember with markUnschedulable": {"spec": {"minMember": 1, "markUnschedulable": True}},
}


@pytest.mark.parametrize("edit", SPEC_EDITS.values(), ids=list(SPEC_EDITS))
def test_a_tenant_may_not_edit_the_spec_of_kai_fns_podgroup(team: dict[str, Any], edit: dict[str, Any]):
    ns, name = team["ns"], f"pg-spec-{list(SPEC_EDITS.values()).index(edit)}"
    pg = _podgroup(name, {keys.MANAGED_BY_LABEL: keys.MANAGED_BY})
    pg["spec"]["minMember"] = 4
    client.CustomObjectsApi(team["kai-fn"]).create_namespaced_custom_object(*KAI_PG, ns, "podgroups", pg)
    with pytest.raises(ApiException, match=r"\(403\)") as denied:
        _patch_pg(team["tenant"], ns, name, edit)
    assert POLICY in denied.value.body and "the spec of a PodGroup kai_fn made" in denied.value.body
    live = client.CustomObjectsApi(team["admin"]).get_namespaced_custom_object(*KAI_PG, ns, "podgroups", name)
    assert live["spec"]["minMember"] == 4 and live["spec"]["queue"] == "default-queue"


def test_kais_own_writes_of_kai_fns_podgroup_pass_and_kai_fn_may_still_change_its_spec(team: dict[str, Any]):
    """What KAI v0.17.0 writes on a PodGroup its podgrouper skips, as it writes it: the scheduler's JSON Patch of
    its annotations and its status update, and the two spec fields its podgrouper leaves to external services. The
    policy judges fields, not who writes them, so the tenant (allowed to write PodGroups) stands in for KAI."""
    ns, name = team["ns"], "pg-kai-writes"
    pg = _podgroup(name, {keys.MANAGED_BY_LABEL: keys.MANAGED_BY})
    pg["spec"]["minMember"] = 4
    client.CustomObjectsApi(team["kai-fn"]).create_namespaced_custom_object(*KAI_PG, ns, "podgroups", pg)
    kai = team["tenant"]
    _patch_pg(kai, ns, name, [{"op": "add", "path": "/metadata/annotations",
                               "value": {"kai.scheduler/last-start-timestamp": "2026-12-05T09:00:00Z"}}],
              json_patch=True)
    _patch_pg(kai, ns, name, {"status": {"schedulingConditions": [{
        "type": "UnschedulableOnNodePool", "nodePool": "default", "reason": "OverLimit", "status": "True",
        "transitionID": "0", "lastTransitionTime": "2026-12-05T09:00:00Z", "message": "over its limit"}]}},
              status=True)
    _patch_pg(kai, ns, name, {"spec": {"markUnschedulable": True, "schedulingBackoff": 1}})
    _patch_pg(team["kai-fn"], ns, name, {"spec": {"minMember": 5}})
    live = client.CustomObjectsApi(team["admin"]).get_namespaced_custom_object(*KAI_PG, ns, "podgroups", name)
    assert live["spec"] | {"queue": "default-queue"} == {"minMember": 5, "queue": "default-queue",
                                                           "markUnschedulable": True, "schedulingBackoff": 1}
    assert live["status"]["schedulingConditions"][0]["reason"] == "OverLimit"


def test_a_tenant_may_edit_the_spec_of_its_own_podgroup(team: dict[str, Any]):
    ns = team["ns"]
    client.CustomObjectsApi(team["tenant"]).create_namespaced_custom_object(*KAI_PG, ns, "podgroups",
                                                                           _podgroup("pg-its-own"))
    assert _patch_pg(team["tenant"], ns, "pg-its-own", {"spec": {"minMember": 3}})["spec"]["minMember"] == 3
