"""What each typed call of the kube layer (kai_fn/kube/session.py) makes of a refusal: a GET's 404 is None, a
write's is Gone, a JSON Patch's failed test GuardFailed, a stale merge patch Stale; an Event lost is logged and
counted, never fatal."""
from __future__ import annotations

import pytest

from kai_fn.kube import ApiServer, Gone, GuardFailed, Stale, Transient, api_client
from kai_fn.local.emulator import Fault
from tests.conftest import sample_object, seed
from tests.builders import held_by_0_2


class Counted:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.lost: list[str] = []

    def called(self, verb: str, resource: str, code: str) -> None:
        self.calls.append((verb, resource, code))

    def event_not_written(self, reason: str) -> None:
        self.lost.append(reason)


def cluster(api, timeout: float = 5.0, observer: Counted | None = None) -> ApiServer:
    return ApiServer(api_client(str(api.kubeconfig), observer=observer), timeout, observer)


@pytest.mark.parametrize("fault, raised, match", [
    (Fault(status=500), Transient, "^API 500"), (Fault(status=503), Transient, "^API 503"),
    (Fault(status=429), Transient, "^API 429"), (Fault(status=403), Transient, "^API 403"),
    (Fault(hang=1.5), Transient, "^API unreachable or too slow: "), (Fault(status=422), GuardFailed, "422|nvalid"),
])
def test_jobset_patch_failures_map_by_status_code(api, fault, raised, match):
    seed(api, held_by_0_2(sample_object("jobset-llama-finetune")))
    api.faults = lambda call: fault
    with pytest.raises(raised, match=match):
        cluster(api, timeout=1).session().patch_jobset(
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
        cluster(api, timeout=1).session().patch_podgroup(
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


EVENT = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x", "namespace": "team-a"},
         "involvedObject": {"kind": "TrainJob", "name": "x", "namespace": "team-a"}, "reason": "R", "message": "m"}


@pytest.mark.parametrize("fault", [Fault(status=503), Fault(status=403), Fault(status=422)], ids=["503", "403", "422"])
def test_an_event_that_cannot_be_written_is_logged_and_counted_and_does_not_fail_the_work(api, caplog, fault):
    counted = Counted()
    api.faults = lambda call: fault
    assert cluster(api, observer=counted).session().create_event("team-a", EVENT) is False
    assert counted.lost == ["R"] and counted.calls == [("create", "events", str(fault.status))]
    assert [r.getMessage() for r in caplog.records if r.name == "kai_fn"] == ["event not written"]


def test_an_event_already_written_is_there(api):
    counted = Counted()
    session = cluster(api, observer=counted).session()
    assert (session.create_event("team-a", EVENT), session.create_event("team-a", EVENT)) == (True, True)
    assert counted.lost == [] and [c[2] for c in counted.calls] == ["201", "409"]
