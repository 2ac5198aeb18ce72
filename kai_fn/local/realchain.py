"""What ``demo --real``, the chain benchmark and the fault scenarios share on the chain testbed: starting and
stopping it, the two runtimes compared (Trainer's own coscheduling gang, and kai_fn's), TrainJobs as users write
them, and kai_fn running against it (the function with its ServiceAccount's token, plus an event source).

The function and its source come from ``kai_fn.local.chain`` when that module provides ``running``; until then
a small stand-in here does the same: the knative/base RBAC and admission policy applied, the function served by
functions-framework with its ServiceAccount's token, and a TrainJob watcher posting the ApiServerSource's events.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from cloudevents.conversion import to_binary
from cloudevents.http import CloudEvent

from kai_fn.local.invoke import Sample, post
from kai_fn.local.process import REPO, FunctionProcess

TRAINER = ("trainer.kubeflow.org", "v1alpha1")
GANG_SCHEDULER = "scheduler-plugins-scheduler"
ANCHOR_RUNTIME, KAI_FN_RUNTIME = "bench-anchor-coscheduling", "bench-kai-fn"
ENABLED = {"kai-fn.io/enabled": "true"}
POOL_LABEL = "kai-fn.testbed/pool"
FUNCTION_NS, FUNCTION_SA = "kai-fn", "kai-fn"


class ChainError(RuntimeError):
    """A step of the chain failed; the message is one line for the user."""


@dataclass
class Cluster:
    kubeconfig: Path
    state: Path
    api: client.ApiClient
    started: bool

    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        binary = dict(line.split("=", 1) for line in (self.state / "bin.env").read_text().split())["kubectl"]
        return subprocess.run([binary, "--kubeconfig", str(self.kubeconfig), *args], input=stdin,
                              capture_output=True, text=True, check=check)

    def launcher_pid(self) -> int:
        return int((self.state / "launcher.pid").read_text())


def _run_sh(*args: str, env: dict[str, str], quiet: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / "run.sh"), *args], cwd=REPO, text=True, env={**os.environ, **env},
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL if quiet else None)


@contextmanager
def chain_cluster(nodes: str = "3x8", env: dict[str, str] | None = None, quiet: bool = False) -> Iterator[Cluster]:
    """``./run.sh cluster up --chain`` (build progress shown unless quiet), stopped at the end only if started
    here. ``env`` goes to run.sh (KAI_FN_TESTBED_DIR, KAI_FN_TESTBED_AUDIT_LOG, …)."""
    env = {"KAI_FN_TESTBED_NODES": nodes, **(env or {})}
    reused = _run_sh("cluster", "status", env=env, quiet=True).returncode == 0
    up = _run_sh("cluster", "up", "--chain", env=env, quiet=quiet)
    if up.returncode != 0:
        raise ChainError("./run.sh cluster up --chain failed (the lines above name the component and its log)")
    kubeconfig = Path(up.stdout.strip().splitlines()[-1])
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield Cluster(kubeconfig, kubeconfig.parent, api, started=not reused)
    finally:
        api.close()
        if not reused:
            _run_sh("cluster", "down", env=env, quiet=True)


def add_nodes(cluster: Cluster, spec: str, pool: str | None = None) -> None:
    """simnodes makes sure the nodes of ``spec`` exist (``4x8`` after ``3x8`` adds the fourth); ``pool`` names
    another set (``<pool>-0…``, labelled ``kai-fn.testbed/pool=<pool>``)."""
    bin_env = dict(line.split("=", 1) for line in (cluster.state / "bin.env").read_text().split())
    simnodes = bin_env.get("simnodes") or (str(Path(bin_env["kwok"]).parent / "simnodes") if "kwok" in bin_env else
                                           _build_dir(REPO / "testbed" / "kwok" / "build.sh") + "/simnodes")
    done = subprocess.run([simnodes, "--kubeconfig", str(cluster.kubeconfig), *(["--prefix", f"{pool}-"] if pool else []),
                           spec], capture_output=True, text=True)
    if done.returncode != 0:
        raise ChainError(f"simnodes {spec} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")


def _build_dir(script: Path) -> str:
    done = subprocess.run([str(script)], capture_output=True, text=True)
    if done.returncode != 0:
        raise ChainError(f"{script.relative_to(REPO)} failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout.strip().splitlines()[-1]


def runtime(name: str, anchor: bool, gpus: int = 1, pool: str | None = None) -> dict[str, Any]:
    """A torch runtime whose pods the gang scheduler places. The anchor's gang is Trainer's own (podGroupPolicy
    coscheduling: Trainer writes the PodGroup and the pod label); kai_fn's asks for a gang by its queue label."""
    labels = {"trainer.kubeflow.org/framework": "torch"}
    spec: dict[str, Any] = {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}}}
    if anchor:
        spec["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 60}}
    else:
        labels["kai.scheduler/queue"] = "default-queue"
    container = {"name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                 "command": ["torchrun", "/workspace/train.py"],
                 "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)},
                               "limits": {"nvidia.com/gpu": str(gpus)}}}
    spec["template"] = {"spec": {"replicatedJobs": [{"name": "node", "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
        "spec": {"template": {"spec": {"schedulerName": GANG_SCHEDULER, "containers": [container],
                                       **({"nodeSelector": {POOL_LABEL: pool}} if pool else {})}}}}}]}}
    return {"apiVersion": "/".join(TRAINER), "kind": "ClusterTrainingRuntime",
            "metadata": {"name": name, "labels": labels}, "spec": spec}


def ensure_runtimes(cluster: Cluster, *extra: dict[str, Any]) -> None:
    objs = client.CustomObjectsApi(cluster.api)
    for body in (runtime(ANCHOR_RUNTIME, True), runtime(KAI_FN_RUNTIME, False), *extra):
        _ignore_conflict(lambda: objs.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", body))


def namespace(cluster: Cluster, prefix: str, enabled: bool) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    client.CoreV1Api(cluster.api).create_namespace(client.V1Namespace(
        metadata=client.V1ObjectMeta(name=name, labels=ENABLED if enabled else None)))
    return name


def trainjob(name: str, runtime_name: str, nodes: int, gpus: int) -> dict[str, Any]:
    """As a user writes it: no suspend."""
    return {"apiVersion": "/".join(TRAINER), "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": runtime_name},
                     "trainer": {"numNodes": nodes, "resourcesPerNode": {
                         "requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}}}


def submit(cluster: Cluster, ns: str, body: dict[str, Any], attempts: int = 60) -> dict[str, Any]:
    """Create, retrying while the API server is away (the restart scenario) or the admission chain warms up."""
    objs = client.CustomObjectsApi(cluster.api)
    for _ in range(attempts):
        try:
            return objs.create_namespaced_custom_object(*TRAINER, ns, "trainjobs", body, _request_timeout=10)
        except ApiException as e:
            if e.status == 409:
                return objs.get_namespaced_custom_object(*TRAINER, ns, "trainjobs", body["metadata"]["name"])
            if e.status not in (500, 503, 504, 429):
                raise ChainError(f"creating TrainJob {ns}/{body['metadata']['name']}: {e.status} {e.reason}") from None
        except Exception:  # connection refused while the API server restarts
            pass
        time.sleep(0.5)
    raise ChainError(f"creating TrainJob {ns}/{body['metadata']['name']}: the API server never answered")


def _ignore_conflict(create) -> None:
    try:
        create()
    except ApiException as e:
        if e.status != 409:
            raise


# --- kai_fn on the chain -----------------------------------------------------------------------------------------

def _apply_base(cluster: Cluster) -> None:
    """knative/overlays/scheduler-plugins, as far as a cluster without Knative holds it: the function's Namespace,
    ServiceAccount, ClusterRoles and bindings, and the admission policy."""
    rendered = cluster.kubectl("kustomize", str(REPO / "knative" / "overlays" / "scheduler-plugins")).stdout
    kinds = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "MutatingAdmissionPolicy",
             "MutatingAdmissionPolicyBinding"}
    keep = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] in kinds]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=kai-fn-chain", "-f", "-",
                    stdin=yaml.safe_dump_all(keep))


def _function_kubeconfig(cluster: Cluster, directory: Path) -> Path:
    core = client.CoreV1Api(cluster.api)
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[],
                                                                                 expiration_seconds=7200))
    token = core.create_namespaced_service_account_token(FUNCTION_SA, FUNCTION_NS, request).status.token
    admin = cluster.api.configuration
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "kai-fn",
                  "clusters": [{"name": "chain", "cluster": {"server": admin.host,
                                                             "certificate-authority": admin.ssl_ca_cert}}],
                  "users": [{"name": "kai-fn", "user": {"token": token}}],
                  "contexts": [{"name": "kai-fn", "context": {"cluster": "chain", "user": "kai-fn"}}]}
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    return path


def _wait_policy(cluster: Cluster, ns: str, deadline_s: float = 120) -> None:
    """The API server loads admission policies asynchronously: a dry-run create says when it acts."""
    objs = client.CustomObjectsApi(cluster.api)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            made = objs.create_namespaced_custom_object(*TRAINER, ns, "trainjobs",
                                                        trainjob("policy-probe", KAI_FN_RUNTIME, 1, 1), dry_run="All")
            if (made["metadata"].get("annotations") or {}).get("kai-fn/auto-suspended") == "true":
                return
        except ApiException as e:
            if e.status != 503:
                raise
        time.sleep(0.5)
    raise ChainError("the admission policy never took effect")


def adapter_event(obj: dict[str, Any], action: str) -> Sample:
    """A resource-mode event as the ApiServerSource adapter sends it (FACTS §4), in binary mode."""
    meta = obj["metadata"]
    api_version = obj.get("apiVersion", "/".join(TRAINER))
    event = CloudEvent({"id": str(uuid.uuid4()), "type": f"dev.knative.apiserver.resource.{action}",
                        "source": "https://10.96.0.1:443",
                        "subject": f"/apis/{api_version}/namespaces/{meta['namespace']}/trainjobs/{meta['name']}",
                        "kind": obj.get("kind", "TrainJob"), "apiversion": api_version, "name": meta["name"],
                        "namespace": meta["namespace"]}, obj)
    headers, body = to_binary(event)
    go_case = {"-".join(part.capitalize() for part in k.split("-")): v for k, v in dict(headers).items()}
    return Sample(event["type"], "", go_case, body if isinstance(body, bytes) else body.encode())


class _Source:
    """Stand-in for the ApiServerSource adapter: watches TrainJobs in the namespaces and posts each add/update
    as a resource-mode CloudEvent (FACTS §4), retrying a refused delivery as a direct sink is retried."""

    def __init__(self, cluster: Cluster, namespaces: list[str], url: str) -> None:
        self.cluster, self.namespaces, self.url = cluster, namespaces, url
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._watch, args=(ns,), daemon=True) for ns in namespaces]

    def __enter__(self) -> _Source:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=10)

    def _watch(self, ns: str) -> None:
        objs = client.CustomObjectsApi(self.cluster.api)
        while not self.stop_event.is_set():
            try:
                for event in watch.Watch().stream(objs.list_namespaced_custom_object, *TRAINER, ns, "trainjobs",
                                                  timeout_seconds=5, _request_timeout=10):
                    action = {"ADDED": "add", "MODIFIED": "update", "DELETED": "delete"}.get(event["type"])
                    if action:
                        for _ in range(10):
                            try:
                                if post(self.url, adapter_event(event["object"], action)).status < 500:
                                    break
                            except OSError:
                                pass
                            time.sleep(0.5)
                    if self.stop_event.is_set():
                        return
            except Exception:
                self.stop_event.wait(0.5)


@contextmanager
def kai_fn_running(cluster: Cluster, namespaces: list[str], log: Path | None = None) -> Iterator[FunctionProcess]:
    """kai_fn serving the chain (scheduler-plugins flavor) with its source, stopped at the end."""
    try:
        from kai_fn.local import chain as upstream_chain  # part A's orchestration, when it exists
        running = getattr(upstream_chain, "running", None)
    except ImportError:
        running = None
    if running is not None:
        with running(cluster, namespaces, log=log) as fn:
            yield fn
        return
    _apply_base(cluster)
    if namespaces:
        _wait_policy(cluster, namespaces[0])
    with tempfile.TemporaryDirectory() as tmp:
        env = {"KUBECONFIG": str(_function_kubeconfig(cluster, Path(tmp))), "KAI_PODGROUP_FLAVOR": "scheduler-plugins",
               "KAI_FN_RUNTIME_CACHE_SECONDS": "0"}
        logf = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        try:
            with FunctionProcess(env, log=logf) as fn, _Source(cluster, namespaces, fn.url):
                yield fn
        finally:
            if log:
                logf.close()
