"""Prometheus finds the function: scrape annotations on the Revision template, or the ServiceMonitor overlay."""
from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests import kustomize
from tests.manifests import BASE, FUNCTION, K8S_VERSIONS, NAMESPACE, VARIANTS, container, ksvc, one, render

SERVICEMONITOR = "overlays/servicemonitor"

# The fields of monitoring.coreos.com/v1 ServiceMonitor that the overlay uses, as the Prometheus Operator
# documents them; no CRD of it is in ../shared/crds, so this stands in for one (and rejects any other field).
SERVICEMONITOR_SHAPE = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
        "spec": {"type": "object", "required": ["selector", "endpoints"], "additionalProperties": False, "properties": {
            "selector": {"type": "object", "required": ["matchLabels"], "additionalProperties": False,
                         "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                "matchNames": {"type": "array", "items": {"type": "string"}}}},
            "endpoints": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["port"], "additionalProperties": False,
                "properties": {"port": {"type": "string"}, "path": {"type": "string"},
                               "interval": {"type": "string", "pattern": "^[0-9]+[smh]$"}}}},
        }},
    },
}


def shape_problems(sm: dict[str, Any]) -> list[str]:
    return [e.message for e in jsonschema.Draft7Validator(SERVICEMONITOR_SHAPE).iter_errors(sm)]


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_revision_template_asks_to_be_scraped_on_the_user_port_at_metrics(variant):
    svc = ksvc(render(variant))
    notes = svc["spec"]["template"]["metadata"]["annotations"]
    port = container(svc)["ports"][0]["containerPort"]
    assert (notes["prometheus.io/scrape"], notes["prometheus.io/port"], notes["prometheus.io/path"]) == (
        "true", str(port), "/metrics")


def test_the_servicemonitor_overlay_scrapes_the_functions_pods_through_its_own_service():
    objs = render(SERVICEMONITOR)
    added = {kustomize.object_id(o) for o in objs} - {kustomize.object_id(o) for o in render(BASE)}
    assert added == {("", "Service", NAMESPACE, "kai-fn-metrics"),
                     ("monitoring.coreos.com", "ServiceMonitor", NAMESPACE, "kai-fn")}
    sm = one(objs, "ServiceMonitor", "kai-fn", "monitoring.coreos.com")
    assert shape_problems(sm) == []
    service = one(objs, "Service", "kai-fn-metrics", "")
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(service, version, strict=True)
    assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    (endpoint,) = sm["spec"]["endpoints"]
    (port,) = service["spec"]["ports"]
    assert endpoint["port"] == port["name"] and endpoint["path"] == "/metrics"
    # Knative labels every pod of the Service's Revisions with it; the target is the user container's port.
    assert service["spec"]["selector"] == {"serving.knative.dev/service": FUNCTION}
    assert port["targetPort"] == container(ksvc(objs))["ports"][0]["containerPort"]


def test_the_servicemonitor_shape_check_catches_a_misspelt_field():
    sm = one(render(SERVICEMONITOR), "ServiceMonitor", "kai-fn", "monitoring.coreos.com")
    sm["spec"]["endpoints"][0]["targetport"] = 8080
    assert shape_problems(sm)
