"""Scenario 4, faults: a burst of 20 plainly submitted TrainJobs (gangs of 2 pods, on KAI) while (a) the function is
killed and restarted, (b) the API server is restarted (the launcher's SIGUSR1: kube-apiserver killed and started
again on the same port and etcd), (c) KAI's scheduler is killed (SIGKILL) and started again (``cluster up`` starts
what no longer runs). Each time the resync releases every TrainJob, every gang binds, no pod ever names a PodGroup
that did not exist when the pod was made (a pod watcher checks each pod as it is first seen), and no gang is partly
bound: each gang's BindRequests come from one scheduler process (tests/chain/bindwatch.py). Bounded; nothing timed."""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest
from kubernetes import client

from kai_fn.local.chain import TRAINER, Chain
from kai_fn.local.podwatch import PodWatch
from kai_fn.local.realchain import submit, trainjob
from tests.chain.bindwatch import BindRequestWatch, split_gangs
from tests.chain.conftest import REPORT, wait_for
from tests.testbed.conftest import _cluster

BURST, PODS = 20, 2
RESTARTS: dict[str, float] = {}  # what was killed to be restarted, and when (seconds since the epoch)


def kill_and_restart_function(chain: Chain, ns: str) -> None:
    fn = chain.function
    assert fn.proc is not None
    fn.kill()
    time.sleep(2)  # events of this gap find no one; the sources give up on them after their retries
    fn.start()


def restart_api_server(chain: Chain, ns: str) -> None:
    state = chain.kubeconfig.parent
    restarts = state / "apiserver-restarts"
    restarts.unlink(missing_ok=True)
    os.kill(int((state / "launcher.pid").read_text()), signal.SIGUSR1)
    wait_for("the API server restarted", restarts.exists, 90)
    assert restarts.read_text().startswith("restarted"), restarts.read_text()


def kill_and_restart_kai_scheduler(chain: Chain, ns: str) -> None:
    """Once the first gang is bound, so the scheduler dies while it allocates the others."""
    wait_for("the first gang bound", lambda: sum(1 for p in client.CoreV1Api(chain.api).list_namespaced_pod(ns).items
                                                 if p.spec.node_name) >= PODS)
    state = chain.kubeconfig.parent
    pid = next(int(line.split()[1]) for line in (state / "chain.pids").read_text().splitlines()
               if line.startswith("kai-scheduler "))
    os.kill(pid, signal.SIGKILL)
    wait_for("KAI's scheduler is gone", lambda: not os.path.exists(f"/proc/{pid}") or
             open(f"/proc/{pid}/stat").read().split()[2] == "Z", 30)
    RESTARTS["kai-scheduler"] = time.time()  # its BindRequests are all older; the next one's come 2 s later at least
    time.sleep(2)  # TrainJobs released meanwhile make pods nobody schedules
    assert _cluster("up", "--chain", "--without-kai-fn", capture=True).returncode == 0


def released(chain: Chain, ns: str) -> set[str]:
    """TrainJobs kai_fn finished: marked with their PodGroup and resumed."""
    items = client.CustomObjectsApi(chain.api).list_namespaced_custom_object(*TRAINER, ns, "trainjobs")["items"]
    return {j["metadata"]["name"] for j in items
            if not j["spec"].get("suspend") and "kai-fn/podgroup" in (j["metadata"].get("annotations") or {})}


@pytest.mark.parametrize("fault", [kill_and_restart_function, restart_api_server, kill_and_restart_kai_scheduler],
                         ids=["function-killed", "api-server-restarted", "kai-scheduler-killed"])
def test_a_fault_in_the_middle_of_a_burst_loses_no_trainjob_and_no_pod_names_a_missing_podgroup(
        chain: Chain, pool, namespaces, fault: Callable[[Chain, str], None]):
    pool("faults").ensure(f"{BURST * PODS // 8}x8")  # room for every gang: all of them bind
    ns = namespaces("faults")
    chain.runtime(ns, pool="faults")
    names = [f"burst-{i:02d}" for i in range(BURST)]
    RESTARTS.clear()
    with PodWatch(chain.api, ns, check_groups=True) as pods, BindRequestWatch(chain.api, ns) as binds:
        for i, name in enumerate(names):
            if i == BURST // 2:
                fault(chain, ns)
            submit(chain.api, ns, trainjob(name, "chain", nodes=PODS, gpus=1, kind="TrainingRuntime"))
        wait_for("the resync releases every TrainJob", lambda: released(chain, ns) == set(names), 180,
                 explain=lambda: f"not released: {sorted(set(names) - released(chain, ns))}")
        wait_for("every gang bound", lambda: (seen := pods.snapshot()) and len(seen) == BURST * PODS
                 and all(p.node for p in seen), 120,
                 explain=lambda: f"{sum(1 for p in pods.snapshot() if p.node)}/{BURST * PODS} pods bound")
    assert pods.violations == []
    seen = pods.snapshot()
    assert {p.jobset for p in seen} == set(names)  # every TrainJob made its pods, so the check covered each
    assert [p.name for p in seen if not p.group] == []
    if "kai-scheduler" in RESTARTS:
        gang_of = {p.name: p.jobset for p in seen}
        assert set(binds.seen) >= set(gang_of), "a bound pod without a BindRequest: not bound by KAI"
        assert split_gangs(binds.seen, gang_of, RESTARTS["kai-scheduler"]) == {}, "a gang bound by two schedulers"
        after = {gang_of[p] for p, at in binds.seen.items() if at > RESTARTS["kai-scheduler"]}
        REPORT.append(f"faults: KAI's scheduler killed mid-burst; {BURST - len(after)} gangs bound by the first "
                      f"scheduler, {len(after)} by the restarted one, none by both")


def test_the_pod_watcher_reports_a_pod_that_names_a_podgroup_that_does_not_exist(chain: Chain, namespaces):
    ns = namespaces("faults-watch", enabled=False)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="orphan", labels={"scheduling.x-k8s.io/pod-group": "never-made"}),
        spec=client.V1PodSpec(scheduler_name="scheduler-plugins-scheduler",
                              node_selector={"kai-fn.testbed/pool": "nowhere"},
                              containers=[client.V1Container(name="c", image="none")]))
    with PodWatch(chain.api, ns, check_groups=True) as pods:
        client.CoreV1Api(chain.api).create_namespaced_pod(ns, pod)
        wait_for("the watcher's report", lambda: pods.violations, 30)
    assert pods.violations == ["pod orphan names PodGroup never-made, which did not exist when the pod was made"]
