"""Concurrent deliveries of one event, and another writer between read and patch: one gang, one decision of the held
JobSet, nothing lost, the TrainJob never written."""
from __future__ import annotations

import collections
import threading
import time
import uuid

import pytest

from kai_fn.local.emulator import Call, Fault
from kai_fn.local.delivery import Adapter, Delivery
from tests.conftest import JOBSET, KAI_PG
from tests.reliability import (
    DONE, PERIOD, check_answers, gang_events, gate_state_of, make_job, plant, pod_templates, publish,
    safety_violations, versions_since,
)


@pytest.mark.parametrize("mode", ["resource", "ref", "jobset"], ids=["TrainJob resource", "TrainJob ref", "held JobSet"])
def test_fifty_simultaneous_deliveries_of_one_event_make_one_podgroup_and_one_jobset_write(api, function, mode):
    job = make_job("rel-concurrent-" + mode, "burst", str(uuid.uuid5(uuid.NAMESPACE_URL, "concurrent-" + mode)), mode=mode,
                   extras=True)
    since = plant(api, [job])
    sample = job.event()
    adapter = Adapter(function.url, period=PERIOD)
    barrier = threading.Barrier(50, timeout=30)
    answers: list[Delivery] = []

    def one() -> None:
        barrier.wait()
        answers.append(Delivery([adapter.post(sample)]))  # one try each: any 5xx counts

    threads = [threading.Thread(target=one) for _ in range(50)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "wall-clock guard: deliveries still running after 60 s"
    elapsed = time.perf_counter() - started

    assert check_answers(answers) == [] and [d.status for d in answers] == [200] * 50
    assert gate_state_of(api, job) == (DONE, [])
    assert [p["metadata"]["name"] for p in api.list(KAI_PG, "PodGroup", job.namespace)] == [job.pg_name]
    assert safety_violations(api, job, since) == []
    created = [c for c in api.calls if c.verb == "create" and c.resource == "podgroups"]
    assert sum(c.status == 201 for c in created) == 1
    assert len(versions_since(api, JOBSET, "JobSet", job.namespace, job.name, since)) == 2  # seeded + one patch
    assert not any(c.resource == "trainjobs" and c.verb not in ("get", "list") for c in api.calls)
    assert gang_events(api, job.namespace) == {job.uid: 1}
    calls = collections.Counter(f"{c.verb} {c.resource} {c.status}" for c in api.calls)
    publish(f"50 simultaneous deliveries of one {mode}-mode event", [
        f"- answers: 50 x 200 in {elapsed:.2f} s; PodGroups 1; JobSet versions written 1; GangCreated Events 1",
        "- API calls: " + ", ".join(f"{k} x{n}" for k, n in sorted(calls.items())),
    ])


def test_keys_another_writer_adds_between_kai_fns_read_and_its_patch_survive(api, function):
    job = make_job("rel-interleaved", "interleaved", "3b2a1f0e-9d8c-4b7a-a695-8f7e6d5c4b3a", shape="staged")
    since = plant(api, [job])
    assert "annotations" not in job.jobset["metadata"] and pod_templates(job.jobset)[0] == {}

    def someone_else_writes_first(call: Call) -> Fault | None:
        if call.verb == "patch" and call.resource == "jobsets" and api.faults is someone_else_writes_first:
            api.faults = None  # once
            live = api.get(JOBSET, "JobSet", job.namespace, job.name)
            del live["metadata"]["resourceVersion"]  # a write: the server gives it a new one
            live["metadata"]["annotations"] = {"example.com/late": "kept?"}
            live["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {
                "labels": {"example.com/late": "kept?"}}
            api.put(live)
        return None

    api.faults = someone_else_writes_first
    assert Adapter(function.url, period=PERIOD).send(job.event()).statuses == [200]
    js = api.get(JOBSET, "JobSet", job.namespace, job.name)
    assert safety_violations(api, job, since, jobset_writes=2) == []  # the other writer's and kai_fn's
    assert js["metadata"]["annotations"].get("example.com/late") == "kept?"
    assert pod_templates(js)[0].get("labels", {}).get("example.com/late") == "kept?"
    assert js["metadata"]["annotations"]["kai-fn/podgroup"] == job.pg_name and js["spec"]["suspend"] is False
    assert "kai-fn/held" not in js["metadata"]["labels"]
