"""Opt-in means opt-in on a real API server (issue 39, attack 4): the function, under its own ServiceAccount and the
rendered RBAC, lists the namespaces labelled kai-fn.io/enabled=true, makes the gang owed in one of them, and in a
namespace that did not opt in neither reads nor writes anything, whether an event names it or the resync runs."""
from __future__ import annotations

import copy
from typing import Any

from kubernetes import client

from kai_fn.core import keys
from kai_fn.function.migration.jobset_hold import HELD_LABEL
from tests.ce import ping, resource, send
from tests.conftest import sample_object
from tests.testbed.conftest import LiveCluster
from tests.testbed.kai_fn_install import TRAINER, create_trainjob, enabled_namespace, function_process, seed_samples
from tests.builders import held_by_0_2

JOBSETS = ("jobset.x-k8s.io", "v1alpha2")
PODGROUPS = ("scheduling.run.ai", "v2alpha2")


def held_llama(testbed: LiveCluster, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The sample TrainJob and its JobSet as the previous version's policy held it, in ``namespace``: a pass owed."""
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"] = {"name": tj["metadata"]["name"], "labels": tj["metadata"].get("labels") or {}}
    made = create_trainjob(testbed, namespace, tj)
    js = copy.deepcopy(held_by_0_2(sample_object("jobset-llama-finetune")))
    js["metadata"] = {"name": made["metadata"]["name"], "labels": js["metadata"]["labels"], "ownerReferences": [{
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": made["metadata"]["name"],
        "uid": made["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]}
    jobset = client.CustomObjectsApi(testbed.api).create_namespaced_custom_object(*JOBSETS, namespace, "jobsets", js)
    return made, jobset


def writers(obj: dict[str, Any]) -> set[str]:
    """Who wrote the object, but JobSet's controller (its status): kai_fn writes as ``keys.FIELD_MANAGER``."""
    return {entry["manager"] for entry in obj["metadata"].get("managedFields") or []} - {"launcher"}


def kai_fns_podgroups(testbed: LiveCluster, namespace: str) -> list[dict[str, Any]]:
    return client.CustomObjectsApi(testbed.api).list_namespaced_custom_object(
        *PODGROUPS, namespace, "podgroups", label_selector=f"{keys.MANAGED_BY_LABEL}={keys.MANAGED_BY}")["items"]


def test_the_function_under_its_own_account_acts_where_a_namespace_opted_in_and_nowhere_else(testbed: LiveCluster):
    seed_samples(testbed)
    joined, never = enabled_namespace(testbed, "optin"), enabled_namespace(testbed, "never-optin", labels=None)
    _, joined_set = held_llama(testbed, joined)
    never_tj, never_set = held_llama(testbed, never)
    objs = client.CustomObjectsApi(testbed.api)
    try:
        with function_process(testbed, KAI_FN_HEARTBEAT_LEASE="") as fn:
            answer = send(fn.url, resource(never_tj))
            assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "ignored")
            assert send(fn.url, ping()).status == 200
        assert len(kai_fns_podgroups(testbed, joined)) == 1  # it could list the namespaces, and made the gang owed
        after = objs.get_namespaced_custom_object(*JOBSETS, joined, "jobsets", joined_set["metadata"]["name"])
        assert after["metadata"]["annotations"][keys.MARKER_PODGROUP]
        assert kai_fns_podgroups(testbed, never) == []
        untouched = objs.get_namespaced_custom_object(*JOBSETS, never, "jobsets", never_set["metadata"]["name"])
        live = objs.get_namespaced_custom_object(*TRAINER, never, "trainjobs", never_tj["metadata"]["name"])
        assert untouched["spec"]["suspend"] is True and untouched["metadata"]["labels"][HELD_LABEL] == "true"
        assert writers(untouched) == writers(never_set) and writers(live) == writers(never_tj)  # JobSet's own status
        events = client.CoreV1Api(testbed.api).list_namespaced_event(never).items
        assert [e.reason for e in events if e.reporting_component == keys.MANAGED_BY] == []
    finally:
        for namespace in (joined, never):
            client.CoreV1Api(testbed.api).delete_namespace(namespace)
