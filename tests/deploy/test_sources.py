"""The ApiServerSource watches TrainJobs in labelled namespaces; the PingSource sends the resync directly."""
from __future__ import annotations

import json

import pytest

from tests.manifests import (
    BASE, BROKER, FUNCTION, KNATIVE, SCHEDULER_PLUGINS, SOURCE_SA, VARIANTS, by_kind, crd_plurals, one, render,
)


@pytest.mark.parametrize(
    "variant,sink",
    [
        (BASE, ("serving.knative.dev/v1", "Service", FUNCTION)),
        (SCHEDULER_PLUGINS, ("serving.knative.dev/v1", "Service", FUNCTION)),
        (BROKER, ("eventing.knative.dev/v1", "Broker", "kai-fn")),
    ],
)
def test_apiserversource_watches_trainjobs_in_labelled_namespaces(variant, sink):
    objs = render(variant)
    (src,) = by_kind(objs, "ApiServerSource")
    spec = src["spec"]
    assert spec["mode"] == "Resource"
    assert spec["namespaceSelector"] == {"matchLabels": {"kai-fn.io/enabled": "true"}}
    assert spec["serviceAccountName"] == SOURCE_SA
    assert [(r["apiVersion"], r["kind"]) for r in spec["resources"]] == [("trainer.kubeflow.org/v1alpha1", "TrainJob")]
    ref = spec["sink"]["ref"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == sink
    assert "namespace" not in ref  # defaults to the source's own namespace
    one(objs, sink[1], sink[2], sink[0].rpartition("/")[0])


def test_watched_kind_is_a_served_version_of_the_trainjob_crd():
    (src,) = by_kind(render(BASE), "ApiServerSource")
    (res,) = src["spec"]["resources"]
    group, version = res["apiVersion"].split("/")
    crd = crd_plurals()[(group, "trainjobs")]
    assert crd["kind"] == res["kind"] and version in crd["versions"]


def test_optional_queue_label_selector_is_documented_but_off():
    text = (KNATIVE / BASE / "apiserversource.yaml").read_text()
    commented = "\n".join(line.strip().lstrip("#").strip() for line in text.splitlines() if line.strip().startswith("#"))
    assert "key: kai.scheduler/queue" in commented and "operator: Exists" in commented
    (src,) = by_kind(render(BASE), "ApiServerSource")
    assert "selector" not in src["spec"]["resources"][0]


@pytest.mark.parametrize("variant", VARIANTS)
def test_pingsource_sends_resync_to_the_service_directly(variant):
    (ping,) = by_kind(render(variant), "PingSource")
    spec = ping["spec"]
    assert spec["schedule"] == "*/5 * * * *"
    assert spec["contentType"] == "application/json"
    assert json.loads(spec["data"]) == {"resync": True}
    ref = spec["sink"]["ref"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == ("serving.knative.dev/v1", "Service", FUNCTION)
