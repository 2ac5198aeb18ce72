"""The chain's event source sends what Knative's ApiServerSource adapter and PingSource send (FACTS §4)."""
from __future__ import annotations

import json
from datetime import datetime
import uuid

import pytest

from kai_fn.local.source import PODGROUPS, TRAINJOBS, apiserver_event, ping_event
from tests.conftest import sample_object

API = "https://127.0.0.1:6443"


@pytest.mark.parametrize("resource, obj, plural", [
    (TRAINJOBS, sample_object("trainjob-llama-finetune"), "trainjobs"),
    (PODGROUPS["scheduler-plugins"], {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                      "metadata": {"name": "tj", "namespace": "team-a"}}, "podgroups"),
])
@pytest.mark.parametrize("action", ["add", "update", "delete"])
def test_resource_mode_event_is_the_adapters_binary_event(resource, obj, plural, action):
    sample = apiserver_event(resource, obj, action, API)
    meta, h = obj["metadata"], sample.headers
    assert {k: v for k, v in h.items() if k not in ("Ce-Id", "Ce-Time")} == {
        "Ce-Specversion": "1.0", "Ce-Type": f"dev.knative.apiserver.resource.{action}", "Ce-Source": API,
        "Ce-Subject": f"/apis/{resource.api_version}/namespaces/{meta['namespace']}/{plural}/{meta['name']}",
        "Ce-Kind": resource.kind, "Ce-Apiversion": resource.api_version, "Ce-Name": meta["name"],
        "Ce-Namespace": meta["namespace"], "Content-Type": "application/json",
    }
    uuid.UUID(h["Ce-Id"])
    datetime.fromisoformat(h["Ce-Time"])  # sdk-go's WithTimeNow, as Knative's adapters use it
    assert json.loads(sample.body) == obj


def test_reference_mode_sends_kind_namespace_name_and_api_version_only():
    job = sample_object("trainjob-llama-finetune")
    sample = apiserver_event(TRAINJOBS, job, "update", API, mode="Reference")
    assert sample.headers["Ce-Type"] == "dev.knative.apiserver.ref.update"
    assert json.loads(sample.body) == {"kind": "TrainJob", "namespace": job["metadata"]["namespace"],
                                       "name": job["metadata"]["name"], "apiVersion": "trainer.kubeflow.org/v1alpha1"}


def test_every_emission_has_a_fresh_id():
    job = sample_object("trainjob-llama-finetune")
    ids = {apiserver_event(TRAINJOBS, job, "update", API).headers["Ce-Id"] for _ in range(3)}
    ids |= {ping_event().headers["Ce-Id"] for _ in range(3)}
    assert len(ids) == 6


def test_ping_is_the_pingsources_resync():
    sample = ping_event()
    assert sample.headers["Ce-Type"] == "dev.knative.sources.ping"
    assert json.loads(sample.body) == {"resync": True}
