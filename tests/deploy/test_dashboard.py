"""The Grafana dashboard of the monitoring component (knative/components/servicemonitor/dashboard.yaml): a ConfigMap
Grafana's dashboard sidecar loads, whose every panel's query parses as PromQL and reads metrics kai_fn exports, from
the ServiceMonitor's scrape job only, and that covers what an operator asks of kai_fn."""
from __future__ import annotations

import json
import re
from typing import Any

import promql_parser
import pytest

from kai_fn.function import metrics
from tests.deploy.test_metrics_scraping import SERVICEMONITOR, selectors
from tests.manifests import one, render

HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def dashboard() -> dict[str, Any]:
    config_map = one(render(SERVICEMONITOR), "ConfigMap", "kai-fn-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1", "the sidecar's label"
    (key,) = config_map["data"]
    assert key.endswith(".json")
    return json.loads(config_map["data"][key])


def exported() -> set[str]:
    """Every series name kai_fn's registry exposes: a counter's with _total, a histogram's buckets, sum and count."""
    names = set()
    for family in metrics.REGISTRY.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + suffix for suffix in HISTOGRAM_SERIES}
        else:
            names.add(family.name)
    return names


QUERIES = [(panel["title"], target["expr"]) for panel in dashboard()["panels"] for target in panel.get("targets", [])]


def as_prometheus_reads_it(expr: str) -> str:
    """Grafana's range variables, replaced as Grafana does before it sends the query."""
    return expr.replace("$__range", "6h").replace("$__rate_interval", "1m")


@pytest.mark.parametrize("title, expr", QUERIES, ids=[f"{t}: {e[:40]}" for t, e in QUERIES])
def test_every_panels_query_reads_metrics_kai_fn_exports_from_its_scrape_job(title, expr):
    read = selectors(promql_parser.parse(as_prometheus_reads_it(expr)))
    assert read, f"{title}: reads no series"
    assert {name for name, _, _ in read} - exported() == set(), f"{title}: not a metric kai_fn exports"
    assert {matchers.get("job") for _, matchers, _ in read} == {"kai-fn-metrics"}, title


def test_the_metric_check_refuses_a_name_kai_fn_does_not_export():
    read = selectors(promql_parser.parse("sum(rate(kai_fn_gangs_made_total{job='kai-fn-metrics'}[5m]))"))
    assert {name for name, _, _ in read} - exported() == {"kai_fn_gangs_made_total"}


@pytest.mark.parametrize("metric", [
    "kai_fn_gangs_created_total",  # gangs made
    "kai_fn_gang_status_events_total",  # bound, and waiting (GangUnschedulable)
    "kai_fn_waiting_events_total",
    "kai_fn_precheck_refusals_total",  # refused
    "kai_fn_schedule_timeouts_total",
    "kai_fn_object_errors_total",  # errors
    "kai_fn_api_calls_total",
    "kai_fn_reconcile_seconds_bucket",  # event latency
    "kai_fn_last_resync_timestamp_seconds",  # the heartbeat
])
def test_the_dashboard_shows_what_an_operator_asks_of_kai_fn(metric):
    assert any(re.search(rf"\b{metric}\b", expr) for _, expr in QUERIES)


def test_every_panel_reads_the_dashboards_prometheus_and_the_ids_are_unique():
    panels = [p for p in dashboard()["panels"] if p["type"] != "row"]
    assert {p["datasource"]["uid"] for p in panels} == {"${datasource}"}
    ids = [p["id"] for p in dashboard()["panels"]]
    assert len(ids) == len(set(ids)) and dashboard()["uid"] == "kai-fn"
