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
from tests.testbed.conftest import LiveCluster

TRAINER = ("trainer.kubeflow.org", "v1alpha1")
KAI = ("scheduling.run.ai", "v2alpha2")
OVER_LIMIT = {"reason": "OverLimit", "message": "gpu limit 4, the gang needs 8",
              "details": {"queueDetails": {"name": "team-a"}}}


def sample(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "samples" / "cluster" / f"{name}.yaml").read_text())


@pytest.fixture
def gang(testbed: LiveCluster) -> Iterator[dict[str, Any]]:
    """llama-finetune in a fresh namespace, made into a gang and released by the real function server."""
    ns = f"gang-{uuid.uuid4().hex[:8]}"
    testbed.ensure_namespace(ns)
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
    js = sample("jobset-llama-finetune")
    js["metadata"] = {"name": "llama-finetune", "namespace": ns, "ownerReferences": [
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


def make_pods(g: dict[str, Any], bound: bool) -> None:
    core = client.CoreV1Api(g["testbed"].api)
    for i in range(4):
        core.create_namespaced_pod(g["ns"], {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"llama-finetune-node-0-{i}", "annotations": {"pod-group-name": g["pg"]},
                         "labels": {"jobset.sigs.k8s.io/jobset-name": "llama-finetune",
                                    "jobset.sigs.k8s.io/replicatedjob-name": "node"}},
            "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "node", "image": "busybox"}],
                     **({"nodeName": f"gpu-node-{i}"} if bound else {})}})


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
    make_pods(gang, bound=False)
    for _ in range(2):
        assert send(gang["url"], resource(copy.deepcopy(pg), "update")).status == 200
    assert reasons_posted(gang) == ["GangUnschedulable"]
    code, report = explain(gang)
    assert (code, report["status"]) == (1, "blocked") and report["next"].startswith("OverLimit")
    assert report["kai"]["pods"] == {"node": {"bound": 0, "waiting": 4}}

    client.CoreV1Api(gang["testbed"].api).delete_collection_namespaced_pod(gang["ns"], grace_period_seconds=0)
    cleared = kai_says(gang)
    make_pods(gang, bound=True)
    for update in (cleared, pg):  # the bound update, then the old unschedulable one arriving late
        assert send(gang["url"], resource(copy.deepcopy(update), "update")).status == 200
    assert reasons_posted(gang) == ["GangBound", "GangUnschedulable"]
    tj = gang["objs"].get_namespaced_custom_object(*TRAINER, gang["ns"], "trainjobs", "llama-finetune")
    assert "kai-fn/bound" in tj["metadata"]["annotations"]
    code, report = explain(gang)
    assert (code, report["status"]) == (0, "bound")


def test_explain_of_a_trainjob_that_does_not_exist_is_exit_2(testbed):
    done = subprocess.run([sys.executable, "-m", "kai_fn", "explain", "default/nope", "--kubeconfig",
                           str(testbed.kubeconfig)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip() == "error: no TrainJob default/nope"
