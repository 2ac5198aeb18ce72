"""The queue pre-check and the schedule timeout against a real API server: real Queue objects (KAI's CRD, validated
by the server; KAI itself does not run here), real merge patches with resourceVersion preconditions, real Events.

The function runs as the real server (``python -m kai_fn.function.serve``) with the testbed's admin kubeconfig, restricted to a
fresh namespace per test (``KAI_FN_NAMESPACES``); Queues and runtimes, being cluster-scoped, get unique names.
"""
from __future__ import annotations

import copy
import datetime
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kai_fn.core import keys, objects, state
from kai_fn.function.cluster import CachedServer
from kai_fn.kube import Stale
from kai_fn.settings import load
from kai_fn.local.process import REPO, FunctionProcess
from kai_fn.function.migration.jobset_hold import HELD_LABEL
from tests.ce import ping, resource, send
from tests.manifests import BASE, FUNCTION, NAMESPACE, by_kind, render
from tests.testbed.conftest import LiveCluster, wait_for
from tests.testbed.kai_fn_install import ENABLED
from tests.builders import held_by_0_2

TRAINER = ("trainer.kubeflow.org", "v1alpha1")
KAI = ("scheduling.run.ai", "v2")
JOBSET = ("jobset.x-k8s.io", "v1alpha2")


def sample(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "samples" / "cluster" / f"{name}.yaml").read_text())


@pytest.fixture
def world(testbed: LiveCluster) -> Iterator[dict[str, str]]:
    """A namespace, and names for this test's cluster-scoped Queue and runtime; all deleted afterwards."""
    tag = uuid.uuid4().hex[:8]
    names = {"ns": f"precheck-{tag}", "queue": f"team-{tag}", "runtime": f"torch-kai-{tag}"}
    testbed.ensure_namespace(names["ns"], ENABLED)
    yield names
    objs = client.CustomObjectsApi(testbed.api)
    for group_version, plural, name in ((KAI, "queues", names["queue"]), (TRAINER, "clustertrainingruntimes",
                                                                             names["runtime"])):
        try:
            objs.delete_cluster_custom_object(*group_version, plural, name)
        except client.ApiException as e:
            if e.status != 404:  # never made by this test; anything else is a leak to report here, not later
                raise
    client.CoreV1Api(testbed.api).delete_namespace(names["ns"])


@pytest.fixture
def function_on(testbed: LiveCluster, world: dict[str, str]) -> Iterator[Any]:
    started: list[FunctionProcess] = []

    def start(kubeconfig: Path | None = None, **settings: str) -> FunctionProcess:
        proc = FunctionProcess({"KUBECONFIG": str(kubeconfig or testbed.kubeconfig), "KAI_FN_NAMESPACES": world["ns"],
                                "KAI_FN_RUNTIME_CACHE_SECONDS": "0", "KAI_FN_BACKGROUND_WORKERS": "0",
                                **settings}).start()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


def make_queue(testbed: LiveCluster, name: str, gpu_limit: float) -> None:
    queue = sample("queue-team-a")
    queue["metadata"] = {"name": name}
    queue["spec"].pop("parentQueue")
    queue["spec"]["resources"]["gpu"]["limit"] = gpu_limit
    objs = client.CustomObjectsApi(testbed.api)
    try:
        objs.create_cluster_custom_object(*KAI, "queues", queue)
    except client.ApiException as e:
        if e.status != 409:
            raise
        live = objs.get_cluster_custom_object(*KAI, "queues", name)
        live["spec"]["resources"]["gpu"]["limit"] = gpu_limit
        objs.replace_cluster_custom_object(*KAI, "queues", name, live)


def submit(testbed: LiveCluster, world: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The sample TrainJob (8 GPUs) in the world's queue, its runtime, and the JobSet Trainer would make, as the
    admission policy holds it."""
    objs = client.CustomObjectsApi(testbed.api)
    ns = world["ns"]
    rt = sample("clustertrainingruntime-torch-kai")
    rt["metadata"]["name"] = world["runtime"]  # label-only: the upstream CRD has no podGroupPolicy.kai
    try:
        objs.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", rt)
    except client.ApiException as e:
        if e.status != 409:
            raise
    tj = sample("trainjob-llama-finetune")
    tj["metadata"] = {"name": "llama", "namespace": ns, "labels": {keys.KAI_QUEUE_LABEL: world["queue"]},
                      "annotations": annotations or {}}
    tj["spec"]["runtimeRef"]["name"] = world["runtime"]
    tj = objs.create_namespaced_custom_object(*TRAINER, ns, "trainjobs", tj)
    js = held_by_0_2(sample("jobset-llama-finetune"))
    js["metadata"] = {"name": "llama", "namespace": ns, "labels": {HELD_LABEL: "true"}, "ownerReferences": [{
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "llama",
        "uid": tj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]}
    objs.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", js)
    return tj


def live_trainjob(testbed: LiveCluster, ns: str) -> dict[str, Any]:
    return client.CustomObjectsApi(testbed.api).get_namespaced_custom_object(*TRAINER, ns, "trainjobs", "llama")


def live_jobset(testbed: LiveCluster, ns: str) -> dict[str, Any]:
    return client.CustomObjectsApi(testbed.api).get_namespaced_custom_object(*JOBSET, ns, "jobsets", "llama")


def timed_out(testbed: LiveCluster, fn_url: str, ns: str) -> list[str]:
    """Resync pings until the schedule timeout (1 s here) reports the gang; its ScheduleTimeout messages."""
    def reported() -> list[str]:
        assert send(fn_url, ping()).status == 200
        return [m for r, m in reasons(testbed, ns) if r == "ScheduleTimeout"]
    return wait_for("the resync times the gang out", reported, deadline_s=30)


def as_trainer_follows(testbed: LiveCluster, ns: str, suspend: bool) -> None:
    """What Trainer does when the TrainJob's suspension changes (Trainer does not run on this testbed): its JobSet
    plugin applies ``suspend`` from the TrainJob."""
    client.CustomObjectsApi(testbed.api).patch_namespaced_custom_object(
        *JOBSET, ns, "jobsets", "llama", {"spec": {"suspend": suspend}})


def reasons(testbed: LiveCluster, ns: str) -> list[tuple[str, str]]:
    events = client.CoreV1Api(testbed.api).list_namespaced_event(ns).items
    return [(e.reason, e.message) for e in events if e.reporting_component == keys.MANAGED_BY]


def podgroups(testbed: LiveCluster, ns: str) -> list[dict[str, Any]]:
    return client.CustomObjectsApi(testbed.api).list_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", ns, "podgroups")["items"]


def test_real_queues_refuse_a_gang_over_the_limit_and_a_fixed_queue_lets_it_proceed(testbed, world, function_on):
    fn = function_on()
    ns = world["ns"]
    tj = submit(testbed, world)
    assert send(fn.url, resource(tj)).status == 200
    assert [r for r, _ in reasons(testbed, ns)] == ["QueueNotFound"]

    make_queue(testbed, world["queue"], gpu_limit=4)  # a real Queue, through KAI's CRD
    assert send(fn.url, resource(tj, "update")).status == 200
    over = [m for r, m in reasons(testbed, ns) if r == "GangExceedsQueue"]
    assert len(over) == 1 and f"request gpu 8 GPUs, over the limit 4 GPUs of Queue {world['queue']}" in over[0]
    assert live_jobset(testbed, ns)["metadata"]["labels"][HELD_LABEL] == "true"
    assert live_jobset(testbed, ns)["spec"]["suspend"] is True and podgroups(testbed, ns) == []
    assert live_trainjob(testbed, ns)["spec"].get("suspend") is False

    make_queue(testbed, world["queue"], gpu_limit=8)
    assert send(fn.url, ping()).status == 200  # the resync finds it: its JobSet still held
    live = live_jobset(testbed, ns)
    assert live["spec"]["suspend"] is False and HELD_LABEL not in (live["metadata"].get("labels") or {})
    assert keys.RELEASED_AT_ANNOTATION in live["metadata"]["annotations"]
    (pg,) = podgroups(testbed, ns)
    assert pg["spec"]["queue"] == world["queue"]


def test_a_timed_out_gang_is_suspended_through_a_real_guarded_patch_and_a_resume_starts_a_new_wait(
        testbed, world, function_on):
    fn = function_on(KAI_FN_ON_TIMEOUT="suspend")
    ns = world["ns"]
    make_queue(testbed, world["queue"], gpu_limit=-1)
    tj = submit(testbed, world, {keys.SCHEDULE_TIMEOUT_ANNOTATION: "1"})
    assert send(fn.url, resource(tj)).status == 200
    (message,) = timed_out(testbed, fn.url, ns)  # no pods on nodes here (no scheduler runs): not bound
    assert "suspended again" in message and "KAI says: no reason" in message
    assert live_trainjob(testbed, ns)["spec"]["suspend"] is True  # KAI_FN_ON_TIMEOUT=suspend: the one TrainJob write
    (pg,) = podgroups(testbed, ns)
    assert keys.TIMED_OUT_ANNOTATION in pg["metadata"]["annotations"]
    as_trainer_follows(testbed, ns, suspend=True)
    mark = objects.parse_time(pg["metadata"]["annotations"][keys.TIMED_OUT_ANNOTATION])
    # Marks have whole seconds: a resume within the timeout's own second cannot be told from the wait that ended.
    wait_for("a second past the timeout's mark", lambda: datetime.datetime.now(datetime.UTC) >= mark
             + datetime.timedelta(seconds=1))

    live = live_trainjob(testbed, ns)
    live["spec"]["suspend"] = False  # the user resumes it, and Trainer resumes its JobSet
    objs = client.CustomObjectsApi(testbed.api)
    resumed = objs.replace_namespaced_custom_object(*TRAINER, ns, "trainjobs", "llama", live)
    as_trainer_follows(testbed, ns, suspend=False)
    marks = wait_for("JobSet's controller records the resume (its Suspended condition turns False again)",
                     lambda: (m := state.facts(live_trainjob(testbed, ns), live_jobset(testbed, ns),
                                                podgroups(testbed, ns)[0])).wait_started and m)
    assert marks.wait_started > marks.timed_out, "a new wait, never mistaken for the one that timed out"
    assert send(fn.url, resource(resumed, "update")).status == 200  # and the event costs no write
    assert live_trainjob(testbed, ns)["metadata"]["resourceVersion"] == resumed["metadata"]["resourceVersion"]


def test_the_real_server_refuses_a_merge_patch_naming_an_old_resource_version(testbed, world):
    ns = world["ns"]
    make_queue(testbed, world["queue"], gpu_limit=-1)
    tj = submit(testbed, world)
    objs = client.CustomObjectsApi(testbed.api)
    objs.patch_namespaced_custom_object(*TRAINER, ns, "trainjobs", "llama",
                                        {"metadata": {"annotations": {"example.com/touched": "yes"}}})
    session = CachedServer.from_settings(load(), kubeconfig=str(testbed.kubeconfig)).session()
    stale = copy.deepcopy({"metadata": {"resourceVersion": tj["metadata"]["resourceVersion"],
                                        "annotations": {keys.TIMED_OUT_ANNOTATION: "2026-01-01T00:00:00Z"}},
                           "spec": {"suspend": True}})
    with pytest.raises(Stale, match=f"^TrainJob {ns}/llama$"):
        session.patch_trainjob(ns, "llama", stale)
    assert keys.TIMED_OUT_ANNOTATION not in (live_trainjob(testbed, ns)["metadata"].get("annotations") or {})


def as_the_function(testbed: LiveCluster, tmp_path: Path) -> Path:
    """A kubeconfig holding a token of the function's ServiceAccount, bound to the roles knative/base renders, so
    the real RBAC authorizer judges every call the function makes."""
    roles = [o for o in by_kind(render(BASE), "ClusterRole") + by_kind(render(BASE), "ClusterRoleBinding")
             if o["metadata"]["name"].startswith(FUNCTION) and "source" not in o["metadata"]["name"]]
    manifest = tmp_path / "rbac.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": roles}))
    testbed.kubectl("apply", "-f", str(manifest))
    token = testbed.sa_token(NAMESPACE, FUNCTION)
    admin = testbed.api.configuration
    kubeconfig = tmp_path / "function.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fn",
        "clusters": [{"name": "testbed", "cluster": {"server": admin.host, "certificate-authority": admin.ssl_ca_cert}}],
        "users": [{"name": "fn", "user": {"token": token}}],
        "contexts": [{"name": "fn", "context": {"cluster": "testbed", "user": "fn"}}],
    }))
    return kubeconfig


def test_the_function_service_account_may_make_every_call_of_the_precheck_and_the_timeout(
        testbed, world, function_on, tmp_path):
    fn = function_on(as_the_function(testbed, tmp_path), KAI_FN_ON_TIMEOUT="suspend",
                     KAI_FN_SCHEDULE_TIMEOUT_SECONDS="60")
    ns = world["ns"]
    make_queue(testbed, world["queue"], gpu_limit=-1)
    tj = submit(testbed, world, {keys.SCHEDULE_TIMEOUT_ANNOTATION: "1"})
    assert send(fn.url, resource(tj)).status == 200  # runtime get, queue list, jobset get/patch, podgroup create...
    assert live_jobset(testbed, ns)["spec"]["suspend"] is False
    # trainjob, jobset and podgroup lists, pod list, podgroup mark, guarded trainjob patch, event
    assert len(timed_out(testbed, fn.url, ns)) == 1
    assert live_trainjob(testbed, ns)["spec"]["suspend"] is True
