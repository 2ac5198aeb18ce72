"""``./run.sh demo --real``: the demo's story on the real chain (testbed/, built the first time).

Trainer and JobSet (in the launcher), kube-controller-manager's Job controller, kube-scheduler with Coscheduling,
kwok's simulated GPU nodes, and kai_fn with its event source. A TrainJob asking for 4 nodes × 8 GPUs is submitted
plainly on a pool of 3 such nodes: its 4 pods exist and none is bound. A fourth node is added: all 4 bind at once.
Everything this started is stopped at the end (the testbed only if this started it).
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable

from kubernetes import client

from kai_fn.local.podwatch import PodSeen, PodWatch
from kai_fn.local.chain import Chain
from kai_fn.local.realchain import ChainError, Cluster, chain_cluster, kai_fn_running
from kai_fn.commands.tables import table

POOL = "demo-gpu"
JOB = "llama-pretrain"
NODES, GPUS = 4, 8


def say(step: str) -> None:
    print(f"==> {step}", flush=True)


class LiveTable:
    """Redraws the pods table in place on a terminal (once a second); elsewhere prints it when it changes."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.drawn = 0
        self.last = ""

    def show(self, pods: list[PodSeen], started: float) -> None:
        rows = [(p.name, p.node, "bound" if p.node else "waiting") for p in pods]
        text = table(rows, ("POD", "NODE", "STATE")) if rows else "  (no pods yet)"
        bound = sum(1 for p in pods if p.node)
        text += f"\n  {bound}/{len(pods)} bound, {time.monotonic() - started:4.0f} s"
        if self.tty:
            sys.stdout.write(f"\x1b[{self.drawn}F\x1b[J" if self.drawn else "")
            sys.stdout.write(text + "\n")
            self.drawn = text.count("\n") + 1
        elif text.split("\n  ")[0] != self.last.split("\n  ")[0]:
            print(text)
        self.last = text
        sys.stdout.flush()

    def done(self) -> None:
        self.drawn = 0


def watch_until(pods: PodWatch, until: Callable[[list[PodSeen]], bool], deadline_s: float) -> list[PodSeen]:
    live, started = LiveTable(), time.monotonic()
    end = started + deadline_s
    while True:
        seen = [p for p in pods.snapshot() if p.jobset == JOB]
        live.show(seen, started)
        if until(seen) or time.monotonic() > end:
            live.done()
            return seen
        time.sleep(1)


def run() -> int:
    began = time.monotonic()
    try:
        say("starting the chain: ./run.sh cluster up --chain (builds the first time; progress below)")
        with chain_cluster("3x8") as cluster:
            say(f"chain ready ({'started' if cluster.started else 'reused'}); kubeconfig {cluster.kubeconfig}")
            return _story(cluster, began)
    except ChainError as error:
        print(f"demo --real: FAILED: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # one line, never a traceback: the logs are in the state directory
        first = (str(error).splitlines() or [type(error).__name__])[0]
        print(f"demo --real: FAILED: {type(error).__name__}: {first}", file=sys.stderr)
        return 1


def _story(cluster: Cluster, began: float) -> int:
    core = client.CoreV1Api(cluster.api)
    # A testbed started here has just its 3 nodes; on a reused one the demo keeps to nodes of its own.
    pool = None if cluster.started else POOL
    ns = None
    say("starting kai_fn: the function (its ServiceAccount's token), its event sources, the admission policy")
    with kai_fn_running(cluster) as chain:
        try:
            if pool:
                say(f"reused testbed: a pool of 3 simulated GPU nodes of the demo's own ({pool}-0..2, 8 GPUs each)")
                chain.nodes("3x8", pool)
            ns = chain.namespace("demo-real")
            chain.runtime(ns, pool=pool)
            with PodWatch(cluster.api, ns) as pods:
                say(f"submitting TrainJob {ns}/{JOB} plainly: {NODES} nodes x {GPUS} GPUs, on 3 nodes")
                chain.trainjob(ns, JOB, num_nodes=NODES)
                _show(chain, core, ns, pods, pool)
        finally:
            say("stopping what the demo started")
            if ns:
                core.delete_namespace(ns)
            if pool:
                chain.delete_nodes(pool)
    if cluster.started:
        say("stopping the testbed: ./run.sh cluster down")
    say(f"done in {time.monotonic() - began:.0f} s")
    return 0


def _show(chain: Chain, core: client.CoreV1Api, ns: str, pods: PodWatch, pool: str | None) -> None:
    """3 nodes: the 4 pods wait whole; a 4th node: they bind at once."""
    seen = watch_until(pods, lambda s: len(s) == NODES and _tried(core, ns, s), 60)
    if len(seen) != NODES:
        raise ChainError(f"{len(seen)} of {NODES} pods were made within 60 s")
    groups = {p.group for p in seen}
    if any(p.node for p in seen):
        raise ChainError("a pod was bound on 3 nodes: the gang did not hold")
    say(f"all or nothing: {NODES} pods exist, all in PodGroup {groups.pop()}, none bound (needs 32 GPUs, 24 free)")
    say(f"adding a 4th node ({pool or 'gpu-node'}-3): simnodes 4x8")
    added = time.monotonic()
    chain.nodes("4x8", pool or "gpu-node")
    seen = watch_until(pods, lambda s: all(p.node for p in s), 60)
    if not all(p.node for p in seen):
        raise ChainError("the gang did not bind within 60 s of the 4th node")
    times = [p.bound_at for p in seen if p.bound_at]
    say(f"the gang bound: all {NODES} pods within {max(times) - min(times):.1f} s of each other, "
        f"{max(times) - added:.1f} s after the node was added")


def _tried(core: client.CoreV1Api, ns: str, seen: list[PodSeen]) -> bool:
    """The scheduler has looked at every pod: bound, or PodScheduled=False."""
    tried = 0
    for pod in core.list_namespaced_pod(ns, label_selector=f"jobset.sigs.k8s.io/jobset-name={JOB}").items:
        conds = {c.type: c.status for c in (pod.status.conditions or [])}
        tried += pod.spec.node_name is not None or conds.get("PodScheduled") == "False"
    return tried >= NODES
