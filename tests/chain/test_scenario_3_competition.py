"""Scenario 3, competition: two TrainJobs of 4 x 8 GPUs on a pool that fits one. One binds whole, the other waits
whole, never in part; the second binds whole once the first is deleted.

KAI would cap them with a Queue's GPU limit; Coscheduling has no queues, so the limit here is the pool's capacity
(4 nodes x 8 GPUs)."""
from __future__ import annotations

from kubernetes import client

from kai_fn.local.chain import TRAINER
from tests.chain.conftest import wait_for
from tests.chain.gangs import bound, pods, table, tried


def test_two_gangs_that_fit_one_at_a_time_bind_whole_one_after_the_other(chain, pool, namespaces):
    pool("compete").ensure("4x8")
    ns = namespaces("compete")
    chain.runtime(ns, pool="compete")
    for name in ("first", "second"):
        chain.trainjob(ns, name, num_nodes=4)
    seen = lambda: table(chain, ns)  # noqa: E731
    partial: list[str] = []

    def counts(*names: str) -> dict[str, int] | None:
        """Bound pods per TrainJob, once all their pods exist and were tried; any partial gang is recorded."""
        by_job = {name: pods(chain, ns, name) for name in names}
        n = {name: len(bound(ps)) for name, ps in by_job.items()}
        partial.extend(f"{name}: {k} of 4 bound" for name, k in n.items() if k not in (0, 4))
        return n if all(len(ps) == 4 and tried(ps) for ps in by_job.values()) else None

    settled = wait_for("one gang bound whole and the other turned away whole",
                       lambda: (n := counts("first", "second")) and sorted(n.values()) == [0, 4] and n, explain=seen)
    assert partial == []
    holder = next(name for name, k in settled.items() if k == 4)
    waiter = next(name for name, k in settled.items() if k == 0)

    client.CustomObjectsApi(chain.api).delete_namespaced_custom_object(
        *TRAINER, ns, "trainjobs", holder, propagation_policy="Foreground")
    wait_for(f"{waiter} binds whole after {holder} is deleted",
             lambda: (n := counts(waiter)) and n[waiter] == 4, explain=seen)
    assert partial == []
