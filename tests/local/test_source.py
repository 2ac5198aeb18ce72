"""The chain's event source sends what Knative's ApiServerSource adapter and PingSource send."""
from __future__ import annotations

import json
from datetime import UTC, datetime
import uuid

import pytest

from kai_fn.local.delivery import Adapter, Try
from kai_fn.local.source import PODGROUPS, TRAINJOBS, PingSource, apiserver_event, go_json, go_time, ping_event
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


@pytest.mark.parametrize("data, wire", [
    ({"b": 1, "a": {"d": [1, 2], "c": "x"}}, b'{"a":{"c":"x","d":[1,2]},"b":1}'),
    ({"s": "<a&b>\u2028é"}, '{"s":"\\u003ca\\u0026b\\u003e\\u2028é"}'.encode()),
])
def test_data_is_written_as_gos_encoding_json_writes_a_map(data, wire):
    assert go_json(data) == wire


def test_reference_data_keeps_the_object_reference_field_order():
    job = sample_object("trainjob-llama-finetune")
    body = apiserver_event(TRAINJOBS, job, "add", API, mode="Reference").body
    assert list(json.loads(body)) == ["kind", "namespace", "name", "apiVersion"]


@pytest.mark.parametrize("when, text", [
    (datetime(2026, 12, 3, 18, 51, 7, 34220, tzinfo=UTC), "2026-12-03T18:51:07.03422Z"),
    (datetime(2026, 12, 3, 18, 51, 7, tzinfo=UTC), "2026-12-03T18:51:07Z"),
])
def test_time_is_gos_rfc3339nano(when, text):
    assert go_time(when) == text


def test_the_senders_client_adds_its_namespace_and_gos_headers():
    got: list[dict[str, str]] = []
    adapter = Adapter("http://sink.invalid")
    adapter.post = lambda sample: got.append(sample.headers) or Try(200)  # type: ignore[method-assign]
    sender = PingSource("http://sink.invalid", 60, adapter=adapter)
    sender.deliver(ping_event())
    assert got[0]["Kn-Namespace"] == "kai-fn"
    assert dict(adapter.session.headers) == {"User-Agent": "Go-http-client/1.1", "Accept-Encoding": "gzip"}
