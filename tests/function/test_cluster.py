"""The process's runtime cache around the kube layer: it fetches once per expiry, and never keeps a miss."""
from __future__ import annotations

import threading

from kai_fn.core.runtime import RuntimeTarget
from kai_fn.function.cluster import Cluster
from kai_fn.settings import load
from tests.conftest import sample_object, seed

RT = RuntimeTarget("ClusterTrainingRuntime", "torch-distributed-kai", None)


def cluster(api, **settings) -> Cluster:
    return Cluster.from_settings(load(**settings), api.kubeconfig)


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
