"""Scenario 7, priority and preemption on KAI: a pool of 4 x 8 GPUs held whole by two preemptible gangs of 2 x 8
(PriorityClass ``train``, 50). A non-preemptible gang of 2 x 8 (``build``, 100, and ``kai.scheduler/preemptibility:
non-preemptible``) in the same queue, within its quota, makes KAI evict one of them whole, never a pod of each
(which would free the same 16 GPUs on two nodes); the evicted gang's pods come back and wait whole.

KAI's PriorityClasses are the ones its install creates (``cluster up --chain``); a priority of 100 or more is
non-preemptible, and a non-preemptible gang may use only its queue's quota (KAI's quota_check.go), hence the
queues' quota of 16."""
from __future__ import annotations

import time

from tests.chain.conftest import REPORT, wait_for
from tests.chain.gangs import bound, pods, queue, table, trainjob_events

PREEMPTIBLE = {"priorityClassName": "train", "kai.scheduler/preemptibility": "preemptible"}
NON_PREEMPTIBLE = {"priorityClassName": "build", "kai.scheduler/preemptibility": "non-preemptible"}


def test_a_non_preemptible_gang_in_a_full_pool_evicts_one_preemptible_gang_whole(chain, pool, queues, namespaces):
    pool("prio").ensure("4x8")
    ns = namespaces("prio")
    parent = queues(queue(f"{ns}-parent", gpu_quota=16))
    leaf = queues(queue(ns, parent=parent, gpu_quota=16))
    chain.runtime(ns, pool="prio")
    seen = lambda: table(chain, ns)  # noqa: E731
    low = ("low-a", "low-b")
    for name in low:
        chain.trainjob(ns, name, num_nodes=2, labels={"kai.scheduler/queue": leaf, **PREEMPTIBLE})
    before = wait_for("both preemptible gangs bind, the pool is full",
                      lambda: (b := {n: bound(pods(chain, ns, n)) for n in low}) and
                      all(len(ps) == 2 for ps in b.values()) and b, explain=seen)
    original = {n: {p.metadata.name for p in ps} for n, ps in before.items()}

    chain.trainjob(ns, "urgent", num_nodes=2, labels={"kai.scheduler/queue": leaf, **NON_PREEMPTIBLE})
    submitted = time.monotonic()
    wait_for("the non-preemptible gang binds whole", lambda: len(bound(pods(chain, ns, "urgent"))) == 2,
             deadline_s=180, explain=seen)
    took = time.monotonic() - submitted

    def left(name: str) -> int:
        """Pods of the gang's first incarnation still there."""
        return len(original[name] & {p.metadata.name for p in pods(chain, ns, name)})

    kept = {n: left(n) for n in low}
    assert sorted(kept.values()) == [0, 2], f"a gang was evicted in part: pods left per gang {kept}"
    evicted = next(n for n, k in kept.items() if k == 0)
    back = wait_for(f"{evicted}'s pods come back and KAI turns them away whole",
                    lambda: (ps := pods(chain, ns, evicted)) and len(ps) == 2 and ps, explain=seen)
    assert bound(back) == []
    wait_for("kai_fn tells the urgent TrainJob GangBound", lambda: "GangBound" in trainjob_events(chain, ns, "urgent"),
             deadline_s=60)
    REPORT.append(f"preemption: KAI evicted {evicted} whole for the non-preemptible gang, which bound {took:.0f} s "
                  f"after its submission; pods left per gang {kept}")
