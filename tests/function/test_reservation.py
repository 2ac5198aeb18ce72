"""MPI's launcher, its place held in the nodes' gang (kai_fn/core/reserve.py, kai_fn/function/reserve.py).

Real function server, kmock emulator. Trainer's part (the held JobSet) and JobSet's (the node and launcher pods) are
played by the test. The placeholder is made before the JobSet is released, made once whatever the duplicates, and
deleted once the launcher pod exists (a PodGroup event, a TrainJob event or the resync brings that moment), when
the TrainJob is suspended (made again on resume), and when the JobSet finished.
"""
from __future__ import annotations

import concurrent.futures

import pytest

from tests.builders import container, jobset_for, rjob, runtime, trainjob, job_owner
from tests.ce import ping, resource, send
from tests.conftest import JOBSET, KAI_PG, TRAINER, sample_object, seed
from tests.builders import held_by_0_2

NS, NAME, UID = "team-a", "deepspeed", "0d5e1c7a-2b3c-4d5e-8f90-a1b2c3d4e5f6"
PG = f"pg-{NAME}-{UID}"
HOLDER = f"{NAME}-launcher-placeholder-0"
GPU = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}


def mpi_runtime() -> dict:
    launcher = {**rjob("launcher", containers=[container(requests=GPU)]),
                "dependsOn": [{"name": "node", "status": "Ready"}]}
    return runtime(rjob(containers=[container(requests=GPU)]), launcher, name="deepspeed",
                   labels={"kai.scheduler/queue": "team-a"}, ml_policy={"mpi": {"runLauncherAsNode": True}})


def seed_mpi(api, *, suspend: bool = False) -> dict:
    """A plain TrainJob of numNodes 3 on the deepspeed-shaped runtime, and its JobSet as the policy holds it."""
    rt = mpi_runtime()
    job = trainjob(name=NAME, namespace=NS, uid=UID, num_nodes=3, runtime_name="deepspeed", suspend=suspend)
    js = jobset_for(job, rt)
    js["metadata"]["labels"] = {"kai-fn/held": "true"}
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"), rt, job, js)
    return api.get(TRAINER, "TrainJob", NS, NAME)


def placeholders(api) -> list[dict]:
    return [p for p in api.list("v1", "Pod", NS) if "kai-fn/placeholder-for" in (p["metadata"].get("labels") or {})]


def jobset_pod(rj: str, index: int, bound: bool) -> dict:
    spec = {"containers": [{"name": "node", "image": "x"}], **({"nodeName": f"gpu-{rj}-{index}"} if bound else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{NAME}-{rj}-0-{index}", "namespace": NS, "annotations": {"pod-group-name": PG},
        "ownerReferences": job_owner(NAME, rj),
        "labels": {"jobset.sigs.k8s.io/jobset-name": NAME, "jobset.sigs.k8s.io/replicatedjob-name": rj}},
        "spec": spec}


def nodes_run(api, *, launcher: bool) -> None:
    """JobSet made the nodes (KAI bound them with the placeholder) and, once they were Ready, the launcher."""
    seed(api, jobset_pod("node", 0, True), jobset_pod("node", 1, True), *([jobset_pod("launcher", 0, False)]
                                                                           if launcher else []))


def released(api, url) -> None:
    assert send(url, resource(seed_mpi(api))).status == 200


def ended(api) -> str | None:
    return (api.get(KAI_PG, "PodGroup", NS, PG)["metadata"].get("annotations") or {}).get("kai-fn/reservation-ended")


def test_the_placeholder_is_made_in_the_nodes_gang_before_the_jobset_is_released(api, function):
    released(api, function.url)
    writes = [(c.verb, c.resource) for c in api.calls if c.verb in ("create", "patch")]
    assert writes.index(("create", "pods")) < writes.index(("patch", "jobsets")), writes
    (pod,) = placeholders(api)
    assert pod["metadata"]["name"] == HOLDER and pod["metadata"]["annotations"]["pod-group-name"] == PG
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert pod["metadata"]["ownerReferences"][0]["uid"] == UID
    pg = api.get(KAI_PG, "PodGroup", NS, PG)
    assert pg["spec"]["minMember"] == 3 and pg["metadata"]["annotations"]["kai-fn/reserves"] == "launcher=1"
    js = api.get(JOBSET, "JobSet", NS, NAME)
    assert js["spec"]["suspend"] is False and js["metadata"]["annotations"]["kai-fn/reserves"] == "launcher=1"
    launcher = next(rj for rj in js["spec"]["replicatedJobs"] if rj["name"] == "launcher")
    assert launcher["template"]["spec"]["template"]["metadata"]["annotations"]["pod-group-name"] == PG
    assert api.list(KAI_PG, "PodGroup", NS) == [pg], "one PodGroup: the launcher is in the nodes' gang"


def test_duplicates_and_concurrent_deliveries_make_one_placeholder(api, function):
    tj = seed_mpi(api)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: send(function.url, resource(tj)).status, range(12)))
    assert answers == [200] * 12
    api.reset_calls()
    assert send(function.url, resource(api.get(TRAINER, "TrainJob", NS, NAME), "update")).status == 200
    assert [p["metadata"]["name"] for p in placeholders(api)] == [HOLDER]
    assert [c for c in api.calls if c.verb in ("create", "delete")] == [], "a duplicate writes nothing"


@pytest.mark.parametrize("trigger", ["podgroup-event", "trainjob-event", "resync"])
def test_the_placeholder_goes_once_the_launcher_pod_exists(api, function, trigger):
    released(api, function.url)
    nodes_run(api, launcher=False)
    assert send(function.url, resource(api.get(KAI_PG, "PodGroup", NS, PG), "update")).status == 200
    assert [p["metadata"]["name"] for p in placeholders(api)] == [HOLDER], "no launcher yet: its place stays held"
    nodes_run(api, launcher=True)
    event = {"podgroup-event": lambda: resource(api.get(KAI_PG, "PodGroup", NS, PG), "update"),
             "trainjob-event": lambda: resource(api.get(TRAINER, "TrainJob", NS, NAME), "update"),
             "resync": ping}[trigger]()
    assert send(function.url, event).status == 200
    assert placeholders(api) == []
    assert (ended(api) or "").endswith(" handed-over")
    api.reset_calls()
    assert send(function.url, resource(api.get(KAI_PG, "PodGroup", NS, PG), "update")).status == 200
    assert [c for c in api.calls if c.verb in ("create", "delete")] == [], "handed over: nothing more to do"


def test_a_suspended_trainjob_lets_its_place_go_and_holds_it_again_on_resume(api, function):
    released(api, function.url)
    for suspend, expected in ((True, []), (False, [HOLDER])):
        tj, js = api.get(TRAINER, "TrainJob", NS, NAME), api.get(JOBSET, "JobSet", NS, NAME)
        tj["spec"]["suspend"] = js["spec"]["suspend"] = suspend  # Kueue or its user; Trainer follows on the JobSet
        api.put(js)
        assert send(function.url, resource(api.put(tj), "update")).status == 200
        assert [p["metadata"]["name"] for p in placeholders(api)] == expected, f"suspend={suspend}"
    assert ended(api) is None


def test_a_finished_jobset_lets_its_place_go_for_good(api, function):
    released(api, function.url)
    js = api.get(JOBSET, "JobSet", NS, NAME)
    js["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "x",
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    api.put(js)
    assert send(function.url, resource(api.get(TRAINER, "TrainJob", NS, NAME), "update")).status == 200
    assert placeholders(api) == [] and (ended(api) or "").endswith(" finished")
    assert send(function.url, ping()).status == 200
    assert placeholders(api) == [], "the resync makes none again"


def test_a_trainjob_without_a_later_ready_wave_gets_no_placeholder_and_is_remembered(api, function):
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"),
         sample_object("clustertrainingruntime-torch-kai"), sample_object("trainjob-llama-finetune"),
         held_by_0_2(sample_object("jobset-llama-finetune")))
    tj = api.get(TRAINER, "TrainJob", NS, "llama-finetune")
    assert send(function.url, resource(tj)).status == 200
    api.reset_calls()
    assert send(function.url, resource(tj, "update")).status == 200
    assert placeholders(api) == [] and api.calls == [], "decided, nothing left to do: no API call"


def test_a_hand_over_cut_short_before_its_mark_is_marked_by_the_gangs_next_event(api, function):
    """Another delivery deleted the placeholder and stopped before marking the gang: the next PodGroup event marks it,
    so the gang's later events cost nothing."""
    released(api, function.url)
    nodes_run(api, launcher=True)
    api.delete("v1", "Pod", NS, HOLDER)
    assert send(function.url, resource(api.get(KAI_PG, "PodGroup", NS, PG), "update")).status == 200
    assert (ended(api) or "").endswith(" handed-over")


def test_a_jobset_being_deleted_holds_no_place(api, function):
    released(api, function.url)
    js = api.get(JOBSET, "JobSet", NS, NAME)
    js["metadata"] |= {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["test.kai-fn/keep"]}
    assert api.put(js)["metadata"].get("deletionTimestamp")  # as the API server keeps it for its finalizer
    assert [p["metadata"]["name"] for p in placeholders(api)] == [HOLDER]
    assert send(function.url, resource(api.get(TRAINER, "TrainJob", NS, NAME), "update")).status == 200
    assert placeholders(api) == []
