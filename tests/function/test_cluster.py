"""The process's runtime cache around the kube layer: it fetches once per expiry, and never keeps a miss."""
from __future__ import annotations

import threading

from kai_fn.core.runtime import RuntimeTarget
from kai_fn.function import metrics
from kai_fn.function.cluster import CachedServer
from kai_fn.local.emulator import Fault
from kai_fn.settings import load
from tests.conftest import sample_object, seed

RT = RuntimeTarget("ClusterTrainingRuntime", "torch-distributed-kai", None)


def cluster(api, **settings) -> CachedServer:
    return CachedServer.from_settings(load(**settings), api.kubeconfig)


def test_concurrent_cold_cache_lookups_make_one_get(api):
    seed(api, sample_object("clustertrainingruntime-torch-kai"))
    shared = cluster(api, KAI_FN_RUNTIME_CACHE_SECONDS=30)
    barrier = threading.Barrier(8)
    found = []

    def look():
        barrier.wait()
        found.append(shared.session().runtime(RT))

    threads = [threading.Thread(target=look) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(found) == 8 and all(f["metadata"]["name"] == RT.name for f in found)
    assert [c.resource for c in api.calls] == ["clustertrainingruntimes"]


def test_a_missing_runtime_is_not_cached(api):
    shared = cluster(api, KAI_FN_RUNTIME_CACHE_SECONDS=30)
    assert shared.session().runtime(RT) is None
    seed(api, sample_object("clustertrainingruntime-torch-kai"))
    assert shared.session().runtime(RT)["metadata"]["name"] == RT.name


def test_the_process_counts_its_calls_and_its_lost_events_in_its_metrics(api):
    """The kube layer reports to the function's metrics through its observer (kai_fn.function.metrics.Meter)."""
    lost = ("kai_fn_events_not_written_total", {"reason": "LostOne"})
    calls = ("kai_fn_api_calls_total", {"verb": "create", "resource": "events", "code": "503"})
    before = [metrics.REGISTRY.get_sample_value(*s) or 0 for s in (lost, calls)]
    api.faults = lambda call: Fault(status=503)
    body = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x", "namespace": "team-a"},
            "involvedObject": {"name": "x"}, "reason": "LostOne", "message": "m"}
    assert cluster(api).session().create_event("team-a", body) is False
    assert [metrics.REGISTRY.get_sample_value(*s) for s in (lost, calls)] == [before[0] + 1, before[1] + 1]
