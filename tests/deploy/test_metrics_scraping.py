"""Prometheus finds the function: scrape annotations on the Revision template, or the ServiceMonitor overlay; and the
overlay's alerts, whose PromQL is parsed as Prometheus parses it and must hold while the function is down."""
from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import promql_parser
import pytest

from kai_fn.function import metrics
from tests import kustomize
from tests.manifests import (
    BASE, FUNCTION, K8S_VERSIONS, NAMESPACE, VARIANTS, container, env_of, ksvc, one, render, with_monitoring,
)

SERVICEMONITOR = with_monitoring(BASE)

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
def test_the_revision_template_asks_to_be_scraped_on_the_metrics_port_apart_from_the_event_port(variant):
    svc = ksvc(render(variant))
    notes = svc["spec"]["template"]["metadata"]["annotations"]
    port = env_of(container(svc))["KAI_FN_METRICS_PORT"]
    assert (notes["prometheus.io/scrape"], notes["prometheus.io/port"], notes["prometheus.io/path"]) == (
        "true", port, "/metrics")
    assert int(port) != container(svc)["ports"][0]["containerPort"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_monitoring_component_adds_its_four_objects_to_any_variant_and_changes_nothing_else(variant):
    objs, alone = render(with_monitoring(variant)), render(variant)
    ids = {kustomize.object_id(o) for o in alone}
    assert {kustomize.object_id(o) for o in objs} - ids == {
        ("", "Service", NAMESPACE, "kai-fn-metrics"),
        ("monitoring.coreos.com", "ServiceMonitor", NAMESPACE, "kai-fn"),
        ("monitoring.coreos.com", "PrometheusRule", NAMESPACE, "kai-fn"),
        ("", "ConfigMap", NAMESPACE, "kai-fn-dashboard")}
    assert [o for o in objs if kustomize.object_id(o) in ids] == alone


def test_the_servicemonitor_scrapes_the_functions_pods_through_its_own_service():
    objs = render(SERVICEMONITOR)
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
    # Knative labels every pod of the Service's Revisions with it; the target is the function's metrics port.
    assert service["spec"]["selector"] == {"serving.knative.dev/service": FUNCTION}
    assert str(port["targetPort"]) == env_of(container(ksvc(objs)))["KAI_FN_METRICS_PORT"]


def test_the_servicemonitor_shape_check_catches_a_misspelt_field():
    sm = one(render(SERVICEMONITOR), "ServiceMonitor", "kai-fn", "monitoring.coreos.com")
    sm["spec"]["endpoints"][0]["targetport"] = 8080
    assert shape_problems(sm)


# The fields of monitoring.coreos.com/v1 PrometheusRule that alerts.yaml uses, as the Prometheus Operator documents
# them (no CRD of it in ../shared/crds either).
_DURATION = "^([0-9]+(ms|s|m|h|d|w|y))+$"
PROMETHEUSRULE_SHAPE = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PrometheusRule"},
        "spec": {"type": "object", "required": ["groups"], "additionalProperties": False, "properties": {
            "groups": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["name", "rules"], "additionalProperties": False, "properties": {
                    "name": {"type": "string", "minLength": 1}, "interval": {"type": "string", "pattern": _DURATION},
                    "rules": {"type": "array", "minItems": 1, "items": {
                        "type": "object", "required": ["alert", "expr"], "additionalProperties": False,
                        "properties": {
                            "alert": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                            "expr": {"type": "string", "minLength": 1},
                            "for": {"type": "string", "pattern": _DURATION},
                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                        }}},
                }}},
        }},
    },
}
ALERTS = {"KaiFnResyncStale", "KaiFnResyncAbsent", "KaiFnDown"}


def rules() -> list[dict[str, Any]]:
    rule = one(render(SERVICEMONITOR), "PrometheusRule", "kai-fn", "monitoring.coreos.com")
    assert [e.message for e in jsonschema.Draft7Validator(PROMETHEUSRULE_SHAPE).iter_errors(rule)] == []
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def selectors(node: Any, ranged: str | None = None) -> list[tuple[str, dict[str, str], str | None]]:
    """Every series an expression reads: (metric, equality matchers, the range it is read over, if any)."""
    if isinstance(node, promql_parser.VectorSelector):
        matchers = {m.name: m.value for m in node.matchers.matchers if m.op == promql_parser.MatchOp.Equal}
        return [(node.name, matchers, ranged)]
    if isinstance(node, promql_parser.MatrixSelector):
        return selectors(node.vector_selector, promql_parser.display_duration(node.range))
    children = [getattr(node, a) for a in ("lhs", "rhs", "expr") if hasattr(node, a)]
    children += list(getattr(node, "args", None) or [])
    return [s for child in children for s in selectors(child, ranged)]


def test_the_overlay_alerts_on_a_stale_or_absent_resync_and_a_down_target():
    assert {r["alert"] for r in rules()} == ALERTS


@pytest.mark.parametrize("alert", sorted(ALERTS))
def test_each_alert_parses_as_promql_and_reads_the_functions_scrape_job_only(alert):
    (rule,) = [r for r in rules() if r["alert"] == alert]
    expr = promql_parser.parse(rule["expr"])  # ValueError, naming the problem, when Prometheus would refuse it
    read = selectors(expr)
    service = one(render(SERVICEMONITOR), "Service", "kai-fn-metrics", "")
    assert read and all(matchers == {"job": service["metadata"]["name"]} for _, matchers, _ in read), read
    exported = {f.name for f in metrics.REGISTRY.collect()}
    assert {name for name, _, _ in read} <= exported | {"up"}


def test_the_resync_alerts_read_the_gauge_over_an_hour_so_they_hold_while_the_function_is_down():
    """An instant selector of a target that is gone is empty: only what Prometheus kept over a range still says when
    the last resync ran. ``up`` is Prometheus' own series and exists exactly while the target does not answer."""
    for rule in rules():
        for name, _, ranged in selectors(promql_parser.parse(rule["expr"])):
            if name.startswith("kai_fn_"):
                assert ranged == "1h", (rule["alert"], name, ranged)
    stale = next(r for r in rules() if r["alert"] == "KaiFnResyncStale")
    assert "kai_fn_last_resync_timestamp_seconds" in stale["expr"] and "> 300" in stale["expr"]


def test_the_rule_shape_check_catches_a_misspelt_field_and_promql_a_broken_expression():
    rule = one(render(SERVICEMONITOR), "PrometheusRule", "kai-fn", "monitoring.coreos.com")
    rule["spec"]["groups"][0]["rules"][0]["fro"] = "5m"
    errors = [(e.message, list(e.path)) for e in jsonschema.Draft7Validator(PROMETHEUSRULE_SHAPE).iter_errors(rule)]
    assert errors == [("Additional properties are not allowed ('fro' was unexpected)", ["spec", "groups", 0, "rules", 0])]
    with pytest.raises(ValueError, match="unclosed left parenthesis"):
        promql_parser.parse("time() - max(max_over_time(kai_fn_last_resync_timestamp_seconds[1h]) > 300")
