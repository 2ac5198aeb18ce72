"""Scenario 8, the schedule timeout with KAI (which has none): a gang of 2 x 8 GPUs on a pool of one 8-GPU node can
never bind. With ``kai-fn/schedule-timeout-seconds: 15`` on its TrainJob, the resync (every 10 s here) finds it past
its time: the Warning ``ScheduleTimeout`` carries KAI's last reasons, and with ``KAI_FN_ON_TIMEOUT=suspend`` (the
chain tier's setting) the TrainJob is suspended again, so its pods go and the pool is free: a gang that fits binds."""
from __future__ import annotations

from kai_fn.core import keys
from tests.chain.conftest import REPORT, wait_for
from tests.chain.gangs import (bound, podgroup_annotations, pods, table, trainjob, trainjob_events, trainjob_warnings,
                               tried)


def test_a_gang_that_cannot_bind_times_out_and_is_suspended_and_its_pods_go(chain, pool, namespaces):
    pool("timeout").ensure("1x8")
    ns = namespaces("timeout")
    chain.runtime(ns, pool="timeout")
    seen = lambda: table(chain, ns)  # noqa: E731
    chain.trainjob(ns, "stuck", num_nodes=2, annotations={keys.SCHEDULE_TIMEOUT_ANNOTATION: "15"})
    waiting = wait_for("its pods exist and KAI turned each away",
                       lambda: (ps := pods(chain, ns, "stuck")) and len(ps) == 2 and tried(ps) and ps, explain=seen)
    assert bound(waiting) == []

    timed_out = wait_for("kai_fn's Warning ScheduleTimeout", lambda: trainjob_warnings(chain, ns, "stuck",
                                                                                      "ScheduleTimeout"),
                         deadline_s=90, explain=lambda: str(trainjob_events(chain, ns, "stuck")))
    assert "PodSchedulingErrors" in timed_out[0] or "Resources were found" in timed_out[0], timed_out
    assert trainjob(chain, ns, "stuck")["spec"]["suspend"] is True  # KAI_FN_ON_TIMEOUT=suspend: the one TrainJob write
    # The Warning comes before the mark that ends the wait (kai_fn/function/timeouts.py): the mark follows it.
    wait_for("the timeout's mark on the PodGroup",
             lambda: keys.TIMED_OUT_ANNOTATION in podgroup_annotations(chain, ns, "stuck"), deadline_s=30,
             explain=lambda: str(podgroup_annotations(chain, ns, "stuck")))
    wait_for("its pods go away", lambda: pods(chain, ns, "stuck") == [], explain=seen)

    chain.trainjob(ns, "fits", num_nodes=1)
    wait_for("a gang that fits binds on the freed pool", lambda: len(bound(pods(chain, ns, "fits"))) == 1,
             explain=seen)
    REPORT.append(f"schedule timeout: {timed_out[0][:200]}")
