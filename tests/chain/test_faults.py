"""Scenario 4, faults, on the chain: a burst of 20 plainly submitted TrainJobs while (a) the function is killed
and restarted, (b) the API server is restarted. Either way the resync releases every TrainJob, and no pod ever
names a PodGroup that did not exist when the pod was made (a pod watcher checks each pod as it is first seen).
Bounded: each wait has a deadline; nothing here measures time."""
from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from kai_fn.local.podwatch import PodWatch
from kai_fn.local.process import FunctionProcess
from kai_fn.local.realchain import (
    KAI_FN_RUNTIME, TRAINER, Cluster, chain_cluster, ensure_runtimes, kai_fn_running, namespace, submit, trainjob,
)
from tests.ce import ping, send

pytestmark = [pytest.mark.chain,
              pytest.mark.skipif(shutil.which("go") is None, reason="chain tier: Go is not installed")]
BURST = 20


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with chain_cluster("3x8") as c:
        ensure_runtimes(c)
        yield c


def kill_and_restart_function(cluster: Cluster, fn: FunctionProcess) -> None:
    assert fn.proc is not None
    fn.proc.kill()
    fn.proc.wait()
    time.sleep(2)  # events of this gap find no one: the source gives up on them, as a direct sink does
    fn.start()


def restart_api_server(cluster: Cluster, fn: FunctionProcess) -> None:
    restarts = cluster.state / "apiserver-restarts"
    restarts.unlink(missing_ok=True)
    os.kill(cluster.launcher_pid(), signal.SIGUSR1)
    end = time.monotonic() + 90
    while not restarts.exists() and time.monotonic() < end:
        time.sleep(0.5)
    assert restarts.exists() and restarts.read_text().startswith("restarted"), "the API server did not come back"


def released(cluster: Cluster, ns: str) -> set[str]:
    """TrainJobs kai_fn finished: marked with their PodGroup and resumed."""
    items = client.CustomObjectsApi(cluster.api).list_namespaced_custom_object(*TRAINER, ns, "trainjobs")["items"]
    return {j["metadata"]["name"] for j in items
            if not j["spec"].get("suspend") and "kai-fn/podgroup" in (j["metadata"].get("annotations") or {})}


@pytest.mark.parametrize("fault", [kill_and_restart_function, restart_api_server],
                         ids=["function-killed", "api-server-restarted"])
def test_a_fault_in_the_middle_of_a_burst_loses_no_trainjob_and_no_pod_names_a_missing_podgroup(
        cluster: Cluster, fault: Callable[[Cluster, FunctionProcess], None], request: pytest.FixtureRequest):
    ns = namespace(cluster, "faults", enabled=True)
    names = [f"burst-{i:02d}" for i in range(BURST)]
    request.addfinalizer(lambda: client.CoreV1Api(cluster.api).delete_namespace(ns))
    with kai_fn_running(cluster, [ns]) as fn, PodWatch(cluster.api, ns, check_groups=True) as pods:
        for i, name in enumerate(names):
            if i == BURST // 2:
                fault(cluster, fn)
            submit(cluster, ns, trainjob(name, KAI_FN_RUNTIME, nodes=2, gpus=1))
        end = time.monotonic() + 180
        while (done := released(cluster, ns)) != set(names) and time.monotonic() < end:
            send(fn.url, ping())  # the resync (a PingSource in a cluster)
            time.sleep(2)
        time.sleep(3)  # pods of the last released TrainJobs are made and seen
    assert sorted(set(names) - done) == []
    assert pods.violations == []
    seen = pods.snapshot()
    assert {p.jobset for p in seen} == set(names)  # every TrainJob made its pods, so the check covered each
    assert [p.name for p in seen if not p.group] == []


def test_the_pod_watcher_reports_a_pod_that_names_a_podgroup_that_does_not_exist(cluster: Cluster,
                                                                                  request: pytest.FixtureRequest):
    ns = namespace(cluster, "faults-watch", enabled=False)
    request.addfinalizer(lambda: client.CoreV1Api(cluster.api).delete_namespace(ns))
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="orphan", labels={"scheduling.x-k8s.io/pod-group": "never-made"}),
        spec=client.V1PodSpec(scheduler_name="scheduler-plugins-scheduler",
                              containers=[client.V1Container(name="c", image="none")]))
    with PodWatch(cluster.api, ns, check_groups=True) as pods:
        client.CoreV1Api(cluster.api).create_namespaced_pod(ns, pod)
        end = time.monotonic() + 30
        while not pods.violations and time.monotonic() < end:
            time.sleep(0.2)
    assert pods.violations == ["pod orphan names PodGroup never-made, which did not exist when the pod was made"]
