"""Scenario 4, faults (kai_fn/local/faults.py makes them).

One fault in the middle of a burst of 20 plainly submitted TrainJobs (gangs of 2 pods, on KAI): (a) the function
killed and restarted, (b) the API server restarted (the launcher's SIGUSR1: kube-apiserver killed and started again
on the same port and etcd), (c) KAI's scheduler killed (SIGKILL) and started again (``cluster up`` starts what no
longer runs). Each time the resync releases every TrainJob, every gang binds whole, and no pod ever names a PodGroup
that did not exist when the pod was made (a pod watcher checks each pod as it is first seen). KAI writes a gang's
BindRequests one by one, so (c) also checks that each gang's BindRequests all came from one scheduler process.
A pod made and deleted without ever being bound is no part of a gang: when (b) loses a pod create's answer, the Job
controller makes the pod of that index again and deletes the extra (as `Record.made_again` in faultburst.py says).

Then the faults together, at scale (kai_fn/local/faultburst.py): ``KAI_FN_FAULT_BURST`` TrainJobs (20 unless told)
over two namespaces, some of them ones kai_fn must refuse, while the function is killed every 10 s, the API server
restarted once and the TrainJob and JobSet sources' adapters once (the last quarter, made meanwhile, has no event:
the resync must release it). ``python -m bench faults`` runs the same with 100.
Bounded; nothing timed.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest
from kubernetes import client

from kai_fn.local import faults
from kai_fn.local.chain import Chain
from kai_fn.local.faultburst import Burst, run
from kai_fn.local.objwatch import BIND_REQUESTS, ObjectWatch, split_gangs
from kai_fn.local.podwatch import PodWatch
from kai_fn.local.realchain import submit, trainjob
from tests.chain.conftest import REPORT, wait_for
from tests.chain.gangs import made

BURST, PODS = 20, 2
FAULT_BURST = int(os.environ.get("KAI_FN_FAULT_BURST", "20"))
RESTARTS: dict[str, float] = {}  # what was killed to be restarted, and when (seconds since the epoch)


def kill_and_restart_function(chain: Chain, ns: str) -> None:
    faults.kill_and_restart_function(chain, down=2)  # events of this gap find no one; their tries run out


def restart_api_server(chain: Chain, ns: str) -> None:
    faults.restart_api_server(chain.kubeconfig)


HALF_BOUND_S = 20.0  # the restart's 2 s, KAI's start and its next sessions, with room for a loaded machine


def kill_and_restart_kai_scheduler(chain: Chain, ns: str) -> None:
    """Once the first gang is bound, so the scheduler dies while it allocates the others."""
    wait_for("the first gang bound", lambda: sum(1 for p in client.CoreV1Api(chain.api).list_namespaced_pod(ns).items
                                                 if p.spec.node_name) >= PODS)
    faults.kill_kai_scheduler(chain.kubeconfig)
    RESTARTS["kai-scheduler"] = time.time()  # its BindRequests are all older; the next one's come 2 s later at least
    time.sleep(2)  # TrainJobs released meanwhile make pods nobody schedules
    faults.start_chain_components()


def unbound(seen: list) -> str:
    """What a failed wait for every gang saw: how many bound, and each pod not on a node or gone."""
    odd = [(p.name, p.phase, "gone" if p.gone_at else "") for p in seen if not p.node or p.gone_at]
    return f"{sum(1 for p in seen if p.node)}/{BURST * PODS} pods bound, {len(seen)} seen; not on a node or gone: {odd}"


def released(chain: Chain, ns: str) -> set[str]:
    """TrainJobs whose gang kai_fn made (their pods, named at admission, may bind)."""
    return made(chain, ns)


@pytest.mark.parametrize("fault", [kill_and_restart_function, restart_api_server, kill_and_restart_kai_scheduler],
                         ids=["function-killed", "api-server-restarted", "kai-scheduler-killed"])
def test_a_fault_in_the_middle_of_a_burst_loses_no_trainjob_and_no_pod_names_a_missing_podgroup(
        chain: Chain, pool, namespaces, fault: Callable[[Chain, str], None]):
    pool("faults").ensure(f"{BURST * PODS // 8}x8")  # room for every gang: all of them bind
    ns = namespaces("faults")
    chain.runtime(ns, pool="faults")
    names = [f"burst-{i:02d}" for i in range(BURST)]
    RESTARTS.clear()
    with PodWatch(chain.api, ns, check_groups=True) as pods, ObjectWatch(chain.api, BIND_REQUESTS, ns) as binds:
        for i, name in enumerate(names):
            if i == BURST // 2:
                fault(chain, ns)
            submit(chain.api, ns, trainjob(name, "chain", nodes=PODS, gpus=1, kind="TrainingRuntime"))
        wait_for("the resync releases every TrainJob", lambda: released(chain, ns) == set(names), 180,
                 explain=lambda: f"not released: {sorted(set(names) - released(chain, ns))}")
        wait_for("every gang bound", lambda: len(live := [p for p in pods.snapshot() if not p.gone_at])
                 == BURST * PODS and all(p.node for p in live), 120,
                 explain=lambda: unbound(pods.snapshot()))
    assert pods.violations == []
    seen = pods.snapshot()
    assert {p.jobset for p in seen} == set(names)  # every TrainJob made its pods, so the check covered each
    assert [p.name for p in seen if not p.group] == []
    assert [p.name for p in seen if p.gone_at and p.node] == []  # each gang went from none bound to all
    if made_again := [p.name for p in seen if p.gone_at]:  # never bound: no part of a gang (see made_again's docstring)
        REPORT.append(f"faults ({fault.__name__}): pods the Job controller made again and deleted unbound: {made_again}")
    if "kai-scheduler" in RESTARTS:
        gang_of = {p.name: p.jobset for p in seen if p.node}
        assert set(binds.seen) >= set(gang_of), "a bound pod without a BindRequest: not bound by KAI"
        # KAI makes a gang's BindRequests one by one: a kill between two of them leaves the rest to the restarted
        # scheduler (KAI's behaviour, not kai_fn's). Such a gang must be completed by it at once, not left half bound.
        split = split_gangs(binds.seen, gang_of, RESTARTS["kai-scheduler"])
        spread = {gang: max(at) - min(at) for gang in split
                  if len(at := [p.bound_at for p in seen if p.jobset == gang and p.bound_at is not None]) == PODS}
        assert set(spread) == set(split) and all(s <= HALF_BOUND_S for s in spread.values()), (split, spread)
        after = {gang_of[p] for p, at in binds.seen.items() if at > RESTARTS["kai-scheduler"]}
        both = (f" (killed between its BindRequests; the rest bound "
                f"{', '.join(f'{s:.1f}' for s in spread.values())} s later)") if split else ""
        REPORT.append(f"faults: KAI's scheduler killed mid-burst; {BURST - len(after)} gangs bound by the first "
                      f"scheduler, {len(after) - len(split)} by the restarted one, {len(split)} by both{both}")


def test_a_burst_with_faults_at_scale_ends_with_every_trainjob_bound_whole_or_blocked_with_a_reason(
        chain: Chain, pool, namespaces):
    burst = Burst(jobs=FAULT_BURST, namespaces=2)
    pool("fburst").ensure(burst.nodes)
    record = run(chain, burst, [namespaces("fburst") for _ in range(burst.namespaces)], pool="fburst")
    REPORT.extend(f"fault burst: {line}" for line in record.figures())

    assert record.fault_errors == []
    assert record.faults.keys() == {"function killed", "API server restarted", "TrainJob and JobSet adapters restarted"}
    assert record.unsettled() == []
    assert record.partly_bound() == []
    assert record.podgroups_per_wave() == []
    assert record.missing_podgroups == []
    assert record.released_by()["resync"] > 0, "no event was missed: the burst did not test the resync"


def test_the_pod_watcher_reports_a_pod_bound_while_its_podgroup_does_not_exist(chain: Chain, namespaces):
    """Waiting unbound for its PodGroup is no violation (KAI holds such a pod); bound without it is one."""
    ns = namespaces("faults-watch", enabled=False)
    waiting, placed = (client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"scheduling.x-k8s.io/pod-group": "never-made"}),
        spec=client.V1PodSpec(scheduler_name="scheduler-plugins-scheduler", node_name=node,
                              node_selector={"kai-fn.testbed/pool": "nowhere"},
                              containers=[client.V1Container(name="c", image="none")]))
        for name, node in (("waiting", None), ("orphan", "nowhere-node")))
    with PodWatch(chain.api, ns, check_groups=True) as pods:
        client.CoreV1Api(chain.api).create_namespaced_pod(ns, waiting)
        client.CoreV1Api(chain.api).create_namespaced_pod(ns, placed)
        wait_for("the watcher's report", lambda: pods.violations, 30)
    assert pods.violations == ["pod orphan was bound while its PodGroup never-made did not exist"]
