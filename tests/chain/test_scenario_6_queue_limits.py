"""Scenario 6, queue limits on KAI: a leaf Queue with a limit of 16 GPUs on a pool of 32. A gang of 2 x 8 GPUs binds
and holds the queue's 16; a second one, over what the queue has left though the nodes have room, waits whole with
KAI's reason ``OverLimit``, told to its TrainJob once (Event ``GangUnschedulable``); it binds whole when the holder
is deleted. A gang that can never fit the queue (3 x 8 > 16) is refused by kai_fn's pre-check, ``GangExceedsQueue``:
no PodGroup is made, so its pods, named at admission, wait unbound and hold no GPU (nothing is suspended)."""
from __future__ import annotations

from kubernetes import client

from kai_fn.core import keys
from kai_fn.local.chain import TRAINER
from tests.chain.conftest import REPORT, wait_for
from tests.chain.gangs import (bound, decision, kai_reasons, podgroup, pods, queue, table, trainjob, trainjob_events,
                               trainjob_warnings, tried)

QUEUE_LABEL = "kai.scheduler/queue"


def test_a_gang_over_what_its_queue_has_left_waits_with_overlimit_then_binds_when_the_holder_goes(
        chain, pool, queues, namespaces):
    pool("qlimit").ensure("4x8")
    ns = namespaces("qlimit")
    parent = queues(queue(f"{ns}-parent"))
    leaf = queues(queue(ns, parent=parent, gpu_limit=16))
    chain.runtime(ns, pool="qlimit")
    seen = lambda: table(chain, ns)  # noqa: E731

    chain.trainjob(ns, "holder", num_nodes=2, labels={QUEUE_LABEL: leaf})
    wait_for("the holder binds whole", lambda: len(bound(pods(chain, ns, "holder"))) == 2, explain=seen)
    chain.trainjob(ns, "waiter", num_nodes=2, labels={QUEUE_LABEL: leaf})
    waiting = wait_for("the waiter's pods exist, KAI turned each away", lambda: (ps := pods(chain, ns, "waiter"))
                       and len(ps) == 2 and tried(ps) and ps, explain=seen)
    assert bound(waiting) == []
    reasons = wait_for("KAI says OverLimit on the waiter's PodGroup",
                       lambda: "OverLimit" in (r := kai_reasons(podgroup(chain, ns, "waiter"))) and r, explain=seen)
    told = wait_for("kai_fn tells the waiter's TrainJob GangUnschedulable",
                    lambda: trainjob_warnings(chain, ns, "waiter", "GangUnschedulable"),
                    explain=lambda: str(trainjob_events(chain, ns, "waiter")))
    assert len(told) == 1 and "OverLimit" in told[0] and leaf in told[0], told
    assert told[0].endswith("GPUs.") and "\n" not in told[0], told  # KAI's message, made a whole sentence
    REPORT.append(f"queue limits: KAI's reasons for the waiter {reasons}; kai_fn told: {told[0][:160]}")

    client.CustomObjectsApi(chain.api).delete_namespaced_custom_object(
        *TRAINER, ns, "trainjobs", "holder", propagation_policy="Foreground")
    wait_for("the waiter binds whole once the holder is gone",
             lambda: len(bound(pods(chain, ns, "waiter"))) == 2, explain=seen)
    assert len(trainjob_warnings(chain, ns, "waiter", "GangUnschedulable")) == 1
    wait_for("kai_fn tells the waiter's TrainJob GangBound",
             lambda: "GangBound" in trainjob_events(chain, ns, "waiter"), deadline_s=60)


def test_a_gang_that_can_never_fit_its_queue_is_refused_and_its_pods_hold_nothing(chain, pool, queues, namespaces):
    pool("qnever").ensure("4x8")
    ns = namespaces("qnever")
    parent = queues(queue(f"{ns}-parent"))
    leaf = queues(queue(ns, parent=parent, gpu_limit=16))
    chain.runtime(ns, pool="qnever")
    chain.trainjob(ns, "too-big", num_nodes=3, labels={QUEUE_LABEL: leaf})

    refused = wait_for("kai_fn refuses it: GangExceedsQueue",
                       lambda: trainjob_warnings(chain, ns, "too-big", "GangExceedsQueue"),
                       explain=lambda: str(trainjob_events(chain, ns, "too-big")))
    assert leaf in refused[0] and "24" in refused[0] and "16" in refused[0], refused
    assert trainjob(chain, ns, "too-big")["spec"].get("suspend") is False, "the TrainJob is never suspended"
    assert decision(chain, ns, "too-big") == {keys.NAMED_LABEL: "true"}, "its JobSet named, never held"
    waiting = wait_for("its pods exist, named, unbound", lambda: len(ps := pods(chain, ns, "too-big")) == 3 and ps)
    assert bound(waiting) == [] and podgroup(chain, ns, "too-big") is None
    kai_groups = client.CustomObjectsApi(chain.api).list_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", ns, "podgroups")["items"]
    assert kai_groups == []
    assert bound(pods(chain, ns, "too-big")) == [], "no pod of the refused gang was bound meanwhile"
    REPORT.append(f"queue limits: refused, its pods unbound: {refused[0][:160]}")
