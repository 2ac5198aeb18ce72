"""The admission policy from knative/, on a real API server with JobSet's webhooks: a JobSet that a TrainJob
controls and whose pods ask for KAI comes back held (suspended, labelled ``kai-fn/held``) in an opted-in namespace,
and untouched wherever the policy must not act; Trainer's re-applies of ``suspend: false`` (server-side apply, field
manager ``trainer``, forced, as Trainer's TrainJob controller applies) are turned back while the hold stands and
never drop it; kai_fn's one patch ends it for good; the function then decides it. Trainer itself runs on the chain
(tests/chain/test_plain_submission.py); here its apply is made as it makes it."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client

from kai_fn.core import keys
from kai_fn.local.chain import probe_jobset, wait_for_policy
from tests.ce import resource, send
from tests.conftest import sample_object
from tests.testbed.kai_fn_install import (
    AUDIENCE, NAMESPACE, POLICY, SOURCE, SOURCE_SA, TRAINER, admission_policy, create_ignoring_conflict,
    create_trainjob, enabled_namespace, function_process, trainjob,
)

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

JOBSETS = ("jobset.x-k8s.io", "v1alpha2")
HELD = keys.HELD_LABEL


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


CASES = [
    # (id, the JobSet as created, in the enabled namespace?, held by the policy?)
    ("trainjob-controlled-asks-for-kai", _jobset("plain"), True, True),
    ("with-labels-of-its-own", _jobset("labelled", labels={"team": "a"}), True, True),
    ("already-suspended", _jobset("paused", suspend=True), True, True),
    ("another-scheduler", _jobset("default-sched", "default-scheduler"), True, False),
    ("no-owner", _jobset("users-own", owner=False), True, False),
    ("owner-not-controller", _jobset("not-controlled", controller=False), True, False),
    ("decided-gang", _jobset("decided", annotations={keys.MARKER_PODGROUP: "pg-x"}), True, False),
    ("decided-skipped", _jobset("skipped", annotations={keys.MARKER_SKIPPED: "out-of-scope"}), True, False),
    ("other-namespace", _jobset("elsewhere"), False, False),
]


@pytest.mark.parametrize("submitted,in_enabled,held", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_policy_holds_exactly_the_jobsets_kai_fn_will_decide(
        testbed: LiveCluster, enabled: str, other: str, submitted: dict[str, Any], in_enabled: bool, held: bool):
    made = client.CustomObjectsApi(testbed.api).create_namespaced_custom_object(
        *JOBSETS, enabled if in_enabled else other, "jobsets", copy.deepcopy(submitted), dry_run="All")
    labels = made["metadata"].get("labels") or {}
    if held:
        assert made["spec"]["suspend"] is True and labels.get(HELD) == "true"
        assert {k: v for k, v in labels.items() if k != HELD} == (submitted["metadata"].get("labels") or {})
    else:
        assert made["spec"].get("suspend", False) is bool(submitted["spec"].get("suspend")) and HELD not in labels
    assert (made["metadata"].get("annotations") or {}) == (submitted["metadata"].get("annotations") or {})


def test_the_policy_is_cluster_scoped_although_kustomize_renders_a_namespace(testbed: LiveCluster, policy: None):
    shown = testbed.kubectl("get", "mutatingadmissionpolicies.admissionregistration.k8s.io", POLICY,
                            "-o", "jsonpath={.metadata.namespace}|{.spec.failurePolicy}").stdout
    assert shown == "|Fail"


# -- Trainer's re-applies while held, and the end of the hold --------------------------------------------------------

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


def _owners(jobset: dict[str, Any]) -> dict[str, set[str]]:
    """Field manager -> the top-level fields it owns that matter here (spec.suspend, the hold's label)."""
    owned: dict[str, set[str]] = {}
    for entry in jobset["metadata"].get("managedFields") or []:
        fields = entry.get("fieldsV1") or {}
        mine = owned.setdefault(entry["manager"], set())
        if "f:suspend" in (fields.get("f:spec") or {}):
            mine.add("spec.suspend")
        if f"f:{HELD}" in ((fields.get("f:metadata") or {}).get("f:labels") or {}):
            mine.add(f"labels.{HELD}")
    return owned


def _applied_at(jobset: dict[str, Any]) -> str:
    """When Trainer's apply last changed the stored JobSet (its managedFields entry's time)."""
    (entry,) = [e for e in jobset["metadata"]["managedFields"] if e["manager"] == "trainer"]
    return entry["time"]


def test_trainers_re_applies_are_turned_back_without_a_write_and_never_drop_the_hold(testbed: LiveCluster,
                                                                                      enabled: str):
    objs = client.CustomObjectsApi(testbed.api)
    job = create_trainjob(testbed, enabled, trainjob("reapplied", "torch"))
    body = _jobset("reapplied", suspend=False)
    body["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
    first = _trainer_apply(testbed, enabled, body, suspend=False)  # Trainer's create: the TrainJob runs
    assert first["spec"]["suspend"] is True and first["metadata"]["labels"][HELD] == "true"
    # spec.suspend stays Trainer's (it applies that field; the policy changed its value), and the label the policy
    # added is nobody's: a field no manager owns is never removed by a manager's later apply that leaves it out.
    owners = _owners(first)
    assert owners["trainer"] == {"spec.suspend"}
    assert [m for m, fields in owners.items() if f"labels.{HELD}" in fields] == []
    writes = {(first["metadata"]["generation"], _applied_at(first))}
    for _ in range(5):  # Trainer reconciles again and again while the JobSet is held
        again = _trainer_apply(testbed, enabled, body, suspend=False)
        assert again["spec"]["suspend"] is True and again["metadata"]["labels"][HELD] == "true"
        writes.add((again["metadata"]["generation"], _applied_at(again)))
    # JobSet's controller writes its status meanwhile (resourceVersions move); Trainer's applies write nothing.
    assert len(writes) == 1, "a re-apply turned back by the policy changes nothing stored"
    live = objs.get_namespaced_custom_object(*JOBSETS, enabled, "jobsets", "reapplied")
    assert live["spec"]["suspend"] is True and live["metadata"]["labels"][HELD] == "true"


def test_kai_fns_decision_ends_the_hold_and_trainers_next_apply_keeps_it_running(testbed: LiveCluster,
                                                                                  enabled: str):
    objs = client.CustomObjectsApi(testbed.api)
    job = create_trainjob(testbed, enabled, trainjob("decided-now", "torch"))
    body = _jobset("decided-now", suspend=False)
    body["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
    _trainer_apply(testbed, enabled, body, suspend=False)
    decision = [
        {"op": "test", "path": "/metadata/labels/kai-fn~1held", "value": "true"},
        {"op": "add", "path": "/metadata/annotations", "value": {keys.MARKER_PODGROUP: "pg-decided-now"}},
        {"op": "remove", "path": "/metadata/labels/kai-fn~1held"},
        {"op": "replace", "path": "/spec/suspend", "value": False},
    ]
    released = objs.patch_namespaced_custom_object(*JOBSETS, enabled, "jobsets", "decided-now", decision,
                                                   _content_type="application/json-patch+json")
    assert released["spec"]["suspend"] is False and HELD not in (released["metadata"].get("labels") or {})
    after = _trainer_apply(testbed, enabled, body, suspend=False)
    assert after["spec"]["suspend"] is False and HELD not in (after["metadata"].get("labels") or {})
    assert after["metadata"]["annotations"][keys.MARKER_PODGROUP] == "pg-decided-now"
    suspended = _trainer_apply(testbed, enabled, body, suspend=True)  # its TrainJob suspended later (Kueue)
    assert suspended["spec"]["suspend"] is True and HELD not in (suspended["metadata"].get("labels") or {})
    resumed = _trainer_apply(testbed, enabled, body, suspend=False)
    assert resumed["spec"]["suspend"] is False, "a decided JobSet is never held again"


def test_a_jobset_that_runs_before_its_namespace_opts_in_is_never_suspended_by_a_later_write(testbed: LiveCluster,
                                                                                              policy: None):
    objs, core = client.CustomObjectsApi(testbed.api), client.CoreV1Api(testbed.api)
    ns = enabled_namespace(testbed, "adm-late", labels=None)
    try:
        job = create_trainjob(testbed, ns, trainjob("early", "torch"))
        body = _jobset("early", suspend=False)
        body["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
        running = _trainer_apply(testbed, ns, body, suspend=False)
        assert running["spec"]["suspend"] is False and HELD not in (running["metadata"].get("labels") or {})
        core.patch_namespace(ns, {"metadata": {"labels": {"kai-fn.io/enabled": "true"}}})
        wait_for_policy(testbed.api, ns, "kai-scheduler")  # the policy acts here now
        touched = objs.patch_namespaced_custom_object(*JOBSETS, ns, "jobsets", "early",
                                                      {"metadata": {"annotations": {"team": "a"}}})
        assert touched["spec"]["suspend"] is False and HELD not in (touched["metadata"].get("labels") or {})
        again = _trainer_apply(testbed, ns, body, suspend=False)
        assert again["spec"]["suspend"] is False and HELD not in (again["metadata"].get("labels") or {})
    finally:
        core.delete_namespace(ns)


# -- and then the function decides it --------------------------------------------------------------------------------

def _as_trainer_would(jobset: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """The sample JobSet, owned by the TrainJob just created, as Trainer submits it (not suspended, not labelled:
    the policy holds it)."""
    jobset = copy.deepcopy(jobset)
    meta = jobset["metadata"]
    meta.pop("uid", None)
    meta["labels"].pop(HELD, None)
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
                                                  _as_trainer_would(sample_object("jobset-llama-finetune"), job))
    assert jobset["spec"]["suspend"] is True and jobset["metadata"]["labels"][HELD] == "true"
    token = testbed.sa_token(NAMESPACE, SOURCE_SA, [AUDIENCE])
    answer = send(function.url, resource(jobset), token=token)  # the held JobSet's event
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done"), answer.body
    live = objs.get_namespaced_custom_object(*TRAINER, enabled, "trainjobs", job["metadata"]["name"])
    writers = {e["manager"] for e in live["metadata"].get("managedFields") or []}
    assert keys.FIELD_MANAGER not in writers and not any(k.startswith("kai-fn/") for k in
                                                         live["metadata"].get("annotations") or {}), live["metadata"]
    podgroup = f"pg-{job['metadata']['name']}-{job['metadata']['uid']}"
    pg = objs.get_namespaced_custom_object("scheduling.run.ai", "v2alpha2", enabled, "podgroups", podgroup)
    assert pg["spec"]["minMember"] == 4
    decided = objs.get_namespaced_custom_object(*JOBSETS, enabled, "jobsets", job["metadata"]["name"])
    assert decided["spec"]["suspend"] is False and HELD not in decided["metadata"]["labels"]
    assert decided["metadata"]["annotations"][keys.MARKER_PODGROUP] == podgroup
    templates = [rj["template"]["spec"]["template"]["metadata"] for rj in decided["spec"]["replicatedJobs"]]
    assert len(templates) == 1 and all(t["annotations"]["pod-group-name"] == podgroup for t in templates)


def test_a_plainly_submitted_trainjob_that_never_asks_for_kai_is_never_held_nor_touched(testbed: LiveCluster,
                                                                                         enabled: str, function):
    objs = client.CustomObjectsApi(testbed.api)
    job = create_trainjob(testbed, enabled, trainjob("resnet-eval", "torch-distributed"))
    jobset = sample_object("jobset-whisper-asr")
    jobset["metadata"]["name"] = "resnet-eval"
    for rj in jobset["spec"]["replicatedJobs"]:  # its runtime sends its pods to the default scheduler
        rj["template"]["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    made = objs.create_namespaced_custom_object(*JOBSETS, enabled, "jobsets", _as_trainer_would(jobset, job))
    assert made["spec"]["suspend"] is False and HELD not in made["metadata"]["labels"]
    token = testbed.sa_token(NAMESPACE, SOURCE_SA, [AUDIENCE])
    answer = send(function.url, resource(job), token=token)
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "ignored"), answer.body
    live = objs.get_namespaced_custom_object(*JOBSETS, enabled, "jobsets", "resnet-eval")
    assert live["metadata"]["generation"] == made["metadata"]["generation"]  # JobSet's status writes aside
    assert keys.FIELD_MANAGER not in {e["manager"] for e in live["metadata"]["managedFields"]}
    podgroups = objs.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", enabled, "podgroups")["items"]
    assert [pg for pg in podgroups if pg["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]] == []
