"""The gang's status and ``explain`` against a real API server (the upstream CRDs, Event validation, RBAC-free
admin access): KAI's part, writing ``status.schedulingConditions`` through the status subresource and binding
pods by ``spec.nodeName``, is played by the test, because the KAI scheduler cannot be built here (TEAM.md).
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from kai_fn.local.process import REPO, FunctionProcess
from tests.ce import resource, send
from tests.testbed.conftest import LiveCluster, wait_for
from tests.testbed.kai_fn_install import ENABLED
from tests.builders import held_by_0_2

TRAINER = ("trainer.kubeflow.org", "v1alpha1")
KAI = ("scheduling.run.ai", "v2alpha2")
OVER_LIMIT = {"reason": "OverLimit", "message": "gpu limit 4, the gang needs 8",
              "details": {"queueDetails": {"name": "team-a"}}}


def sample(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "samples" / "cluster" / f"{name}.yaml").read_text())


@pytest.fixture
def gang(testbed: LiveCluster) -> Iterator[dict[str, Any]]:
    """llama-finetune in a fresh namespace, its JobSet as the admission policy holds it, made into a gang and released
    by the real function server."""
    ns = f"gang-{uuid.uuid4().hex[:8]}"
    testbed.ensure_namespace(ns, ENABLED)
    objs = client.CustomObjectsApi(testbed.api)
    for queue in ("queue-default-parent", "queue-team-a"):
        try:
            objs.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", sample(queue))
        except client.ApiException as e:
            if e.status != 409:
                raise
    try:
        objs.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", sample("clustertrainingruntime-torch-kai"))
    except client.ApiException as e:
        if e.status != 409:
            raise
    tj = sample("trainjob-llama-finetune")
    tj["metadata"] = {"name": tj["metadata"]["name"], "namespace": ns, "labels": tj["metadata"]["labels"]}
    tj = objs.create_namespaced_custom_object(*TRAINER, ns, "trainjobs", tj)
    js = held_by_0_2(sample("jobset-llama-finetune"))
    js["metadata"] = {"name": "llama-finetune", "namespace": ns, "labels": {"kai-fn/held": "true"}, "ownerReferences": [
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "llama-finetune",
         "uid": tj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]}
    objs.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", js)
    with FunctionProcess({"KUBECONFIG": str(testbed.kubeconfig), "KAI_FN_RUNTIME_CACHE_SECONDS": "0",
                          "KAI_FN_BACKGROUND_WORKERS": "0"}) as fn:
        assert send(fn.url, resource(tj)).status == 200
        pg_name = f"pg-llama-finetune-{tj['metadata']['uid']}"
        yield {"ns": ns, "url": fn.url, "pg": pg_name, "uid": tj["metadata"]["uid"], "objs": objs, "testbed": testbed}
    client.CoreV1Api(testbed.api).delete_namespace(ns)


def kai_says(g: dict[str, Any], *reasons: dict[str, Any]) -> dict[str, Any]:
    pg = g["objs"].get_namespaced_custom_object(*KAI, g["ns"], "podgroups", g["pg"])
    pg["status"] = {"schedulingConditions": [{"type": "UnschedulableOnNodePool", "nodePool": "default",
                                              "status": "True", "reasons": list(reasons)}]} if reasons else {}
    return g["objs"].replace_namespaced_custom_object_status(*KAI, g["ns"], "podgroups", g["pg"], pg)


def trainer_pods(g: dict[str, Any]) -> list[client.V1Pod]:
    """The JobSet's pods, made by JobSet's and the Job controller once kai_fn resumed it (no scheduler runs here)."""
    core = client.CoreV1Api(g["testbed"].api)
    return wait_for("the Job controller makes the gang's 4 pods", lambda: len(
        ps := core.list_namespaced_pod(g["ns"], label_selector="jobset.sigs.k8s.io/jobset-name=llama-finetune")
        .items) == 4 and ps)


def bind(g: dict[str, Any], pods: list[client.V1Pod]) -> None:
    """As a scheduler binds: the binding subresource of each pod."""
    core = client.CoreV1Api(g["testbed"].api)
    for i, pod in enumerate(pods):
        core.create_namespaced_pod_binding(pod.metadata.name, g["ns"], client.V1Binding(
            metadata=client.V1ObjectMeta(name=pod.metadata.name),
            target=client.V1ObjectReference(kind="Node", name=f"gpu-node-{i}")), _preload_content=False)


def reasons_posted(g: dict[str, Any]) -> list[str]:
    events = client.CoreV1Api(g["testbed"].api).list_namespaced_event(g["ns"]).items
    return sorted(e.reason for e in events if e.reason in ("GangUnschedulable", "GangBound"))


def explain(g: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "kai_fn", "explain", f"{g['ns']}/llama-finetune", "--kubeconfig",
                           str(g["testbed"].kubeconfig), "-o", "json"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.stderr == ""
    return done.returncode, json.loads(done.stdout)


def test_kais_reasons_then_bound_pods_give_one_event_each_and_explain_follows(gang):
    code, report = explain(gang)
    assert (code, report["status"]) == (0, "progressing") and report["state"]["released"] is True
    assert report["state"]["jobSet"].startswith("carries the plan")

    pg = kai_says(gang, OVER_LIMIT)  # accepted by the real CRD's status schema
    pods = trainer_pods(gang)
    assert {p.metadata.annotations["pod-group-name"] for p in pods} == {gang["pg"]}
    for _ in range(2):
        assert send(gang["url"], resource(copy.deepcopy(pg), "update")).status == 200
    assert reasons_posted(gang) == ["GangUnschedulable"]
    code, report = explain(gang)
    assert (code, report["status"]) == (1, "blocked") and report["next"].startswith("OverLimit")
    assert report["kai"]["pods"] == {"node": {"bound": 0, "waiting": 4}}

    cleared = kai_says(gang)
    bind(gang, pods)
    for update in (cleared, pg):  # the bound update, then the old unschedulable one arriving late
        assert send(gang["url"], resource(copy.deepcopy(update), "update")).status == 200
    assert reasons_posted(gang) == ["GangBound", "GangUnschedulable"]
    group = gang["objs"].get_namespaced_custom_object(*KAI, gang["ns"], "podgroups", gang["pg"])
    assert "kai-fn/bound" in group["metadata"]["annotations"]
    tj = gang["objs"].get_namespaced_custom_object(*TRAINER, gang["ns"], "trainjobs", "llama-finetune")
    assert not any(k.startswith("kai-fn/") for k in tj["metadata"].get("annotations") or {})
    code, report = explain(gang)
    assert (code, report["status"]) == (0, "bound")


def test_explain_of_a_trainjob_that_does_not_exist_is_exit_2(testbed):
    done = subprocess.run([sys.executable, "-m", "kai_fn", "explain", "default/nope", "--kubeconfig",
                           str(testbed.kubeconfig)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip() == "error: no TrainJob default/nope"
