"""Scenario 5, replicas: knative/base lets the Service scale to 3. Three function processes (each behind its own
queue-proxy) behind one sink that spreads the deliveries over them round-robin, so a TrainJob's event, its held
JobSet's event and the resync's pass land on different processes at once. A burst over two namespaces: every
TrainJob ends bound whole (or refused by its queue, with the reason), no TrainJob gets two PodGroups of one wave, no
gang is ever partly bound, and no pass is dropped (a guarded write that lost a race is re-read and decided again)."""
from __future__ import annotations

import os
import time

import pytest

from kai_fn.local import faultburst
from kai_fn.local.chain import Chain
from kai_fn.local.faultburst import Burst, Record, body
from kai_fn.local.realchain import submit
from tests.chain.conftest import REPORT

REPLICAS = 3
BURST = int(os.environ.get("KAI_FN_REPLICA_BURST", "20"))


@pytest.fixture
def replicated(chains) -> Chain:
    chain = chains.use("kai", replicas=REPLICAS)
    yield chain
    chains.use("kai")  # the next scenario gets one replica again


def _submit_all(chain: Chain, burst: Burst, record: Record, small_queue: str) -> None:
    record.began = time.monotonic()
    for job in record.jobs:
        record.created[job.key] = time.monotonic()
        submit(chain.api, job.namespace, body(job, small_queue, burst.pods))
    record.faults_over = time.monotonic()


def test_three_replicas_behind_one_sink_make_one_gang_per_trainjob_and_bind_it_whole(replicated: Chain):
    burst = Burst(jobs=BURST, namespaces=2, pods=2, blocked_every=10, kills=0, settle=240)
    replicated.delete_nodes("replicas")  # a previous run's leftovers
    replicated.nodes(burst.nodes, "replicas")
    nss = [replicated.namespace("replicas") for _ in range(burst.namespaces)]
    logs = replicated.log_dir or replicated.kubeconfig.parent
    replica_logs = [logs / "function.log"] + [logs / f"function-{n}.log" for n in range(1, REPLICAS)]
    offsets = {p: p.stat().st_size for p in replica_logs}
    try:
        record = faultburst.run(replicated, burst, nss, "replicas", during=_submit_all)
    finally:
        replicated.clear(nss, "replicas")
    lines = [line for p in replica_logs for line in faultburst._json_lines(p, offsets[p])]
    spread = replicated.spreader.counts if replicated.spreader else []
    by_replica = [sum(1 for line in faultburst._json_lines(p, offsets[p]) if line.get("outcome") == "done"
                      and line.get("podgroup")) for p in replica_logs]
    REPORT.append(f"replicas: {REPLICAS} functions behind one sink, a burst of {burst.jobs}: deliveries per replica "
                  f"{spread}, gangs decided per replica {by_replica}, settled "
                  f"{(record.settled or 0) - record.began:.0f} s after the first create")
    assert len(spread) == REPLICAS and min(spread) > 0, "the sink spread the deliveries over every replica"
    assert not record.unsettled(), record.unsettled()[:10]
    assert not record.partly_bound(), record.partly_bound()[:10]
    assert not record.podgroups_per_wave(), record.podgroups_per_wave()[:10]
    assert not record.missing_podgroups, record.missing_podgroups[:10]
    assert [line for line in lines if line.get("msg") == "work dropped"] == []
