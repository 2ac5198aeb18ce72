"""The API shell: status codes map to outcomes, and the runtime cache fetches once per expiry."""
from __future__ import annotations

import threading

import pytest

from kai_fn.core.runtime import RuntimeTarget
from kai_fn.function.cluster import Cluster
from kai_fn.kube import Gone, GuardFailed, Stale, Transient
from kai_fn.settings import load
from kai_fn.local.emulator import Fault
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


@pytest.mark.parametrize("fault, raised, match", [
    (Fault(status=500), Transient, "^API 500"), (Fault(status=503), Transient, "^API 503"),
    (Fault(status=429), Transient, "^API 429"), (Fault(status=403), Transient, "^API 403"),
    (Fault(hang=1.5), Transient, "^API unreachable or too slow: "), (Fault(status=422), GuardFailed, "422|nvalid"),
])
def test_jobset_patch_failures_map_by_status_code(api, fault, raised, match):
    seed(api, sample_object("jobset-llama-finetune"))
    api.faults = lambda call: fault
    with pytest.raises(raised, match=match):
        cluster(api, KAI_FN_API_TIMEOUT_SECONDS=1).session().patch_jobset(
            "team-a", "llama-finetune", [{"op": "test", "path": "/spec/suspend", "value": True}])


def test_writes_to_a_deleted_trainjob_are_gone_and_gets_are_none(api):
    session = cluster(api).session()
    assert session.trainjob("team-a", "nope") is None and session.jobset("team-a", "nope") is None
    with pytest.raises(Gone, match="^TrainJob team-a/nope$"):
        session.patch_trainjob("team-a", "nope", {"metadata": {"annotations": {"a": "b"}}})
    assert session.calls == 3


@pytest.mark.parametrize("fault, raised, match", [
    (Fault(status=404), Gone, "^PodGroup team-a/pg$"), (Fault(status=409), Stale, "^PodGroup team-a/pg$"),
    (Fault(status=500), Transient, "^API 500 "), (Fault(status=403), Transient, "^API 403 "),
    (Fault(hang=1.5), Transient, "^API unreachable or too slow: "),
])
def test_podgroup_mark_patch_failures_map_by_status_code(api, fault, raised, match):
    """The gang's marks (kai-fn/bound, kai-fn/timed-out) are merge patches of its main PodGroup."""
    seed(api, {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
               "metadata": {"name": "pg", "namespace": "team-a"}, "spec": {"minMember": 1, "queue": "team-a"}})
    api.faults = lambda call: fault
    with pytest.raises(raised, match=match):
        cluster(api, KAI_FN_API_TIMEOUT_SECONDS=1).session().patch_podgroup(
            "scheduling.run.ai/v2alpha2", "team-a", "pg", {"metadata": {"annotations": {"kai-fn/bound": "now"}}})


def test_a_podgroup_mark_is_one_merge_patch(api):
    seed(api, {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
               "metadata": {"name": "pg", "namespace": "team-a"}, "spec": {"minMember": 1, "queue": "team-a"}})
    cluster(api).session().patch_podgroup("scheduling.run.ai/v2alpha2", "team-a", "pg",
                                          {"metadata": {"annotations": {"kai-fn/bound": "2026-01-01T00:00:00Z"}}})
    (call,) = api.writes()
    assert (call.verb, call.resource, call.content_type) == ("patch", "podgroups", "application/merge-patch+json")
    pg = api.get("scheduling.run.ai/v2alpha2", "PodGroup", "team-a", "pg")
    assert pg["metadata"]["annotations"] == {"kai-fn/bound": "2026-01-01T00:00:00Z"}


def test_an_event_that_cannot_be_written_does_not_fail_the_work(api):
    session = cluster(api).session()
    api.faults = lambda call: Fault(status=503)
    body = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x", "namespace": "team-a"},
            "involvedObject": {"kind": "TrainJob", "name": "x", "namespace": "team-a"}, "reason": "R", "message": "m"}
    assert session.create_event("team-a", body) is False
