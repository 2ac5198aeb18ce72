"""Scenario 11, a tenant against the gate (docs/security.md): while another team's burst of TrainJobs runs, a tenant
allowed everything on TrainJobs, JobSets and PodGroups in its own namespace tries kai_fn's marks (a runtimePatch that
Trainer would copy onto the JobSet, a decision written on its named JobSet, the naming label removed) and a PodGroup
of its gang's name made before kai_fn's (its queue missing, so kai_fn makes none as long as the tenant likes). Each
write of a mark is refused by the API server, the pre-made PodGroup is never taken as kai_fn's gang (a Warning on the
TrainJob names it), and the other team's gangs bind whole."""
from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client.rest import ApiException

from kai_fn.core import keys
from kai_fn.local.chain import MARKS_POLICY, TRAINER
from tests.chain.conftest import REPORT, wait_for
from tests.chain.gangs import bound, jobset, podgroup, podgroup_annotations, pods, table, trainjob_warnings

BURST = 6
JOBSETS = ("jobset.x-k8s.io", "v1alpha2")
KAI_PG = ("scheduling.run.ai", "v2alpha2")


def _tenant(chain, ns: str) -> client.ApiClient:
    """A ServiceAccount of ``ns`` allowed everything on the kinds kai_fn reads there (not on kai_fn's marks)."""
    core, rbac = client.CoreV1Api(chain.api), client.RbacAuthorizationV1Api(chain.api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "tenant"}})
    rbac.create_namespaced_role(ns, {"metadata": {"name": "tenant"}, "rules": [{
        "apiGroups": ["trainer.kubeflow.org", "jobset.x-k8s.io", "scheduling.run.ai"], "resources": ["*"],
        "verbs": ["*"]}]})
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": "tenant"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                    "name": "tenant"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}]})
    token = core.create_namespaced_service_account_token(
        "tenant", ns, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))).status.token
    admin = chain.api.configuration
    cfg = client.Configuration()
    cfg.host, cfg.ssl_ca_cert = admin.host, admin.ssl_ca_cert
    cfg.api_key, cfg.api_key_prefix = {"authorization": token}, {"authorization": "Bearer"}
    return client.ApiClient(cfg)


def _refused(write) -> str:
    """The API server's refusal of ``write`` by the marks policy (loaded asynchronously: retried for a while)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            write()
        except ApiException as error:
            if error.status == 403 and MARKS_POLICY in str(error.body):
                return str(error.body)
            raise
        if time.monotonic() > deadline:
            raise AssertionError(f"{MARKS_POLICY} let the write through for 30 s")
        time.sleep(0.5)


def test_a_tenants_marks_and_premade_podgroup_change_no_gang_while_another_teams_burst_binds_whole(
        chain, pool, namespaces):
    pool("tenant").ensure(f"{BURST + 2}x8")
    other, mine = namespaces("burst"), namespaces("tenant")
    for ns in (other, mine):
        chain.runtime(ns, pool="tenant")
    tenant = _tenant(chain, mine)
    objs = client.CustomObjectsApi(tenant)
    for i in range(BURST):
        chain.trainjob(other, f"tj-{i}", num_nodes=1)

    # A runtimePatch whose annotations Trainer would copy onto the JobSet: refused when submitted.
    patched = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
               "metadata": {"name": "patched"}, "spec": {
                   "runtimeRef": {"name": "chain", "kind": "TrainingRuntime", "apiGroup": TRAINER[0]},
                   "runtimePatches": [{"manager": "tenant.example.com/tool", "trainingRuntimeSpec": {"template": {
                       "metadata": {"annotations": {keys.MARKER_SKIPPED: "out-of-scope"}}}}}]}}
    said = _refused(lambda: objs.create_namespaced_custom_object(*TRAINER, mine, "trainjobs", patched))
    assert "Trainer copies this template metadata onto the JobSet" in said

    # Its own TrainJob, in a queue that does not exist: kai_fn refuses the gang and makes no PodGroup.
    job = objs.create_namespaced_custom_object(*TRAINER, mine, "trainjobs", {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "mine", "labels": {keys.KAI_QUEUE_LABEL: "tenant-queue-missing"}},
        "spec": {"runtimeRef": {"name": "chain", "kind": "TrainingRuntime", "apiGroup": TRAINER[0]},
                 "trainer": {"numNodes": 2}}})
    wait_for("kai_fn refuses the gang of a missing queue (QueueNotFound)",
             lambda: trainjob_warnings(chain, mine, "mine", "QueueNotFound"), explain=lambda: table(chain, mine))
    said = _refused(lambda: objs.patch_namespaced_custom_object(*JOBSETS, mine, "jobsets", "mine", [
        {"op": "add", "path": "/metadata/annotations/kai-fn~1podgroup", "value": "pg-forged"}],
        _content_type="application/json-patch+json"))
    assert keys.MARKER_PODGROUP in said
    kept = objs.patch_namespaced_custom_object(*JOBSETS, mine, "jobsets", "mine", [
        {"op": "remove", "path": "/metadata/labels/kai-fn~1named"}], _content_type="application/json-patch+json")
    assert kept["metadata"]["labels"][keys.NAMED_LABEL] == "true", "the naming policy writes it again"

    # The PodGroup of its gang's name, made by the tenant; the queue label moved to one that exists, so kai_fn's next
    # pass gets as far as the gang.
    name = f"pg-mine-{job['metadata']['uid']}"
    objs.create_namespaced_custom_object(*KAI_PG, mine, "podgroups", {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": name},
        "spec": {"minMember": 1, "queue": "default-queue"}})
    objs.patch_namespaced_custom_object(*TRAINER, mine, "trainjobs", "mine",
                                        {"metadata": {"labels": {keys.KAI_QUEUE_LABEL: "default-queue"}}})
    refused = wait_for("kai_fn refuses the tenant's PodGroup as the gang (NotMadeByKaiFn)",
                       lambda: trainjob_warnings(chain, mine, "mine", "NotMadeByKaiFn"),
                       explain=lambda: table(chain, mine))
    assert name in refused[0] and "no controller ownerReference" in refused[0], refused

    wait_for(f"the other team's {BURST} gangs bind whole",
             lambda: all(len(bound(pods(chain, other, f"tj-{i}"))) == 1 for i in range(BURST)),
             deadline_s=180, explain=lambda: table(chain, other))
    named = jobset(chain, mine, "mine")
    assert not named["spec"].get("suspend") and keys.MARKER_PODGROUP not in (named["metadata"].get("annotations") or {})
    groups = client.CustomObjectsApi(chain.api).list_namespaced_custom_object(*KAI_PG, mine, "podgroups")["items"]
    assert [(g["metadata"]["name"], g["metadata"].get("labels")) for g in groups] == [(name, None)], \
        "kai_fn made no gang for the tenant, nor took the tenant's PodGroup for one"
    REPORT.append(f"tenant: marks refused by {MARKS_POLICY}; pre-made PodGroup refused ({refused[0][:80]}...); "
                  f"the other team's {BURST} gangs bound whole")


def test_a_tenants_edit_of_its_gangs_podgroup_spec_is_refused_and_kai_binds_the_gang_whole(chain, pool, namespaces):
    """Issue 39, attack 6, on the real KAI v0.17.0 with knative/base's policies: the tenant's ``minMember: 1`` on the
    PodGroup kai_fn made for its TrainJob is refused; KAI's own writes of that PodGroup (status, annotations) pass,
    so it binds the gang whole, and kai_fn, counting against its plan, marks it bound."""
    pool("tenant").ensure("2x8")
    mine = namespaces("spec-edit")
    chain.runtime(mine, pool="tenant")
    objs = client.CustomObjectsApi(_tenant(chain, mine))
    chain.trainjob(mine, "kept", num_nodes=2)
    made_pg = wait_for("kai_fn makes the gang", lambda: podgroup(chain, mine, "kept"), explain=lambda: table(chain, mine))
    name = made_pg["metadata"]["name"]
    said = _refused(lambda: objs.patch_namespaced_custom_object(*KAI_PG, mine, "podgroups", name,
                                                                {"spec": {"minMember": 1}}))
    assert "the spec of a PodGroup kai_fn made" in said
    wait_for("KAI binds the gang whole", lambda: len(bound(pods(chain, mine, "kept"))) == 2, deadline_s=120,
             explain=lambda: table(chain, mine))
    wait_for("kai_fn marks it bound", lambda: keys.GANG_BOUND_ANNOTATION in podgroup_annotations(chain, mine, "kept"),
             deadline_s=120, explain=lambda: table(chain, mine))
    assert (podgroup(chain, mine, "kept") or {})["spec"]["minMember"] == 2
    REPORT.append(f"tenant: minMember 1 on kai_fn's PodGroup refused by {MARKS_POLICY}; KAI bound the gang whole")
