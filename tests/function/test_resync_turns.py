"""The resync's share of the owed work: without a work queue, ``KAI_FN_RESYNC_LIMIT`` per run, in turn; with one
(``KAI_FN_BACKGROUND_WORKERS``), every owed JobSet at once, and a started function catches up on its first request.

A blocked TrainJob's JobSet stays held, so every resync finds it owed again; a gang waiting for capacity stays
unbound, so every resync's sweep finds it again. A resync that always took the oldest ones would, once more of those
than the limit are older than the rest, never reach the others: a JobSet whose events were lost would stay held for
ever, and a bound gang would never be told bound by the resync.
"""
from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kai_fn.local.emulator import Emulator
from kai_fn.local.process import FunctionProcess
from tests.builders import job_owner
from tests.ce import ping, send
from tests.conftest import JOBSET, KAI_PG, sample_object, seed
from tests.builders import held_by_0_2

NS = "team-a"
def inventory(api: Emulator) -> list[tuple[str, str | None]]:
    """The resync's LISTs (kai_fn/function/inventory.py): TrainJobs, then JobSets, of each opted-in namespace, and
    kai_fn's PodGroups by their label."""
    opted = sorted(n["metadata"]["name"] for n in api.list("v1", "Namespace")
                   if (n["metadata"].get("labels") or {}).get("kai-fn.io/enabled") == "true")
    return [*(("trainjobs", ns) for ns in opted), *(("jobsets", ns) for ns in opted), ("podgroups", None)]


def llama(name: str, created: str, queue: str = "team-a", namespace: str = NS) -> tuple[dict, dict]:
    """The sample TrainJob (as submitted) and its JobSet (held by the policy), renamed, made at ``created``, in
    ``queue``, with a uid of its own (a function process remembers the TrainJobs it decided by uid)."""
    uid = str(uuid.uuid4())
    tj, js = sample_object("trainjob-llama-finetune"), held_by_0_2(sample_object("jobset-llama-finetune"))
    tj["metadata"].update(name=name, namespace=namespace, uid=uid, creationTimestamp=created)
    tj["metadata"]["labels"]["kai.scheduler/queue"] = queue
    js["metadata"].update(name=name, namespace=namespace, uid=str(uuid.uuid5(uuid.UUID(uid), "jobset")))
    js["metadata"]["labels"]["trainer.kubeflow.org/trainjob-name"] = name
    js["metadata"]["ownerReferences"][0].update(name=name, uid=uid)
    return tj, js


def released(api, namespace: str = NS) -> set[str]:
    """The TrainJobs whose JobSet kai_fn decided and resumed."""
    return {j["metadata"]["name"] for j in api.list(JOBSET, "JobSet", namespace)
            if j["spec"]["suspend"] is False and "kai-fn/podgroup" in (j["metadata"].get("annotations") or {})}


def pod(trainjob: str, podgroup: str, index: int, bound: bool) -> dict:
    spec = {"containers": [{"name": "node", "image": "busybox"}], **({"nodeName": f"gpu-node-{index}"} if bound else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{trainjob}-node-0-{index}", "namespace": NS, "ownerReferences": job_owner(trainjob),
        "labels": {"jobset.sigs.k8s.io/jobset-name": trainjob, "jobset.sigs.k8s.io/replicatedjob-name": "node"},
        "annotations": {"pod-group-name": podgroup}}, "spec": spec}


def test_trainjobs_blocked_for_good_do_not_keep_the_resync_from_the_others(api, functions):
    fn = functions(KAI_FN_RESYNC_LIMIT="2")
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"),
         sample_object("clustertrainingruntime-torch-kai"),
         *llama("blocked-1", "2026-01-01T00:00:00Z", queue="no-such-queue"),
         *llama("blocked-2", "2026-01-01T00:00:01Z", queue="no-such-queue"),
         *llama("missed", "2026-01-01T00:00:02Z"))

    for _ in range(2):
        assert send(fn.url, ping()).status == 200

    assert released(api) == {"missed"}
    assert {e["involvedObject"]["name"] for e in api.list("v1", "Event", NS) if e["reason"] == "QueueNotFound"} == {
        "blocked-1", "blocked-2"}
    held = {j["metadata"]["name"] for j in api.list(JOBSET, "JobSet", NS) if "kai-fn/held" in j["metadata"]["labels"]}
    assert held == {"blocked-1", "blocked-2"}  # still held: owed again at every resync


def test_every_held_jobset_is_reached_within_as_many_runs_as_limits_it_takes(api, functions):
    functions.forget()  # a process keeps the resync's cursor: this one starts from the oldest
    fn = functions(KAI_FN_RESYNC_LIMIT="2")
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"),
         sample_object("clustertrainingruntime-torch-kai"),
         *[o for i in range(5) for o in llama(f"tj-{i}", f"2026-01-01T00:00:0{i}Z")])
    runs = []
    while len(released(api)) < 5 and len(runs) < 5:
        assert send(fn.url, ping()).status == 200
        runs.append(sorted(released(api)))
    assert runs == [["tj-0", "tj-1"], ["tj-0", "tj-1", "tj-2", "tj-3"], [f"tj-{i}" for i in range(5)]]
    assert len(api.list(KAI_PG, "PodGroup", NS)) == 5


def test_gangs_waiting_for_capacity_do_not_keep_the_resync_from_telling_others_bound(api, functions):
    fn = functions(KAI_FN_RESYNC_LIMIT="2")
    jobs = [llama(f"tj-{i}", f"2026-01-01T00:00:0{i}Z") for i in range(3)]
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"),
         sample_object("clustertrainingruntime-torch-kai"), *[o for job in jobs for o in job])
    for _ in range(2):
        assert send(fn.url, ping()).status == 200
    assert len(released(api)) == 3
    for i in range(3):  # the two oldest wait for nodes; the newest is placed whole
        podgroup = api.get(JOBSET, "JobSet", NS, f"tj-{i}")["metadata"]["annotations"]["kai-fn/podgroup"]
        seed(api, *(pod(f"tj-{i}", podgroup, n, bound=i == 2) for n in range(4)))

    for _ in range(2):
        assert send(fn.url, ping()).status == 200

    assert {e["involvedObject"]["name"] for e in api.list("v1", "Event", NS) if e["reason"] == "GangBound"} == {"tj-2"}
    bound = {p["metadata"]["name"] for p in api.list(KAI_PG, "PodGroup", NS)
             if "kai-fn/bound" in (p["metadata"].get("annotations") or {})}
    assert bound == {f"pg-tj-2-{jobs[2][0]['metadata']['uid']}"}  # the mark on its PodGroup, not its TrainJob


# -- with a work queue: everything owed at once ------------------------------------------------------------------

MANY = 1000
WORKED = {"KAI_FN_BACKGROUND_WORKERS": "4", "KAI_FN_RUNTIME_CACHE_SECONDS": "30", "KAI_FN_API_TIMEOUT_SECONDS": "5"}


def work_done(url: str) -> tuple[float, float]:
    """(TrainJobs queued or in work, passes done) from the function's metrics."""
    queued = done = 0.0
    for family in text_string_to_metric_families(requests.get(f"{url}/metrics", timeout=10).text):
        for sample in family.samples:
            if sample.name == "kai_fn_work_queue":
                queued = sample.value
            elif sample.name == "kai_fn_work_total" and sample.labels.get("outcome") == "done":
                done = sample.value
    return queued, done


def until_worked(url: str, passes: int, timeout: float) -> None:
    """Until ``passes`` passes are done and the queue is idle; a wall-clock guard, not a measurement."""
    end = time.monotonic() + timeout
    while work_done(url) != (0, passes):
        assert time.monotonic() < end, f"wall-clock guard: {work_done(url)} after {timeout} s, want (0, {passes})"
        time.sleep(0.1)


def log_lines(path: Path, msg: str) -> list[dict]:
    """The function's JSON log lines ``msg`` (a line still being written is skipped)."""
    out = []
    for text in path.read_text().splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict) and line.get("msg") == msg:
            out.append(line)
    return out


def held_cluster(api: Emulator, count: int, namespace: str) -> None:
    api.opt_in(namespace)
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"),
         sample_object("clustertrainingruntime-torch-kai"),
         *[o for i in range(count) for o in llama(f"tj-{i:04d}", "2026-01-01T00:00:00Z", namespace=namespace)])


def calls(api: Emulator) -> list[tuple[str, str]]:
    return [(c.verb, c.resource) for c in api.calls if c.resource != "leases"]


@pytest.mark.slow
def test_one_resync_hands_every_held_jobset_to_the_work_queue_at_once(api, tmp_path):
    namespace = "resync-many"
    api.opt_in(namespace)  # before the function starts: the events were lost, the namespace had opted in
    log = tmp_path / "function.log"
    with log.open("wb") as out, FunctionProcess({"KUBECONFIG": api.kubeconfig, **WORKED}, log=out) as fn:
        until_caught_up(log)  # on an empty cluster: nothing owed yet
        held_cluster(api, MANY, namespace)  # then held JobSets whose events were all lost
        api.reset_calls()

        assert send(fn.url, ping()).status == 200  # one resync, KAI_FN_RESYNC_LIMIT (50) notwithstanding
        until_worked(fn.url, MANY, timeout=300)

        (resync,) = [line for line in log_lines(log, "event") if line.get("type") == "dev.knative.sources.ping"]
        assert resync["reason"].startswith(f"resync: {MANY} owed a pass; {MANY} queued;"), resync["reason"]
        assert len(released(api, namespace)) == MANY
        seen = calls(api)
        first_pages = [(c.resource, c.namespace) for c in api.calls if c.verb == "list"
                       and c.resource not in ("pods", "queues", "leases", "namespaces") and "continue" not in c.query]
        assert first_pages == inventory(api)  # once each, read in pages (kai_fn/kube/listing.py)
        assert seen.count(("get", "jobsets")) == MANY and seen.count(("patch", "jobsets")) == MANY
        assert seen.count(("create", "podgroups")) == MANY
        assert ("get", "trainjobs") not in seen  # each pass takes the TrainJob the resync listed
        assert len(api.list(KAI_PG, "PodGroup", namespace)) == MANY
    (catch_up,) = log_lines(log, "catch-up")
    assert (catch_up["owed"], catch_up["queued"]) == (0, 0)


def until_caught_up(log: Path, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not log_lines(log, "catch-up"):
        assert time.monotonic() < end, f"wall-clock guard: no catch-up line after {timeout} s"
        time.sleep(0.05)


def test_a_started_function_catches_up_once_on_its_first_request(api, tmp_path):
    namespace = "resync-catch-up"
    held_cluster(api, 20, namespace)
    log = tmp_path / "function.log"
    with log.open("wb") as out, FunctionProcess({"KUBECONFIG": api.kubeconfig, **WORKED}, log=out) as fn:
        until_worked(fn.url, 20, timeout=120)  # no event, no ping: the readiness probe's request started it
        for _ in range(3):  # later requests make no second pass
            assert requests.get(f"{fn.url}/healthz", timeout=10).status_code == 200
        assert send(fn.url, ping()).status == 200
    assert len(released(api, namespace)) == 20
    (catch_up,) = log_lines(log, "catch-up")
    assert (catch_up["outcome"], catch_up["owed"], catch_up["queued"]) == ("done", 20, 20)
    listed = [c for c in api.calls if (c.verb, c.resource, c.namespace) == ("list", "trainjobs", namespace)]
    assert len(listed) == 2  # the catch-up's and the ping's


def test_without_workers_a_started_function_makes_no_catch_up_pass(api, tmp_path):
    namespace = "resync-no-catch-up"
    held_cluster(api, 3, namespace)
    log = tmp_path / "function.log"
    settings = {**WORKED, "KAI_FN_BACKGROUND_WORKERS": "0"}
    with log.open("wb") as out, FunctionProcess({"KUBECONFIG": api.kubeconfig, **settings}, log=out) as fn:
        assert requests.get(f"{fn.url}/healthz", timeout=10).status_code == 200
        assert calls(api) == []  # the resync does it, in turns, at the next ping
        assert send(fn.url, ping()).status == 200
    assert log_lines(log, "catch-up") == []
    assert len(released(api, namespace)) == 3
