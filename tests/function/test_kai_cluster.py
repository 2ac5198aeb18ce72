"""What KAI's podgrouper reads besides the workload, read by the function (kai_fn/function/kai_cluster.py): the
PriorityClasses that exist, listed only when one is named, and KAI's defaults ConfigMap when one is configured."""
from __future__ import annotations

import json

import pytest

from kai_fn.local.emulator import Fault
from tests.ce import resource, send
from tests.conftest import KAI_PG, TRAINER, sample_object, seed
from tests.builders import held_by_0_2

pytestmark = pytest.mark.usefixtures("forgetful")

NS, NAME = "team-a", "llama-finetune"


def priority_class(name: str) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": 50}


def defaults_configmap(*types: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kai-defaults", "namespace": "kai-scheduler"},
            "data": {"types": json.dumps(list(types))}}


def decide(api, function, labels: dict[str, str], *objects: dict) -> dict:
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"]["labels"].update(labels)
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"),
         sample_object("clustertrainingruntime-torch-kai"), tj, held_by_0_2(sample_object("jobset-llama-finetune")), *objects)
    api.reset_calls()
    answer = send(function.url, resource(api.get(TRAINER, "TrainJob", NS, NAME)))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "done")
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    return pg


def listed_priority_classes(api) -> int:
    return sum(1 for c in api.calls if (c.resource, c.verb) == ("priorityclasses", "list"))


@pytest.mark.parametrize(("labels", "classes", "expected", "lists"), [
    pytest.param({}, [], "train", 0, id="nothing-named-train-without-a-list"),
    pytest.param({"priorityClassName": "build"}, [priority_class("build")], "build", 1, id="a-class-that-exists"),
    pytest.param({"priorityClassName": "build"}, [], "train", 1, id="a-class-that-does-not-exist-is-passed-over"),
])
def test_the_priority_class_is_checked_only_when_one_is_named(api, function, labels, classes, expected, lists):
    pg = decide(api, function, labels, *classes)
    assert pg["spec"]["priorityClassName"] == expected
    assert listed_priority_classes(api) == lists


@pytest.mark.parametrize("status", [403, 500])
def test_priority_classes_that_cannot_be_listed(api, function, status):
    """Not allowed (an install whose RBAC predates the list): every class named is taken to exist, as before kai_fn
    read them. A failing API: the event is retried, nothing made."""
    api.faults = lambda call: Fault(status=status) if call.resource == "priorityclasses" else None
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"]["labels"]["priorityClassName"] = "build"
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"),
         sample_object("clustertrainingruntime-torch-kai"), tj, held_by_0_2(sample_object("jobset-llama-finetune")))
    answer = send(function.url, resource(api.get(TRAINER, "TrainJob", NS, NAME)))
    made = api.list(KAI_PG, "PodGroup", NS)
    if status == 403:
        assert answer.headers["X-Kai-Fn-Outcome"] == "done" and made[0]["spec"]["priorityClassName"] == "build"
    else:
        assert answer.status == 503 and made == []


def test_kais_defaults_configmap_is_read_when_configured(api, functions):
    function = functions(KAI_DEFAULTS_CONFIGMAP="kai-scheduler/kai-defaults")
    pg = decide(api, function, {}, priority_class("inference"), defaults_configmap(
        {"typeName": "TrainJob", "group": "trainer.kubeflow.org", "priorityName": "inference",
         "preemptibility": "non-preemptible"}))
    assert (pg["spec"]["priorityClassName"], pg["spec"]["preemptibility"]) == ("inference", "non-preemptible")


def test_a_configured_configmap_that_is_missing_leaves_train(api, functions):
    function = functions(KAI_DEFAULTS_CONFIGMAP="kai-scheduler/kai-defaults")
    pg = decide(api, function, {})
    assert pg["spec"]["priorityClassName"] == "train" and "preemptibility" not in pg["spec"]


def test_the_node_pool_label_key_is_the_setting(api, functions):
    function = functions(KAI_NODEPOOL_LABEL_KEY="example.com/pool")
    jobset = held_by_0_2(sample_object("jobset-llama-finetune"))
    rt = sample_object("clustertrainingruntime-torch-kai")
    for rj in rt["spec"]["template"]["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})["example.com/pool"] = "a"
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"), rt,
         sample_object("trainjob-llama-finetune"), jobset)
    assert send(function.url, resource(api.get(TRAINER, "TrainJob", NS, NAME))).status == 200
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    assert pg["metadata"]["labels"]["example.com/pool"] == "a"
