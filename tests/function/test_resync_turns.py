"""The resync looks at ``KAI_FN_RESYNC_LIMIT`` TrainJobs per run, in turn: what it cannot finish does not hold the rest
back.

A blocked TrainJob stays suspended and unmarked, so every resync finds it waiting again; a gang waiting for capacity
stays unbound, so every resync's sweep finds it again. A resync that always took the oldest ones would, once more
of those than the limit are older than the rest, never reach the others: a TrainJob whose events were lost would
stay suspended for ever, and a bound gang would never be told bound by the resync.
"""
from __future__ import annotations

from tests.ce import ping, send
from tests.conftest import KAI_PG, TRAINER, sample_object, seed
from tests.function.test_gang_status import place

NS = "team-a"


def llama(name: str, uid: str, created: str, queue: str = "team-a") -> tuple[dict, dict]:
    """The sample TrainJob (suspended) and its JobSet, renamed, made at ``created``, in ``queue``."""
    tj, js = sample_object("trainjob-llama-finetune"), sample_object("jobset-llama-finetune")
    tj["metadata"].update(name=name, uid=uid, creationTimestamp=created)
    tj["metadata"]["labels"]["kai.scheduler/queue"] = queue
    js["metadata"]["name"] = name
    js["metadata"]["ownerReferences"][0].update(name=name, uid=uid)
    return tj, js


def released(api) -> set[str]:
    return {t["metadata"]["name"] for t in api.list(TRAINER, "TrainJob", NS) if t["spec"]["suspend"] is False}


def test_trainjobs_blocked_for_good_do_not_keep_the_resync_from_the_others(api, functions):
    fn = functions(KAI_FN_RESYNC_LIMIT="2")
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"),
         sample_object("clustertrainingruntime-torch-kai"),
         *llama("blocked-1", "00000000-0000-4000-8000-000000000001", "2026-01-01T00:00:00Z", queue="no-such-queue"),
         *llama("blocked-2", "00000000-0000-4000-8000-000000000002", "2026-01-01T00:00:01Z", queue="no-such-queue"),
         *llama("missed", "00000000-0000-4000-8000-000000000003", "2026-01-01T00:00:02Z"))

    for _ in range(2):
        assert send(fn.url, ping()).status == 200

    assert released(api) == {"missed"}
    assert {e["involvedObject"]["name"] for e in api.list("v1", "Event", NS) if e["reason"] == "QueueNotFound"} == {
        "blocked-1", "blocked-2"}


def test_every_waiting_trainjob_is_reached_within_as_many_runs_as_limits_it_takes(api, functions):
    fn = functions(KAI_FN_RESYNC_LIMIT="2")
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"),
         sample_object("clustertrainingruntime-torch-kai"),
         *[o for i in range(5) for o in llama(f"tj-{i}", f"00000000-0000-4000-8000-00000000001{i}",
                                               f"2026-01-01T00:00:0{i}Z")])
    runs = []
    while len(released(api)) < 5 and len(runs) < 5:
        assert send(fn.url, ping()).status == 200
        runs.append(sorted(released(api)))
    assert runs == [["tj-0", "tj-1"], ["tj-0", "tj-1", "tj-2", "tj-3"], [f"tj-{i}" for i in range(5)]]
    assert len(api.list(KAI_PG, "PodGroup", NS)) == 5


def test_gangs_waiting_for_capacity_do_not_keep_the_resync_from_telling_others_bound(api, functions):
    fn = functions(KAI_FN_RESYNC_LIMIT="2")
    jobs = [llama(f"tj-{i}", f"00000000-0000-4000-8000-00000000002{i}", f"2026-01-01T00:00:0{i}Z") for i in range(3)]
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"),
         sample_object("clustertrainingruntime-torch-kai"), *[o for job in jobs for o in job])
    while len(released(api)) < 3:
        assert send(fn.url, ping()).status == 200
    for i in range(3):  # the two oldest wait for nodes; the newest is placed whole
        live = api.get(TRAINER, "TrainJob", NS, f"tj-{i}")
        place(api, 4, 4 if i == 2 else 0, trainjob=f"tj-{i}", podgroup=live["metadata"]["annotations"]["kai-fn/podgroup"])

    for _ in range(2):
        assert send(fn.url, ping()).status == 200

    assert {e["involvedObject"]["name"] for e in api.list("v1", "Event", NS) if e["reason"] == "GangBound"} == {"tj-2"}
