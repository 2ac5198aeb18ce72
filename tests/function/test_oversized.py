"""A tenant's object too large to read (issue 39, attack 1): the resync leaves it out of its LIST, counts it
(``kai_fn_oversized_objects_total``) and tells it on the object with one ``ObjectTooLarge`` Warning, however many
resyncs meet it; the other TrainJobs are served as ever."""
from __future__ import annotations

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.ce import ping, send
from tests.conftest import KAI_PG, seed
from tests.kube.test_listing import jobset
from tests.function.test_named_at_admission import NS, PG, seed_named


def oversized_total(fn) -> float:
    text = requests.get(f"{fn.metrics_url}/metrics", timeout=10).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "kai_fn_oversized_objects_total" and s.labels.get("resource") == "jobsets")


def test_an_oversized_jobset_is_left_out_counted_and_told_once_and_the_others_are_served(api, functions):
    fn = functions(KAI_FN_METRICS_PORT="9095")
    seed_named(api)
    seed(api, jobset("huge", namespace=NS, tolerations=330_000))
    for _ in range(2):
        assert send(fn.url, ping()).status == 200
    warnings = [e for e in api.list("v1", "Event", NS) if e.get("reason") == "ObjectTooLarge"]
    assert [(w["involvedObject"]["kind"], w["involvedObject"]["name"]) for w in warnings] == [("JobSet", "huge")]
    assert oversized_total(fn) == 2  # once per resync that met it
    assert [p["metadata"]["name"] for p in api.list(KAI_PG, "PodGroup", NS)] == [PG]  # the owed gang, made
