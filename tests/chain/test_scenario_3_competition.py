"""Scenario 3, competition: two TrainJobs of 4 x 8 GPUs on a pool that fits one, on KAI. One binds whole, the other
waits whole, never in part; the second binds whole once the first is deleted. The limit here is the pool's capacity
(4 nodes x 8 GPUs); test_scenario_6_queue_limits.py caps gangs with a Queue's GPU limit instead.

"In part" means a gang holding some of its pods while it waits. A gang the scheduler has admitted whole is bound
with one API call per pod, so a poll can catch it between those calls; such a count is allowed only on the way to
all 4, and the waiting gang must never show one while the other holds the pool."""
from __future__ import annotations

from kubernetes import client

from kai_fn.local.chain import TRAINER
from tests.chain.conftest import REPORT, wait_for
from tests.chain.gangs import bound, pods, table, tried


def test_two_gangs_that_fit_one_at_a_time_bind_whole_one_after_the_other(chain, pool, namespaces):
    pool("compete").ensure("4x8")
    ns = namespaces("compete")
    chain.runtime(ns, pool="compete")
    for name in ("first", "second"):
        chain.trainjob(ns, name, num_nodes=4)
    seen = lambda: table(chain, ns)  # noqa: E731
    partial: list[tuple[str, int]] = []

    def counts(*names: str) -> dict[str, int] | None:
        """Bound pods per TrainJob, once all their pods exist and were tried; every count of 1 to 3 is recorded."""
        by_job = {name: pods(chain, ns, name) for name in names}
        n = {name: len(bound(ps)) for name, ps in by_job.items()}
        partial.extend((name, k) for name, k in n.items() if k not in (0, 4))
        return n if all(len(ps) == 4 and tried(ps) for ps in by_job.values()) else None

    settled = wait_for("one gang bound whole and the other turned away whole",
                       lambda: (n := counts("first", "second")) and sorted(n.values()) == [0, 4] and n, explain=seen)
    holder = next(name for name, k in settled.items() if k == 4)
    waiter = next(name for name, k in settled.items() if k == 0)
    assert [k for name, k in partial if name == waiter] == [], f"{waiter} held part of its pods while it waited"

    client.CustomObjectsApi(chain.api).delete_namespaced_custom_object(
        *TRAINER, ns, "trainjobs", holder, propagation_policy="Foreground")
    wait_for(f"{waiter} binds whole after {holder} is deleted",
             lambda: (n := counts(waiter)) and n[waiter] == 4, explain=seen)
    REPORT.append(f"competition: {len(partial)} poll(s) caught an admitted gang between its pods' bind calls")
