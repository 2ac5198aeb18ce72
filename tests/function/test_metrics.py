"""GET /metrics: Prometheus text, every name ``kai_fn_``, counts that follow what the function did.

The function servers are shared by the session, so each test compares two scrapes and asserts the difference.
"""
from __future__ import annotations

import uuid
from collections import Counter

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kai_fn.local.emulator import Fault
from kai_fn.commands.invoke import Sample
from tests.ce import resource, send
from tests.function.test_gang_status import fresh, kai_says, place, released, seed_held_llama

Key = tuple[str, frozenset]


def scrape(url: str) -> Counter[Key]:
    response = requests.get(f"{url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    values: Counter[Key] = Counter()
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            values[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return values


def delta(before: Counter[Key], after: Counter[Key]) -> dict[Key, float]:
    return {k: after[k] - before[k] for k in after.keys() | before.keys() if after[k] != before[k]
            and not k[0].endswith(("_bucket", "_sum", "_created"))}


def key(name: str, **labels: str) -> Key:
    return name, frozenset(labels.items())


def test_every_series_is_named_kai_fn_and_documented(function):
    response = requests.get(f"{function.url}/metrics", timeout=10)
    families = list(text_string_to_metric_families(response.text))
    assert {f.name for f in families} >= {
        "kai_fn_events", "kai_fn_reconcile_seconds", "kai_fn_api_calls", "kai_fn_gangs_created",
        "kai_fn_gang_status_events", "kai_fn_precheck_refusals", "kai_fn_schedule_timeouts", "kai_fn_waiting_events"}
    assert all(f.name.startswith("kai_fn_") and f.documentation for f in families)


def test_a_new_trainjob_a_duplicate_and_a_bad_event_are_counted_by_type_kind_and_outcome(api, function):
    tj = seed_held_llama(api, fresh())
    before = scrape(function.url)
    assert send(function.url, resource(tj)).status == 200
    assert send(function.url, resource(tj)).status == 200  # redelivered: this process decided its JobSet, no call
    assert send(function.url, Sample("bad", "", {"Content-Type": "application/json"}, b"{}")).status == 400
    changed = delta(before, scrape(function.url))
    assert changed == {
        key("kai_fn_events_total", type="resource.add", kind="TrainJob", outcome="done"): 1,
        key("kai_fn_events_total", type="resource.add", kind="TrainJob", outcome="skipped"): 1,
        key("kai_fn_events_total", type="none", kind="none", outcome="bad"): 1,
        key("kai_fn_reconcile_seconds_count", work="trainjob"): 2,
        key("kai_fn_gangs_created_total"): 1,
        key("kai_fn_api_calls_total", verb="get", resource="clustertrainingruntimes", code="200"): 1,
        key("kai_fn_api_calls_total", verb="get", resource="jobsets", code="200"): 1,
        key("kai_fn_api_calls_total", verb="list", resource="queues", code="200"): 1,  # the pre-check, once
        key("kai_fn_api_calls_total", verb="create", resource="podgroups", code="201"): 1,
        key("kai_fn_api_calls_total", verb="patch", resource="jobsets", code="200"): 1,  # the one decision
        key("kai_fn_api_calls_total", verb="create", resource="events", code="201"): 1,
        # Unauthenticated delivery: the first pass reads the TrainJob before acting on the event.
        key("kai_fn_api_calls_total", verb="get", resource="trainjobs", code="200"): 1,
        # Which namespaces opted in (the tests' processes keep no namespace cache: tests/conftest.py).
        key("kai_fn_api_calls_total", verb="list", resource="namespaces", code="200"): 1,
    }


def test_the_held_jobsets_event_is_counted_under_its_kind(api, function):
    seed_held_llama(api, fresh())
    js = api.get("jobset.x-k8s.io/v1alpha2", "JobSet", "team-a", "llama-finetune")
    before = scrape(function.url)
    assert send(function.url, resource(js)).status == 200
    assert send(function.url, resource(js, "delete")).status == 200  # the decision took it out of the selector
    changed = delta(before, scrape(function.url))
    assert changed[key("kai_fn_events_total", type="resource.add", kind="JobSet", outcome="done")] == 1
    assert changed[key("kai_fn_events_total", type="resource.delete", kind="none", outcome="ignored")] == 1
    assert changed[key("kai_fn_reconcile_seconds_count", work="trainjob")] == 1
    assert changed[key("kai_fn_gangs_created_total")] == 1


@pytest.mark.parametrize("fault, code", [(Fault(status=503), "503"), (Fault(status=429), "429"),
                                         (Fault(hang=1.5), "error")], ids=["503", "429", "timeout"])
def test_api_failures_are_counted_by_status_code_and_the_event_as_retry(api, function, fault, code):
    tj = seed_held_llama(api, fresh())
    api.faults = lambda call: fault if call.resource == "jobsets" else None
    before = scrape(function.url)
    assert send(function.url, resource(tj)).status == 503
    changed = delta(before, scrape(function.url))
    assert changed[key("kai_fn_api_calls_total", verb="get", resource="jobsets", code=code)] == 1
    assert changed[key("kai_fn_events_total", type="resource.add", kind="TrainJob", outcome="retry")] == 1


def test_a_trainjob_told_to_wait_is_counted_as_waiting_with_its_short_reason(api, function):
    uid = fresh()
    seed_held_llama(api, uid)
    api.delete("jobset.x-k8s.io/v1alpha2", "JobSet", "team-a", "llama-finetune")  # Trainer has not made it yet
    tj = api.get("trainer.kubeflow.org/v1alpha1", "TrainJob", "team-a", "llama-finetune")
    tj["metadata"]["annotations"] = {"kai-fn/hold": "true"}
    api.put(tj)
    before = scrape(function.url)
    assert send(function.url, resource(tj)).status == 200
    changed = delta(before, scrape(function.url))
    assert changed[key("kai_fn_events_total", type="resource.add", kind="TrainJob", outcome="waiting")] == 1
    assert changed[key("kai_fn_waiting_events_total", reason="kai_fn_hold")] == 1


def test_gang_status_reports_are_counted(api, function):
    released(api, function.url, fresh())
    place(api, 4, 4)
    before = scrape(function.url)
    send(function.url, resource(kai_says(api), "update"))
    changed = delta(before, scrape(function.url))
    assert changed[key("kai_fn_gang_status_events_total", reason="GangBound")] == 1
    assert changed[key("kai_fn_events_total", type="resource.update", kind="PodGroup", outcome="done")] == 1
    assert changed[key("kai_fn_api_calls_total", verb="list", resource="pods", code="200")] == 1
    assert changed[key("kai_fn_api_calls_total", verb="patch", resource="podgroups", code="200")] == 1  # the mark
    assert key("kai_fn_api_calls_total", verb="patch", resource="trainjobs", code="200") not in changed
    assert changed[key("kai_fn_gang_bound_seconds_count")] == 1  # the time to a bound gang, for the dashboard


def test_made_up_event_types_do_not_make_new_series(api, function):
    before = scrape(function.url)
    for _ in range(5):
        headers = {"Ce-Specversion": "1.0", "Ce-Id": str(uuid.uuid4()), "Ce-Source": "x",
                   "Ce-Type": f"com.example.{uuid.uuid4()}", "Content-Type": "application/json"}
        assert send(function.url, Sample("odd", "", headers, b"{}")).status == 200
    changed = delta(before, scrape(function.url))
    assert changed == {key("kai_fn_events_total", type="other", kind="none", outcome="ignored"): 5}


def test_metrics_need_no_token_and_cost_no_api_call(api, function):
    api.reset_calls()
    assert requests.get(f"{function.url}/metrics", timeout=10).status_code == 200
    assert api.calls == []
