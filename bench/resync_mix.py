"""The TrainJobs ``python -m bench resync`` measures against, made through kai_fn as a cluster comes to hold them.

A realistic mix for a cluster some time after kai_fn went in, one pod × 1 GPU each (small pods: the resync reads
TrainJobs, PodGroups and pods, not GPUs): 80 % ran and completed (kwok completes their pod 2 s after it runs), 15 %
are running, 5 % were released but wait for nodes that do not exist (KAI says why; the resync's sweep looks at each
such gang every run). The namespaces are labelled ``kai-fn.bench=resync``; a later run reuses them when they already
hold enough TrainJobs (``--keep`` leaves them).
"""
from __future__ import annotations

import copy
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from kai_fn.core import keys
from kai_fn.local.chain import ENABLED, POOL_LABEL, RUNTIMES, SCHEDULERS, TRAINER, Chain, Testbed, for_scheduler, sample
from kai_fn.local.realchain import submit, trainjob

BENCH_LABEL = {"kai-fn.bench": "resync"}
JOBSET = ("jobset.x-k8s.io", "v1alpha2")
PODGROUP = ("scheduling.run.ai", "v2alpha2")
POOL, NOWHERE = "bresync", "bresync-none"  # nodes of the pool; a pool no node is in
COMPLETE_AFTER = "kai-fn.testbed/complete-after"


@dataclass(frozen=True)
class Mix:
    done: int
    running: int
    waiting: int

    @classmethod
    def of(cls, total: int) -> Mix:
        running, waiting = round(total * 0.15), round(total * 0.05)
        return cls(total - running - waiting, running, waiting)

    @property
    def total(self) -> int:
        return self.done + self.running + self.waiting

    def kinds(self) -> list[str]:
        """Oldest first: what ran long ago has completed; what came last runs or waits."""
        return ["done"] * self.done + ["running"] * self.running + ["waiting"] * self.waiting

    def text(self) -> str:
        return (f"{self.total} TrainJobs: {self.done} ran and completed, {self.running} running, {self.waiting} "
                "released and waiting for nodes (never bound)")


def runtime(ns: str, kind: str) -> dict[str, Any]:
    """The chain's runtime in namespace ``ns``, its pods on KAI: on the pool (completing after 2 s for ``done``), or
    on no node at all (``waiting``)."""
    rt = copy.deepcopy(for_scheduler(sample(RUNTIMES[0]), SCHEDULERS["kai"]))
    rt["kind"], rt["metadata"] = "TrainingRuntime", {**rt["metadata"], "name": kind, "namespace": ns}
    pod = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["nodeSelector"] = {POOL_LABEL: NOWHERE if kind == "waiting" else POOL}
    if kind == "done":
        pod.setdefault("metadata", {}).setdefault("annotations", {})[COMPLETE_AFTER] = "2s"
    return rt


def bench_namespaces(chain: Chain) -> list[str]:
    label = ",".join(f"{k}={v}" for k, v in BENCH_LABEL.items())
    return sorted(n.metadata.name for n in client.CoreV1Api(chain.api).list_namespace(label_selector=label).items
                  if n.status.phase == "Active")


def trainjobs(chain: Chain, namespaces: list[str]) -> list[dict[str, Any]]:
    objs = client.CustomObjectsApi(chain.api)
    return [tj for ns in namespaces for tj in objs.list_namespaced_custom_object(*TRAINER, ns, "trainjobs")["items"]]


def populate(chain: Chain, bed: Testbed, mix: Mix, n_namespaces: int, ping: Callable[[], object]) -> list[str]:
    """The mix, in waves of 100 each waited for (released), with a resync ping every 30 s meanwhile; returns the
    namespaces. Reuses those of an earlier run that already hold the mix."""
    found = bench_namespaces(chain)
    core, objs = client.CoreV1Api(chain.api), client.CustomObjectsApi(chain.api)
    if found and len(made := trainjobs(chain, found)) >= mix.total:
        for tj in made:  # an earlier run's backlog
            if tj["metadata"]["name"].startswith("held-"):
                objs.delete_namespaced_custom_object(*TRAINER, tj["metadata"]["namespace"], "trainjobs",
                                                     tj["metadata"]["name"])
        return found
    for ns in found:
        core.delete_namespace(ns)
    bed.nodes(f"{math.ceil((mix.running + 40) / 8)}x8", POOL)
    namespaces = []
    for i in range(n_namespaces):
        ns = f"bresync-{i:02d}"
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
            name=ns, labels={**ENABLED, **BENCH_LABEL})))
        namespaces.append(ns)
        for kind in ("done", "running", "waiting"):
            objs.create_namespaced_custom_object(*TRAINER, ns, "trainingruntimes", runtime(ns, kind))
    for source in chain.sources:
        if hasattr(source, "wait_watching"):
            for ns in namespaces:
                source.wait_watching(ns, timeout=300)
    kinds, last_ping = mix.kinds(), time.monotonic()
    for start in range(0, len(kinds), 100):
        wave = [(namespaces[i % n_namespaces], f"{kind}-{i:04d}", kind) for i, kind in enumerate(kinds)
                if start <= i < start + 100]
        for ns, name, kind in wave:
            submit(chain.api, ns, trainjob(name, kind, nodes=1, gpus=1, kind="TrainingRuntime"))
        end = time.monotonic() + 600
        while time.monotonic() < end and not _released(objs, wave):
            if time.monotonic() - last_ping > 30:
                ping()
                last_ping = time.monotonic()
            time.sleep(2)
        print(f"bench resync: {start + len(wave)} of {len(kinds)} TrainJobs made", flush=True)
    end = time.monotonic() + 900
    while not _settled(chain, namespaces, mix) and time.monotonic() < end:  # what is left goes in the census
        ping()
        time.sleep(30)
    return namespaces


def _released(objs: client.CustomObjectsApi, wave: list[tuple[str, str, str]]) -> bool:
    """Every TrainJob of the wave has its JobSet decided by kai_fn (its gang named on the JobSet)."""
    for ns, name, _ in wave:
        try:
            js = objs.get_namespaced_custom_object(*JOBSET, ns, "jobsets", name)
        except client.ApiException as error:
            if error.status == 404:  # Trainer has not made it yet
                return False
            raise
        if keys.MARKER_PODGROUP not in (js["metadata"].get("annotations") or {}):
            return False
    return True


def _settled(chain: Chain, namespaces: list[str], mix: Mix) -> bool:
    seen = census(chain, namespaces)
    return seen.get("completed", 0) >= mix.done and seen.get("bound, running", 0) >= mix.running


def census(chain: Chain, namespaces: list[str] | None = None) -> dict[str, int]:
    """The TrainJobs by state, as kai_fn, Trainer and KAI left them: a named JobSet with no PodGroup of kai_fn's is
    owed its gang ("held"), the bound mark is on the gang's PodGroup."""
    objs, out = client.CustomObjectsApi(chain.api), Counter[str]()
    for ns in namespaces or bench_namespaces(chain):
        jobsets = {j["metadata"]["name"]: j for j in objs.list_namespaced_custom_object(*JOBSET, ns, "jobsets")["items"]}
        podgroups = objs.list_namespaced_custom_object(*PODGROUP, ns, "podgroups")["items"]
        bound = {r["name"] for pg in podgroups if keys.GANG_BOUND_ANNOTATION in (pg["metadata"].get("annotations") or {})
                 for r in pg["metadata"].get("ownerReferences") or [] if r.get("kind") == "TrainJob"}
        ganged = {(pg["metadata"].get("labels") or {}).get(keys.TRAINJOB_NAME_LABEL) for pg in podgroups}
        for tj in objs.list_namespaced_custom_object(*TRAINER, ns, "trainjobs")["items"]:
            name, js = tj["metadata"]["name"], jobsets.get(tj["metadata"]["name"])
            done = any(c.get("type") == "Complete" and c.get("status") == "True"
                       for c in (tj.get("status") or {}).get("conditions") or [])
            if done:
                out["completed"] += 1
            elif js is None:
                out["no JobSet yet"] += 1
            elif name not in ganged:
                out["held (owed its gang)"] += 1
            elif name in bound:
                out["bound, running"] += 1
            else:
                out["released, not bound"] += 1
    return dict(out)


def held(chain: Chain, namespaces: list[str]) -> int:
    """JobSets the admission policy named whose gang kai_fn has not made (no PodGroup of kai_fn's for its TrainJob)."""
    objs = client.CustomObjectsApi(chain.api)
    owed = 0
    for ns in namespaces:
        ganged = {(pg["metadata"].get("labels") or {}).get(keys.TRAINJOB_NAME_LABEL)
                  for pg in objs.list_namespaced_custom_object(*PODGROUP, ns, "podgroups")["items"]}
        named = objs.list_namespaced_custom_object(*JOBSET, ns, "jobsets", label_selector=f"{keys.NAMED_LABEL}=true")
        owed += sum(1 for js in named["items"] if js["metadata"]["name"] not in ganged)
    return owed


def submit_held(chain: Chain, namespaces: list[str], count: int, timeout: float = 900) -> float:
    """``count`` TrainJobs made while no event reaches kai_fn (the caller has the TrainJob and JobSet sources down),
    then waited for until Trainer has made each one's JobSet, named and owed its gang; returns the seconds that took."""
    began = time.monotonic()
    for i in range(count):
        submit(chain.api, namespaces[i % len(namespaces)],
               trainjob(f"held-{int(time.time())}-{i:04d}", "done", nodes=1, gpus=1, kind="TrainingRuntime"))
    end = time.monotonic() + timeout
    while held(chain, namespaces) < count and time.monotonic() < end:
        time.sleep(2)
    return time.monotonic() - began
