"""``./run.sh demo --real``: the demo's story on the real chain (testbed/, built the first time), on KAI Scheduler.

Trainer and JobSet (in the launcher), kube-controller-manager's Job controller, KAI Scheduler v0.17.0, kwok's
simulated GPU nodes, and kai_fn in the kai flavor with its event sources. A TrainJob asking for 4 nodes x 8 GPUs is
submitted plainly on a pool of 3 such nodes: its 4 pods exist and none is bound, and the live table says why in KAI's
words (its PodGroup's ``status.schedulingConditions``, read as kai_fn reads them). A fourth node is added: all 4 bind
at once. It closes with ``python -m kai_fn status`` for the demo's namespace. Everything this started is stopped at
the end (the testbed only if this started it).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_fn.commands.tables import table
from kai_fn.core import gang, keys
from kai_fn.local import k8s
from kai_fn.local.chain import PODGROUP_APIS, Chain
from kai_fn.local.podwatch import PodSeen, PodWatch
from kai_fn.local.realchain import ChainError, ChainHandle, chain_cluster, kai_fn_running

POOL = "demo-gpu"
JOB = "llama-pretrain"
NODES, GPUS = 4, 8
WIDTH = 110


def say(step: str) -> None:
    print(f"==> {step}", flush=True)


class LiveTable:
    """Redraws the pods table, and KAI's words while a pod waits, in place on a terminal (once a second); elsewhere
    prints them when they change."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.drawn = 0
        self.last = ""

    def show(self, pods: list[PodSeen], kai: str, started: float) -> None:
        rows = [(p.name, p.node, "bound" if p.node else "waiting") for p in pods]
        body = table(rows, ("POD", "NODE", "STATE")) if rows else "  (no pods yet)"
        if kai and not all(p.node for p in pods):
            body += "\n" + textwrap.fill(f"KAI says: {kai}", WIDTH, initial_indent="  ", subsequent_indent="    ")
        bound = sum(1 for p in pods if p.node)
        text = f"{body}\n  {bound}/{len(pods)} bound, {time.monotonic() - started:4.0f} s"
        if self.tty:
            sys.stdout.write(f"\x1b[{self.drawn}F\x1b[J" if self.drawn else "")
            sys.stdout.write(text + "\n")
            self.drawn = text.count("\n") + 1
        elif body != self.last:
            print(text)
        self.last = body
        sys.stdout.flush()


def watch_until(pods: PodWatch, kai: Callable[[list[PodSeen]], str], until: Callable[[list[PodSeen], str], bool],
                deadline_s: float) -> tuple[list[PodSeen], str]:
    """The live table until ``until(pods, KAI's words)`` or the deadline; what was last seen."""
    live, started = LiveTable(), time.monotonic()
    end = started + deadline_s
    while True:
        seen = [p for p in pods.snapshot() if p.jobset == JOB]
        says = kai(seen)
        live.show(seen, says, started)
        if until(seen, says) or time.monotonic() > end:
            return seen, says
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


def _story(cluster: ChainHandle, began: float) -> int:
    core = client.CoreV1Api(cluster.api)
    # A testbed started here has just its 3 nodes; on a reused one the demo keeps to nodes of its own.
    pool = None if cluster.started else POOL
    ns = None
    say("starting kai_fn (kai flavor): the function (its ServiceAccount's token), its event sources, the admission "
        "policy")
    with kai_fn_running(cluster) as chain:
        try:
            if pool:
                say(f"reused testbed: a pool of 3 simulated GPU nodes of the demo's own ({pool}-0..2, 8 GPUs each)")
                chain.nodes("3x8", pool)
            ns = chain.namespace("demo-real")
            chain.runtime(ns, pool=pool)
            with PodWatch(cluster.api, ns) as pods:
                say(f"submitting TrainJob {ns}/{JOB} plainly: {NODES} nodes x {GPUS} GPUs on 3 nodes, "
                    "schedulerName kai-scheduler")
                chain.trainjob(ns, JOB, num_nodes=NODES)
                _show(chain, core, ns, pods, pool)
            _told(cluster, ns)
            _status(cluster, ns)
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
    """3 nodes: the 4 pods wait whole, and KAI says why; a 4th node: they bind at once."""
    kai = _kai_says(chain, ns)
    seen, says = watch_until(pods, kai, lambda s, k: len(s) == NODES and bool(k) and _tried(core, ns), 60)
    if len(seen) != NODES:
        raise ChainError(f"{len(seen)} of {NODES} pods were made within 60 s")
    if any(p.node for p in seen):
        raise ChainError("a pod was bound on 3 nodes: the gang did not hold")
    if not says:
        raise ChainError("KAI gave no reason on the PodGroup within 60 s (kai-scheduler.log in the state dir)")
    groups = {p.group for p in seen}
    if len(groups) != 1 or None in groups:
        raise ChainError(f"the 4 pods do not name one PodGroup: {sorted(map(str, groups))}")
    say(f"all or nothing: {NODES} pods exist, all in KAI PodGroup {groups.pop()}, none bound "
        "(needs 32 GPUs, 24 free)")
    say(f"adding a 4th node ({pool or 'gpu-node'}-3): simnodes 4x8")
    added = time.monotonic()
    chain.nodes("4x8", pool or "gpu-node")
    seen, _ = watch_until(pods, kai, lambda s, _: all(p.node for p in s), 60)
    if not all(p.node for p in seen):
        raise ChainError("the gang did not bind within 60 s of the 4th node")
    times = [p.bound_at for p in seen if p.bound_at]
    say(f"KAI bound the gang: all {NODES} pods within {max(times) - min(times):.1f} s of each other, "
        f"{max(times) - added:.1f} s after the node was added")


def _kai_says(chain: Chain, ns: str) -> Callable[[list[PodSeen]], str]:
    """KAI's reasons on the PodGroup the pods name, as kai_fn reads them (the text of its GangUnschedulable Event)."""
    objs = client.CustomObjectsApi(chain.api)

    def says(seen: list[PodSeen]) -> str:
        group = next((p.group for p in seen if p.group), None)
        if group is None or all(p.node for p in seen):
            return ""
        try:
            podgroup = k8s.obj(objs.get_namespaced_custom_object(*PODGROUP_APIS["kai"], ns, "podgroups", group))
        except ApiException:
            return ""
        return gang.describe(gang.unschedulable(podgroup))

    return says


def _tried(core: client.CoreV1Api, ns: str) -> bool:
    """The scheduler has looked at every pod: bound, or PodScheduled=False."""
    tried = 0
    for pod in core.list_namespaced_pod(ns, label_selector=f"jobset.sigs.k8s.io/jobset-name={JOB}").items:
        conds = {c.type: c.status for c in (k8s.pod_status(pod).conditions or [])}
        tried += k8s.pod_spec(pod).node_name is not None or conds.get("PodScheduled") == "False"
    return tried >= NODES


def _told(cluster: ChainHandle, ns: str) -> None:
    """The Events kai_fn posted on the TrainJob, in the story's order, once it marked the gang bound."""
    _wait_bound_marked(cluster, ns)
    story = ("GangCreated", "GangUnschedulable", "GangBound")
    events = client.CoreV1Api(cluster.api).list_namespaced_event(ns, field_selector=f"involvedObject.name={JOB}").items
    told = sorted((e for e in events if e.involved_object.kind == "TrainJob" and e.reason in story),
                  key=lambda e: (e.first_timestamp or e.event_time, story.index(e.reason)))
    counts = {str(e.reason): sum(x.reason == e.reason for x in told) for e in told}  # a reason of the story
    say(f"kai_fn told the TrainJob (kubectl describe trainjob -n {ns} {JOB}): "
        + ", ".join(reason + (f" (x{n})" if n > 1 else "") for reason, n in counts.items()))


def _status(cluster: ChainHandle, ns: str) -> None:
    """What an operator runs next: ``python -m kai_fn status`` for the demo's namespace, as run here."""
    command = ["python", "-m", "kai_fn", "status", "-n", ns, "--kubeconfig", str(cluster.kubeconfig)]
    say("every TrainJob kai_fn looks after, one line each: " + " ".join(command))
    done = subprocess.run([sys.executable, *command[1:]], capture_output=True, text=True, timeout=60)
    print(textwrap.indent((done.stdout + done.stderr).rstrip(), "  "), flush=True)
    if done.returncode != 0:
        raise ChainError(f"python -m kai_fn status exited {done.returncode}")


def _wait_bound_marked(cluster: ChainHandle, ns: str, deadline_s: float = 30) -> None:
    """kai_fn marks the gang's PodGroup ``kai-fn/bound`` after its GangBound Event, on the PodGroup's next change or
    the next resync (every 10 s here); bounded, since ``status`` reads the pods meanwhile and needs no mark."""
    objs, end = client.CustomObjectsApi(cluster.api), time.monotonic() + deadline_s
    while time.monotonic() < end:
        groups = k8s.items(objs.list_namespaced_custom_object(*PODGROUP_APIS["kai"], ns, "podgroups"))
        if any(keys.GANG_BOUND_ANNOTATION in (g["metadata"].get("annotations") or {}) for g in groups):
            return
        time.sleep(0.5)
