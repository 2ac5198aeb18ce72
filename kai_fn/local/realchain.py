"""What ``demo --real``, the chain benchmarks and the fault scenarios share on the chain testbed, around
:mod:`kai_fn.local.chain` (kai_fn running on it): starting and stopping the testbed outside pytest, and TrainJobs as
users write them, submitted through an API server that may be restarting.
"""
from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from kai_fn.local import k8s
from kai_fn.local.chain import QUEUE_PROXY, Chain, running
from kai_fn.local.process import REPO

TRAINER = ("trainer.kubeflow.org", "v1alpha1")


class ChainError(RuntimeError):
    """A step of the chain failed; the message is one line for the user."""


@dataclass
class ChainHandle:
    """A handle on the chain testbed outside pytest, as :func:`chain_cluster` brought it up: its kubeconfig, its
    state directory and a client; ``started``: by us, so we stop it. Not :class:`kai_fn.local.chain.Testbed`, the
    admin's tools on a testbed, which :func:`kai_fn_running` makes from it."""

    kubeconfig: Path
    state: Path
    api: client.ApiClient
    started: bool


def _run_sh(*args: str, env: dict[str, str], quiet: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / "run.sh"), *args], cwd=REPO, text=True, env={**os.environ, **env},
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL if quiet else None)


@contextmanager
def chain_cluster(nodes: str = "3x8", env: dict[str, str] | None = None, quiet: bool = False) -> Iterator[ChainHandle]:
    """``./run.sh cluster up --chain --without-kai-fn`` (build progress shown unless quiet; kai_fn is started by
    :func:`kai_fn_running`), stopped at the end only if started here. ``env`` goes to run.sh (KAI_FN_TESTBED_DIR,
    KAI_FN_TESTBED_AUDIT_LOG, …)."""
    env = {"KAI_FN_TESTBED_NODES": nodes, **(env or {})}
    reused = _run_sh("cluster", "status", env=env, quiet=True).returncode == 0
    up = _run_sh("cluster", "up", "--chain", "--without-kai-fn", env=env, quiet=quiet)
    if up.returncode != 0:
        raise ChainError("./run.sh cluster up --chain --without-kai-fn failed (the lines above say why)")
    kubeconfig = Path(up.stdout.strip().splitlines()[-1])
    api = k8s.new_client(str(kubeconfig))
    try:
        yield ChainHandle(kubeconfig, kubeconfig.parent, api, started=not reused)
    finally:
        k8s.close(api)
        if not reused:
            _run_sh("cluster", "down", env=env, quiet=True)


def trainjob(name: str, runtime_name: str, nodes: int, gpus: int, kind: str = "ClusterTrainingRuntime"
             ) -> dict[str, Any]:
    """As a user writes it: no suspend; ``gpus`` per node (resourcesPerNode) over the runtime's 8."""
    return {"apiVersion": "/".join(TRAINER), "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": runtime_name, "kind": kind, "apiGroup": TRAINER[0]},
                     "trainer": {"numNodes": nodes, "resourcesPerNode": {
                         "requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}}}


def submit(api: client.ApiClient, ns: str, body: dict[str, Any], attempts: int = 60) -> dict[str, Any]:
    """Create, retrying while the API server is away (the restart scenario) or the admission chain warms up."""
    objs = client.CustomObjectsApi(api)
    for _ in range(attempts):
        try:
            return k8s.obj(objs.create_namespaced_custom_object(*TRAINER, ns, "trainjobs", body, _request_timeout=10))
        except ApiException as e:
            if e.status == 409:
                return k8s.obj(objs.get_namespaced_custom_object(*TRAINER, ns, "trainjobs", body["metadata"]["name"]))
            if e.status not in (500, 503, 504, 429):
                raise ChainError(f"creating TrainJob {ns}/{body['metadata']['name']}: {e.status} {e.reason}") from None
        except (HTTPError, OSError):  # connection refused or reset while the API server restarts
            pass
        time.sleep(0.5)
    raise ChainError(f"creating TrainJob {ns}/{body['metadata']['name']}: the API server never answered")


@contextmanager
def kai_fn_running(cluster: ChainHandle, log_dir: Path | None = None, ping_seconds: float = 10.0,
                   production: bool = False, queue_proxy: bool | None = None,
                   sources: Collection[str] | None = None) -> Iterator[Chain]:
    """kai_fn on the chain (kai_fn.local.chain.running): function, sources, admission policy; stopped at the end.
    ``production``: the Service's settings as they are (see :func:`running`); ``queue_proxy`` and ``sources``: as
    there (None: their defaults)."""
    with running(cluster.kubeconfig, ping_seconds=ping_seconds, log_dir=log_dir, production=production,
                 queue_proxy=QUEUE_PROXY if queue_proxy is None else queue_proxy, sources=sources) as chain:
        yield chain
