"""``python -m bench chain``: the same burst of TrainJobs through the anchor and through kai_fn, on one chain testbed.

- **anchor**: Trainer's own in-tree gang path (runtime ``podGroupPolicy.coscheduling``): Trainer writes the
  scheduler-plugins PodGroup and labels the pods; no kai_fn. (KAI's own pod-grouper cannot be built here: the KAI
  module is not served, see testbed/scheduler/README.md.)
- **kai_fn**: a runtime that asks for a gang by its queue label; the admission policy suspends each TrainJob, the
  source posts its events, kai_fn writes the PodGroup (scheduler-plugins flavor), patches the JobSet, releases it.

Both gangs are bound by the same kube-scheduler with Coscheduling, on kwok's simulated GPU nodes. Measured per
path: time from each TrainJob's create call to the moment every one of its pods is seen bound (p50, p95), and the
API writes per TrainJob by component, counted from the API server's audit log (Metadata level, write verbs) in the
path's own namespace. Prints a Markdown section for BENCHMARKS.md; asserts nothing about time.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psutil
from kubernetes import client

from kai_fn.local.podwatch import PodWatch
from kai_fn.local.realchain import (
    ANCHOR_RUNTIME, KAI_FN_RUNTIME, ChainError, Cluster, chain_cluster, ensure_anchor_runtime, kai_fn_running,
    submit, trainjob,
)
from kai_fn.commands.tables import table


@dataclass
class PathResult:
    name: str
    namespace: str
    latencies: list[float]
    unbound: int
    writes: Counter[tuple[str, str]]
    jobs: int
    stages: dict[str, list[float]]

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        if not ordered:
            return float("nan")
        return nearest_rank(ordered, q)


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] if ordered else float("nan")


def component(event: dict) -> str:
    """Who wrote: the function by its ServiceAccount; everyone else by userAgent. The launcher runs Trainer and
    JobSet in one process with one client, so its writes are split by what they write: TrainJobs, PodGroups, ConfigMaps and
    JobSet specs are Trainer's; Jobs, Services, JobSet status and the rest JobSet's."""
    user = event["user"]["username"]
    agent = event.get("userAgent", "")
    ref = event.get("objectRef") or {}
    if user.startswith("system:serviceaccount:kai-fn:"):
        return "kai-fn (its ServiceAccount)"
    if agent.startswith("launcher/"):
        resource, sub = ref.get("resource"), ref.get("subresource")
        if resource in ("trainjobs", "podgroups", "configmaps") or (resource == "jobsets" and sub != "status"):
            return "trainer (launcher)"
        return "jobset (launcher)"
    if agent.startswith("kube-controller-manager/"):
        return "kube-controller-manager " + agent.rsplit("/", 1)[-1]
    if agent.startswith(("OpenAPI-Generator", "python")):
        return "bench client (submits)"
    return agent.split("/", 1)[0] or user


def count_writes(audit: Path, offset: int, ns: str) -> Counter[tuple[str, str]]:
    """Successful writes in namespace ns since offset, by (component, resource[/subresource] verb)."""
    out: Counter[tuple[str, str]] = Counter()
    with audit.open() as f:
        f.seek(offset)
        for line in f:
            e = json.loads(line)
            ref = e.get("objectRef") or {}
            if e.get("stage") != "ResponseComplete" or ref.get("namespace") != ns:
                continue
            if not 200 <= (e.get("responseStatus") or {}).get("code", 0) < 300:
                continue
            what = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            out[(component(e), f"{e['verb']} {what}")] += 1
    return out


def _ts(e: dict) -> float:
    return datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")).timestamp()


def stages(audit: Path, offset: int, ns: str) -> dict[str, list[float]]:
    """Per TrainJob, seconds from its create (as the API server saw it) to: its PodGroup written (by Trainer or
    kai_fn), its release by kai_fn, its first and its last pod bound. From the audit log alone."""
    created: dict[str, float] = {}
    marks: dict[str, dict[str, float]] = {}
    with audit.open() as f:
        f.seek(offset)
        for line in f:
            e = json.loads(line)
            ref = e.get("objectRef") or {}
            if e.get("stage") != "ResponseComplete" or ref.get("namespace") != ns or \
                    not 200 <= (e.get("responseStatus") or {}).get("code", 0) < 300:
                continue
            res, name, verb = ref.get("resource"), ref.get("name") or "", e["verb"]
            if res == "trainjobs" and verb == "create" and not ref.get("subresource"):
                created[name] = _ts(e)
                continue
            if res == "podgroups" and not ref.get("subresource") and verb in ("create", "patch") and \
                    component(e) in ("kai-fn (its ServiceAccount)", "trainer (launcher)"):
                key, job = "PodGroup written", name
            elif res == "trainjobs" and verb == "patch" and component(e).startswith("kai-fn"):
                key, job = "TrainJob released (kai_fn)", name
            elif res == "pods" and ref.get("subresource") == "binding":
                job = name.split("-node-")[0]
                mark = marks.setdefault(job, {})
                mark["first pod bound"] = min(mark.get("first pod bound", 1e18), _ts(e))
                key = "last pod bound"
            else:
                continue
            first = key in ("PodGroup written", "TrainJob released (kai_fn)")
            mark = marks.setdefault(job, {})
            mark[key] = min(mark.get(key, 1e18), _ts(e)) if first else max(mark.get(key, 0), _ts(e))
    out: dict[str, list[float]] = {"PodGroup written": [], "TrainJob released (kai_fn)": [], "first pod bound": [],
                                   "last pod bound": []}
    for job, t0 in created.items():
        for key, t in marks.get(job, {}).items():
            out[key].append(t - t0)
    return out


def function_work(log: Path, ns: str) -> dict[str, list[float]]:
    """From the function's JSON log: milliseconds per event it handled for ns, by kind of event and outcome."""
    out: dict[str, list[float]] = {}
    if not log.exists():
        return out
    for line in log.read_text().splitlines():
        if not line.startswith("{"):
            continue
        e = json.loads(line)
        if e.get("msg") == "event" and e.get("namespace") == ns:
            key = f"{e.get('kind')} {e.get('type', '').rsplit('.', 1)[-1]} {e.get('outcome')}"
            out.setdefault(key, []).append(float(e.get("ms", 0)))
    return out


def burst(cluster: Cluster, name: str, ns: str, runtime: str, jobs: int, nodes: int, audit: Path,
          deadline_s: float) -> PathResult:
    offset = audit.stat().st_size
    created: dict[str, float] = {}
    with PodWatch(cluster.api, ns) as pods:
        for i in range(jobs):
            job = f"{name}-{i:02d}"
            created[job] = time.monotonic()
            submit(cluster.api, ns, trainjob(job, runtime, nodes=nodes, gpus=1))
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            groups = pods.by_jobset()
            if all(len(groups.get(j, [])) == nodes and all(p.bound_at for p in groups[j]) for j in created):
                break
            time.sleep(0.5)
        groups = pods.by_jobset()
    latencies, unbound = [], 0
    for job, t0 in created.items():
        seen = groups.get(job, [])
        if len(seen) == nodes and all(p.bound_at for p in seen):
            latencies.append(max(p.bound_at for p in seen) - t0)  # type: ignore[type-var]
        else:
            unbound += 1
    time.sleep(2)  # status writes that trail the binding (kwok, controllers) land in the audit log
    return PathResult(name, ns, latencies, unbound, count_writes(audit, offset, ns), jobs,
                      stages(audit, offset, ns))


def cleanup(cluster: Cluster, ns: str) -> None:
    """Delete the namespace and wait for its pods to go, so the next path has the nodes to itself."""
    core = client.CoreV1Api(cluster.api)
    core.delete_namespace(ns)
    end = time.monotonic() + 120
    while time.monotonic() < end and core.list_namespaced_pod(ns).items:
        time.sleep(1)


def report(results: list[PathResult], args: argparse.Namespace, elapsed: float) -> str:
    anchor, kai = results
    lines = ["## Chain: the same TrainJobs through Trainer's coscheduling gang (anchor) and through kai_fn", "",
             f"Command: `python -m bench chain --jobs {args.jobs} --pods {args.pods} --nodes {args.nodes}` "
             f"({elapsed:.0f} s). Machine: {platform.machine()}, {psutil.cpu_count()} CPUs, "
             f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}, "
             f"load average {os.getloadavg()[0]:.1f} at the end (shared).", "",
             f"Each path: {args.jobs} TrainJobs created back to back, each {args.pods} pods × 1 GPU, on "
             f"{args.nodes} kwok GPU nodes, one kube-scheduler with Coscheduling. Time: TrainJob create call → every "
             "pod of it seen bound (pod watch).", "",
             "| path | TrainJobs bound | p50 s | p95 s | max s | API writes / TrainJob |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.name} | {len(r.latencies)}/{r.jobs} | {r.pct(50):.2f} | {r.pct(95):.2f} | "
                     f"{max(r.latencies, default=float('nan')):.2f} | {sum(r.writes.values()) / r.jobs:.1f} |")
    ratio = kai.pct(95) / anchor.pct(95) if anchor.latencies else float("nan")
    lines += ["", f"**kai_fn p95 / anchor p95 = {ratio:.2f}** (target ≤ 1.2).", "",
              "Where the time goes (audit log timestamps, seconds after the TrainJob's create; p50 / p95):", "",
              "| stage | anchor | kai_fn |", "|---|---|---|"]
    for key in anchor.stages:
        cells = [f"{nearest_rank(r.stages[key], 50):.2f} / {nearest_rank(r.stages[key], 95):.2f}" for r in results]
        lines.append(f"| {key} | {cells[0]} | {cells[1]} |")
    lines += ["",
              "API writes per TrainJob by component (audit log, successful write verbs in the path's namespace):", "",
              "| component | anchor | kai_fn |", "|---|---|---|"]
    kai_work = function_work(args.state / "function.log", kai.namespace)
    by = [Counter() for _ in results]
    for i, r in enumerate(results):
        for (comp, _), n in r.writes.items():
            by[i][comp] += n
    for comp in sorted(set(by[0]) | set(by[1])):
        lines.append(f"| {comp} | {by[0][comp] / anchor.jobs:.2f} | {by[1][comp] / kai.jobs:.2f} |")
    lines += ["", "kai_fn's own work per event in the kai_fn path (its JSON log; events are delivered one at a time by "
              "each source, as the ApiServerSource adapter's informer hands them over):", "",
              "| event, outcome | count | ms p50 | ms p95 | ms total |", "|---|---|---|---|---|"]
    for key, ms in sorted(kai_work.items()):
        lines.append(f"| {key} | {len(ms)} | {nearest_rank(ms, 50):.0f} | {nearest_rank(ms, 95):.0f} | {sum(ms):.0f} |")
    lines += ["", "<details><summary>writes by component, verb and resource (totals)</summary>", "",
              "| component | write | anchor | kai_fn |", "|---|---|---|---|"]
    for key in sorted(set(anchor.writes) | set(kai.writes)):
        lines.append(f"| {key[0]} | {key[1]} | {anchor.writes[key]} | {kai.writes[key]} |")
    lines += ["", "</details>"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench chain", description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=20)
    p.add_argument("--pods", type=int, default=2, help="pods (nodes) per TrainJob, 1 GPU each")
    p.add_argument("--nodes", default="6x8", help="simulated GPU nodes (KAI_FN_TESTBED_NODES)")
    p.add_argument("--deadline", type=float, default=180, help="seconds a path may take before it is cut off")
    p.add_argument("--out", type=Path, help="also write the Markdown section here")
    args = p.parse_args(argv)
    state = Path(os.environ.get("KAI_FN_TESTBED_DIR") or Path(os.environ.get("KAI_FN_CACHE") or
                 Path.home() / ".cache" / "kai-fn") / "testbed-bench")
    audit = state / "audit.log"
    env = {"KAI_FN_TESTBED_DIR": str(state), "KAI_FN_TESTBED_AUDIT_LOG": str(audit)}
    args.state = state
    began = time.monotonic()
    try:
        with chain_cluster(args.nodes, env) as cluster:
            if not audit.exists():
                raise ChainError(f"no audit log at {audit}: a testbed started without it is running there; "
                                 "./run.sh cluster down first")
            ensure_anchor_runtime(cluster)
            results = []
            with kai_fn_running(cluster) as chain:
                anchor_ns = chain.namespace("bench-anchor", enabled=False)
                kai_ns = chain.namespace("bench-kai-fn")
                for name, ns, rt in (("anchor", anchor_ns, ANCHOR_RUNTIME), ("kai-fn", kai_ns, KAI_FN_RUNTIME)):
                    print(f"bench chain: {name}: {args.jobs} TrainJobs in {ns}", flush=True)
                    results.append(burst(cluster, name, ns, rt, args.jobs, args.pods, audit, args.deadline))
                    cleanup(cluster, ns)
    except ChainError as error:
        print(f"bench chain: {error}")
        return 1
    rows = [(r.name, f"{len(r.latencies)}/{r.jobs}", f"{r.pct(50):.2f}", f"{r.pct(95):.2f}",
             f"{sum(r.writes.values()) / r.jobs:.1f}") for r in results]
    print(table(rows, ("path", "bound", "p50 s", "p95 s", "writes/TrainJob")))
    md = report(results, args, time.monotonic() - began)
    print(md)
    if args.out:
        args.out.write_text(md + "\n")
    return 0 if all(not r.unbound for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
