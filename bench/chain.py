"""``python -m bench chain``: the same bursts of TrainJobs through KAI's podgrouper alone and through kai_fn, on one
chain testbed, in one run.

- **podgrouper** (the anchor): what a user gets by installing KAI alone. TrainJobs submitted plainly in a namespace
  kai_fn does not take (no ``kai-fn.io/enabled``: no admission policy, no events); Trainer makes the JobSet, the
  Jobs make the pods, and KAI's podgrouper makes the PodGroup from them, as KAI does.
- **kai-fn**: the same TrainJobs in an enabled namespace: the admission policy names the gang of each JobSet Trainer
  makes at its create (nothing held), Knative's own adapters deliver the events (with OIDC tokens; the TrainJob's own
  event usually acts, before the JobSet exists), the function with knative/base's settings as they are (runtime and
  Queue caches on) makes the PodGroup; neither the TrainJob nor the JobSet is ever suspended nor written by kai_fn.
  The events reach the function through Knative Serving's queue-proxy, as in a Knative Service's pod.
- **kai-fn-direct**: the same, with the adapters delivering straight to the function (no queue-proxy): the hop's
  cost is kai-fn's time minus this one's, in the same run (kai_fn and its sources restarted between the two).
- **trainjobs-only**: kai-fn with the TrainJob source alone (and the resync's PingSource): the JobSet and PodGroup
  sources stopped, so no second chance and no ``GangBound`` but the resync's. What their deliveries cost the burst
  (not run unless asked); **no-podgroup-source**: the same with the JobSet source running, so only the PodGroup
  source's share is left out; **no-jobset-source**: with the PodGroup source running, so only the JobSet source's.
- **named-only**: the admission policies alone in an enabled namespace, the function and its sources stopped
  (kai_fn.local.chain.admission_only): each JobSet is named at its create and nothing makes a PodGroup, so no pod
  binds; the burst ends once every pod exists. What naming costs Trainer's JobSet create, apart from the function's
  reads and CPU (not run unless asked: ``--paths podgrouper,named-only,kai-fn``).

Both on one runtime (pods on ``kai-scheduler``, 1 GPU each, on a simnodes pool of the benchmark's own, large enough
for the largest burst), bound by the same KAI Scheduler. Bursts of each size run path after path; between bursts
the TrainJobs are deleted and their pods waited out (namespaces are made up front and kept to the end, since a
newly labelled or deleted namespace redeploys the adapter, which loses its backlog). Measured per burst, all from
the API server's audit log (bench/audit.py), pod creation from a pod watch: creation → every pod bound (p50, p95),
writes per TrainJob by component, and the stages in between. Prints Markdown for BENCHMARKS.md; asserts nothing;
each burst is cut off at its deadline.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import platform
import statistics
import subprocess
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from kubernetes import client

from bench import audit
from kai_fn.local.chain import POOL_LABEL, TRAINER, Chain, Testbed, admission_only, kubectl_of, sample
from kai_fn.local.podwatch import PodWatch
from kai_fn.local.realchain import ChainError, chain_cluster, kai_fn_running, submit, trainjob

PATHS = ("podgrouper", "kai-fn", "kai-fn-direct", "trainjobs-only", "no-podgroup-source", "no-jobset-source",
         "named-only")
DEFAULT_PATHS = PATHS[:3]
API_CALLS = "API calls"  # function_work's key for the API calls kai_fn made, not milliseconds
# What runs of kai_fn for each path: the function behind queue-proxy, straight, fed by fewer of its sources (SOURCES),
# or the admission policies alone; the podgrouper's path runs beside any of them. SOURCES: the ApiServerSources each
# fewer-sources path runs, by knative/base's names (a mode of its own; every other mode runs them all).
SOURCES = {"trainjobs-only": ("kai-fn-trainjobs",), "no-podgroup-source": ("kai-fn-trainjobs", "kai-fn-jobsets"),
           "no-jobset-source": ("kai-fn-trainjobs", "kai-fn-podgroups")}
MODES = {"kai-fn": "queue-proxy", "kai-fn-direct": "direct", **{path: path for path in SOURCES},
         "named-only": "admission"}
RUNTIME = "bench-gang"
POOL = "bench"
GPUS_PER_NODE = 8


@dataclass
class Burst:
    path: str
    namespace: str
    jobs: int
    marks: dict[str, audit.Marks] = field(default_factory=dict)
    writes: Counter[tuple[str, str]] = field(default_factory=Counter)
    load: tuple[float, float] = (math.nan, math.nan)  # 1-minute load average before and after
    work: dict[str, list[float]] = field(default_factory=dict)  # kai_fn's log: ms per event, by event and outcome
    cpu: Counter[str] = field(default_factory=Counter)  # CPU seconds in the burst, by process (cpu_seconds)
    wall: float = math.nan

    def latencies(self) -> list[float]:
        return [m.at["last pod bound"] - m.created for m in self.marks.values() if "last pod bound" in m.at]

    def bound(self) -> int:
        return len(self.latencies())

    def stage(self, name: str) -> list[float]:
        return [m.at[name] - m.created for m in self.marks.values() if name in m.at]

    def per_job(self, component: str) -> float:
        return sum(n for (c, _), n in self.writes.items() if c == component) / self.jobs


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] if ordered else math.nan


def runtime() -> dict:
    """samples/chain's ``chain-gang`` (pods on kai-scheduler, in KAI's default queue by its label) on the pool."""
    rt = copy.deepcopy(sample("clustertrainingruntime-chain.yaml"))
    rt["metadata"] = {**rt["metadata"], "name": RUNTIME}
    for rj in rt["spec"]["template"]["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["spec"]["nodeSelector"] = {POOL_LABEL: POOL}
    return rt


def all_bound(watch: PodWatch, names: list[str], pods: int) -> bool:
    groups = watch.by_jobset()
    return all(len(groups.get(n, [])) == pods and all(p.bound_at for p in groups[n]) for n in names)


def all_created(watch: PodWatch, names: list[str], pods: int) -> bool:
    """Every pod exists: where the burst of ``named-only`` ends (nothing makes its PodGroups, so none binds)."""
    groups = watch.by_jobset()
    return all(len(groups.get(n, [])) == pods for n in names)


def function_work(log: Path, offset: int, ns: str) -> dict[str, list[float]]:
    """From the function's JSON log since ``offset``: milliseconds per event it answered for ``ns``, by kind of event,
    type and outcome; and per TrainJob pass made after the answer (``work``), with the time it waited in the queue;
    under ``API_CALLS``, the API calls of each answer and pass."""
    out: dict[str, list[float]] = {}
    if not log.exists():
        return out
    with log.open("rb") as f:
        f.seek(offset)
        for raw in f:
            line = raw.decode(errors="replace")
            if not line.startswith("{"):
                continue
            e = json.loads(line)
            if e.get("msg") in ("event", "work") and e.get("namespace") == ns:
                out.setdefault(API_CALLS, []).append(float(e.get("api_calls", 0)))
            if e.get("msg") == "event" and e.get("namespace") == ns:
                key = f"{e.get('kind')} {e.get('type', '').rsplit('.', 1)[-1]} {e.get('outcome')}"
                out.setdefault(key, []).append(float(e.get("ms", 0)))
            elif e.get("msg") == "work" and e.get("namespace") == ns:
                key = f"TrainJob pass after the answer: {e.get('outcome')}"
                out.setdefault(key, []).append(float(e.get("ms", 0)))
                out.setdefault("TrainJob pass after the answer: waited in the queue", []).append(
                    float(e.get("waited_ms", 0)))
    return out


def chain_processes(state: Path) -> list[tuple[str, psutil.Process]]:
    """The chain's processes, named: the testbed's (the launcher, which runs Trainer and JobSet and starts
    kube-apiserver, etcd and the controller manager; chain.pids: KAI's, kube-scheduler, kwok) and this process's
    children (the function, its queue-proxy, Knative's adapters)."""
    named: list[tuple[str, int]] = []
    if (state / "launcher.pid").exists():
        named += [("launcher (Trainer, JobSet)", int(p)) for p in (state / "launcher.pid").read_text().split()[:1]]
    if (state / "chain.pids").exists():
        named += [(line.split()[0], int(line.split()[1])) for line in (state / "chain.pids").read_text().splitlines()
                  if line.strip()]
    found: list[tuple[str, psutil.Process]] = []
    for name, pid in named:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            found += [(name, root), *((c.name(), c) for c in root.children(recursive=True))]
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            found.append(("kai_fn function" if "kai_fn.function" in " ".join(proc.cmdline()) else proc.name(), proc))
    return found


def cpu_seconds(procs: list[tuple[str, psutil.Process]]) -> Counter[str]:
    """User and system CPU seconds so far, by process name."""
    out: Counter[str] = Counter()
    for name, proc in procs:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            out[name] += t.user + t.system
    return out


def burst(api: client.ApiClient, path: str, ns: str, jobs: int, pods: int, audit_log: Path, fn_log: Path,
          deadline_s: float) -> Burst:
    result = Burst(path, ns, jobs)
    offset, fn_offset = audit_log.stat().st_size, fn_log.stat().st_size if fn_log.exists() else 0
    load = os.getloadavg()[0]
    names = [f"tj-{i:03d}" for i in range(jobs)]
    clock = time.time() - time.monotonic()  # PodWatch times are monotonic; the audit log's are Unix time
    began = time.monotonic()
    done = all_created if MODES.get(path) == "admission" else all_bound
    procs = chain_processes(fn_log.parent)
    cpu = cpu_seconds(procs)
    with PodWatch(api, ns) as watch:
        for name in names:
            submit(api, ns, trainjob(name, RUNTIME, nodes=pods, gpus=1))
        end = time.monotonic() + deadline_s
        while time.monotonic() < end and not done(watch, names, pods):
            time.sleep(0.2)
        result.wall = time.monotonic() - began
        time.sleep(3)  # writes that trail the binding (kwok, KAI's controllers, gang status) land in the log
        created = {p.name: p.first_seen + clock for p in watch.snapshot()}
    result.cpu = cpu_seconds(procs) - cpu
    found = list(audit.writes(audit_log, offset, ns, audit_log.stat().st_size))
    result.marks, result.writes = audit.stages(found, created), audit.by_component(found)
    result.load = (load, os.getloadavg()[0])
    result.work = function_work(fn_log, fn_offset, ns)
    return result


def clear(api: client.ApiClient, ns: str, timeout: float = 300) -> None:
    """Deletes the burst's TrainJobs (their JobSets, Jobs, pods and PodGroups go with them) and waits until the pods
    are gone, so the next burst has the nodes to itself. The namespace stays (see the module docstring)."""
    client.CustomObjectsApi(api).delete_collection_namespaced_custom_object(*TRAINER, ns, "trainjobs")
    core, end = client.CoreV1Api(api), time.monotonic() + timeout
    while time.monotonic() < end and core.list_namespaced_pod(ns, limit=1).items:
        time.sleep(1)


def settle(quiet: float, wait: float) -> None:
    """Until the 1-minute load average is below ``quiet`` or ``wait`` seconds have passed."""
    end = time.monotonic() + wait
    while os.getloadavg()[0] >= quiet and time.monotonic() < end:
        time.sleep(5)


def spread(values: list[float]) -> str:
    """``p50 / p95`` of ``values``, or ``–`` for none."""
    return f"{nearest_rank(values, 50):.2f} / {nearest_rank(values, 95):.2f}" if values else "–"


def stage_cell(b: Burst, name: str) -> str:
    return spread(b.stage(name))


def order(paths: list[str], run: int) -> list[str]:
    """The paths of run ``run`` (from 0): as given in even runs, reversed in odd ones, so that no path always has the
    freshly cleared testbed (the previous burst's garbage collection trails its pods)."""
    return list(paths) if run % 2 == 0 else list(reversed(paths))


def summary(runs: list[dict[tuple[int, str], Burst]]) -> str:
    """Across runs: kai-fn's p95 against the podgrouper's in each run, and the median of those ratios per size."""
    sizes = sorted({size for results in runs for size, _ in results})
    lines = ["| TrainJobs | path | " + " | ".join(f"run {i + 1} p50 / p95 s" for i in range(len(runs)))
             + " | p95 ratio per run | **median p95 ratio** |",
             "|---|---|" + "---|" * (len(runs) + 2)]
    for size in sizes:
        for path in PATHS:
            if not any((size, path) in r for r in runs):
                continue
            cells, ratios = [], []
            for results in runs:
                b, anchor = results.get((size, path)), results.get((size, "podgrouper"))
                if b is None:
                    cells.append("–")
                    continue
                lat = b.latencies()
                cells.append(f"{nearest_rank(lat, 50):.2f} / {nearest_rank(lat, 95):.2f}"
                             + ("" if b.bound() == b.jobs else f" ({b.bound()}/{b.jobs} bound)"))
                if anchor is not None:
                    ratios.append(nearest_rank(lat, 95) / nearest_rank(anchor.latencies(), 95))
            anchor_row = path == "podgrouper"
            lines.append(f"| {size} | {path} | " + " | ".join(cells) + " | "
                         + ("1 (anchor)" if anchor_row else ", ".join(f"{r:.2f}" for r in ratios)) + " | "
                         + ("–" if anchor_row or not ratios else f"**{statistics.median(ratios):.2f}**") + " |")
    return "\n".join(lines)


def bounds(results: dict[tuple[int, str], Burst], sizes: list[int], ran: list[str]) -> list[str]:
    """What bounds each path's p95: when Trainer, JobSet and the Job controller had made a TrainJob's last pod (the
    same code in every path), and KAI's lag from there to its last pod bound. ``with the podgrouper's pods``: the
    p95 ratio this path's lag would give on the podgrouper's pods, i.e. were its pods made no later than there."""
    lines = ["What bounds the p95: a TrainJob's last pod created (p95 s), then its lag to its last pod bound (per "
             "TrainJob, p50 / p95 s):", "",
             "| TrainJobs | path | last pod created p95 s | lag to bound p50 / p95 s | p95 ratio | "
             "with the podgrouper's pods |", "|---|---|---|---|---|---|"]
    for size in sizes:
        anchor = results.get((size, "podgrouper"))
        for path in ran:
            if (b := results.get((size, path))) is None:
                continue
            made = b.stage("pods created")
            lag = [m.at["last pod bound"] - m.at["pods created"] for m in b.marks.values()
                   if "last pod bound" in m.at and "pods created" in m.at]
            if not made or not lag:
                continue
            cells = [f"{nearest_rank(made, 95):.2f}", spread(lag)]
            if anchor is None or path == "podgrouper" or not anchor.latencies():
                cells += ["1 (anchor)" if path == "podgrouper" else "–", "–"]
            else:
                p95 = nearest_rank(anchor.latencies(), 95)
                floor = nearest_rank(anchor.stage("pods created"), 95) + nearest_rank(lag, 95)
                cells += [f"{nearest_rank(b.latencies(), 95) / p95:.2f}", f"{floor / p95:.2f}"]
            lines.append(f"| {size} | {path} | " + " | ".join(cells) + " |")
    return lines


def report(results: dict[tuple[int, str], Burst], args: argparse.Namespace, elapsed: float, commit: str,
           run: str = "one run") -> str:
    sizes = sorted({size for size, _ in results})
    ran = [p for p in PATHS if any((s, p) in results for s in sizes)]  # the tables' columns: the paths that ran
    lines = [
        f"Command: `python -m bench chain --sizes {','.join(map(str, sizes))} --pods {args.pods}` ({elapsed:.0f} s, "
        f"{run}), code at {commit}. Machine: {platform.machine()}, {psutil.cpu_count()} CPUs, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}; "
        "the 1-minute load average before and after each burst is in the table.", "",
        f"Each burst: N TrainJobs created back to back, each {args.pods} pods × 1 GPU, on {args.nodes} simulated nodes "
        f"of {GPUS_PER_NODE} GPUs; KAI Scheduler v0.17.0 binds them. Time: the TrainJob's create → its last pod bound "
        "(`pods/binding`), both by the API server's clock (audit log).", "",
        "| TrainJobs | path | bound | p50 s | p95 s | max s | p95 ratio to the podgrouper | writes / TrainJob "
        "| load before → after |",
        "|---|---|---|---|---|---|---|---|---|"]
    for size in sizes:
        anchor = results.get((size, "podgrouper"))
        for path in PATHS:
            b = results.get((size, path))
            if b is None:
                continue
            lat = b.latencies()
            ratio = nearest_rank(lat, 95) / nearest_rank(anchor.latencies(), 95) if anchor else math.nan
            lines.append(f"| {size} | {path} | {b.bound()}/{b.jobs} | {nearest_rank(lat, 50):.2f} | "
                         f"{nearest_rank(lat, 95):.2f} | {max(lat, default=math.nan):.2f} | "
                         f"{'1 (anchor)' if path == 'podgrouper' else f'**{ratio:.2f}**' if lat else '– (none bound)'} | "
                         f"{sum(b.writes.values()) / b.jobs:.1f} | {b.load[0]:.1f} → {b.load[1]:.1f} |")
    for size in sizes:
        via, direct = results.get((size, "kai-fn")), results.get((size, "kai-fn-direct"))
        if via and direct:
            lines.append("")
            p50 = nearest_rank(via.latencies(), 50) - nearest_rank(direct.latencies(), 50)
            lines.append(f"queue-proxy's hop ({size} TrainJobs): p50 {p50:+.2f} s, "
                         f"p95 {nearest_rank(via.latencies(), 95) - nearest_rank(direct.latencies(), 95):+.2f} s "
                         "(kai-fn through queue-proxy minus kai-fn-direct)")
    lines += ["", "Target: kai-fn's p95 ≤ 1.0 × the podgrouper's at each size, in the median of three runs.", "",
              "Where the time goes: seconds after the TrainJob's create, p50 / p95 (audit log; pods created: a pod "
              "watch, the last pod of the TrainJob). Released and resumed are kai_fn's path only.", "",
              "| stage | " + " | ".join(f"{p} ({s})" for s in sizes for p in ran) + " |",
              "|---" * (1 + len(sizes) * len(ran)) + "|"]
    for stage in audit.STAGES:
        lines.append(f"| {stage} | " + " | ".join(stage_cell(results[(s, p)], stage) if (s, p) in results else "–"
                                                 for s in sizes for p in ran) + " |")
    lines += ["", *bounds(results, sizes, ran)]
    lines += ["", "PodGroup written before the TrainJob's first pod was created (issue 37's target: 95 %):", ""]
    for size in sizes:
        for path in ran:
            if (b := results.get((size, path))) is None:
                continue
            both = [m for m in b.marks.values() if "PodGroup written" in m.at and "first pod created" in m.at]
            before = sum(1 for m in both if m.at["PodGroup written"] < m.at["first pod created"])
            share = f"{100 * before / len(both):.0f} %" if both else "–"
            lines.append(f"- {path} ({size}): {before} of {len(both)} ({share})")
    lines += ["", "API writes per TrainJob by component (audit log: successful writes in the burst's namespace):", "",
              "| component | " + " | ".join(f"{p} ({s})" for s in sizes for p in ran) + " |",
              "|---" * (1 + len(sizes) * len(ran)) + "|"]
    comps = sorted({c for b in results.values() for c, _ in b.writes})
    for comp in comps:
        lines.append(f"| {comp} | " + " | ".join(f"{results[(s, p)].per_job(comp):.2f}" if (s, p) in results else "–"
                                                 for s in sizes for p in ran) + " |")
    lines += ["", "kai_fn's answers in its path (its JSON log; ms from request to answer):", "",
              "| TrainJobs | event, outcome | count | ms p50 | ms p95 | ms total |", "|---|---|---|---|---|---|"]
    for size in sizes:
        b = results.get((size, "kai-fn"))
        for key, ms in sorted((b.work if b else {}).items()):
            if key == API_CALLS:
                continue
            lines.append(f"| {size} | {key} | {len(ms)} | {nearest_rank(ms, 50):.0f} | {nearest_rank(ms, 95):.0f} | "
                         f"{sum(ms):.0f} |")
    for size in sizes:
        if (b := results.get((size, "kai-fn"))) and b.work.get(API_CALLS):
            lines += ["", f"kai_fn's API calls ({size} TrainJobs; its log's `api_calls`, every answer and pass): "
                      f"{sum(b.work[API_CALLS]):.0f}, {sum(b.work[API_CALLS]) / b.jobs:.1f} per TrainJob"]
    lines += ["", "CPU seconds (user + system) each process spent during the burst, from the first create to 3 s after the "
              "last binding (psutil; the machine has 2 cores and is shared):", "",
              "| process | " + " | ".join(f"{p} ({s})" for s in sizes for p in ran) + " |",
              "|---" * (1 + len(sizes) * len(ran)) + "|"]
    for proc in sorted({n for b in results.values() for n in b.cpu}):
        lines.append(f"| {proc} | " + " | ".join(f"{results[(s, p)].cpu[proc]:.1f}" if (s, p) in results else "–"
                                                 for s in sizes for p in ran) + " |")
    lines += ["", "<details><summary>writes by component, verb and resource (totals)</summary>", "",
              "| component | write | " + " | ".join(f"{p} ({s})" for s in sizes for p in ran) + " |",
              "|---|---" + "|---" * (len(sizes) * len(ran)) + "|"]
    for key in sorted({k for b in results.values() for k in b.writes}):
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(
            str(results[(s, p)].writes[key]) if (s, p) in results else "–" for s in sizes for p in ran) + " |")
    lines += ["", "</details>"]
    return "\n".join(lines)


def commit_of() -> str:
    repo = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True,
                           text=True).stdout
    return head.strip() + (" (with uncommitted changes)" if dirty.strip() else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench chain", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="20,100", help="TrainJobs per burst, comma-separated (default 20,100)")
    p.add_argument("--paths", default=",".join(DEFAULT_PATHS),
                   help=f"which paths, in the order they run (default {','.join(DEFAULT_PATHS)}; also "
                        "trainjobs-only, no-podgroup-source, no-jobset-source, named-only)")
    p.add_argument("--pods", type=int, default=2, help="pods (nodes) per TrainJob, 1 GPU each")
    p.add_argument("--deadline", type=float, default=0, help="seconds a burst may take (default 60 + 2 per TrainJob)")
    p.add_argument("--quiet-load", type=float, default=1.5,
                   help="before each burst, wait for a 1-minute load average below this (default 1.5) ...")
    p.add_argument("--quiet-wait", type=float, default=90, help="... for at most this many seconds (default 90)")
    p.add_argument("--runs", type=int, default=1,
                   help="repeat the sweep this many times, the paths' order reversed every other run (default 1)")
    p.add_argument("--out", type=Path, help="also write the Markdown here")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    paths = [s for s in args.paths.split(",") if s]
    args.nodes = math.ceil(max(sizes) * args.pods / GPUS_PER_NODE) + 1
    state = Path(os.environ.get("KAI_FN_TESTBED_DIR") or Path(os.environ.get("KAI_FN_CACHE") or
                 Path.home() / ".cache" / "kai-fn") / "testbed-bench")
    audit_log = state / "audit.log"
    env = {"KAI_FN_TESTBED_DIR": str(state), "KAI_FN_TESTBED_AUDIT_LOG": str(audit_log)}
    began, commit = time.monotonic(), commit_of()  # the function runs the code as it was when it started
    runs: list[dict[tuple[int, str], Burst]] = [{} for _ in range(args.runs)]
    walls: list[float] = []
    try:
        with chain_cluster("4x8", env) as cluster:
            if not audit_log.exists():
                raise ChainError(f"no audit log at {audit_log}: a testbed started without it is running there; "
                                 "./run.sh cluster down first")
            switch, bed = ExitStack(), Testbed(cluster.kubeconfig, cluster.api, kubectl_of(cluster.kubeconfig))
            mode = next((MODES[p] for p in paths if MODES.get(p) not in (None, "admission")), "queue-proxy")

            def kai_fn(mode: str) -> contextlib.AbstractContextManager[Chain]:
                return kai_fn_running(cluster, ping_seconds=60, production=True, queue_proxy=mode != "direct",
                                      sources=SOURCES.get(mode))

            chain = switch.enter_context(kai_fn(mode))
            with switch:
                objs = client.CustomObjectsApi(bed.api)
                objs.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime())
                bed.nodes(f"{args.nodes}x{GPUS_PER_NODE}", POOL)
                spaces = {(run, size, path): chain.namespace(f"bench-{path}-{size}-r{run + 1}",
                                                             enabled=path != "podgrouper")
                          for run in range(args.runs) for size in sizes for path in paths}
                try:
                    for run, results in enumerate(runs):
                        run_began = time.monotonic()
                        for size in sizes:
                            for path in order(paths, run):
                                if MODES.get(path, mode) != mode:
                                    mode = MODES[path]
                                    print(f"bench chain: kai_fn restarted: {mode}", flush=True)
                                    switch.close()
                                    switch.enter_context(admission_only(cluster.kubeconfig) if mode == "admission"
                                                         else kai_fn(mode))
                                settle(args.quiet_load, args.quiet_wait)
                                ns = spaces[(run, size, path)]
                                print(f"bench chain: run {run + 1}: {path}: {size} TrainJobs in {ns} "
                                      f"(load {os.getloadavg()[0]:.1f})", flush=True)
                                b = burst(bed.api, path, ns, size, args.pods, audit_log, cluster.state / "function.log",
                                          args.deadline or 60 + 2 * size)
                                results[(size, path)] = b
                                print(f"bench chain: run {run + 1}: {path}: {b.bound()}/{size} bound, p95 "
                                      f"{nearest_rank(b.latencies(), 95):.2f} s; JobSet created p50 "
                                      f"{nearest_rank(b.stage('JobSet created'), 50):.2f} s", flush=True)
                                clear(bed.api, ns)
                        walls.append(time.monotonic() - run_began)
                finally:
                    for ns in spaces.values():
                        client.CoreV1Api(bed.api).delete_namespace(ns)
                    objs.delete_cluster_custom_object(*TRAINER, "clustertrainingruntimes", RUNTIME)
                    bed.delete_nodes(POOL)
    except ChainError as error:
        print(f"bench chain: {error}")
        return 1
    done = [(i, r) for i, r in enumerate(runs) if r]
    parts = [report(r, args, walls[i], commit, f"run {i + 1} of {args.runs}, paths in the order "
                    f"{', '.join(order(paths, i))}") for i, r in done]
    if len(done) > 1:
        parts.insert(0, f"{len(done)} runs ({time.monotonic() - began:.0f} s), code at {commit}:\n\n"
                     + summary([r for _, r in done]))
    md = "\n\n".join(parts)
    print(md)
    if args.out:
        args.out.write_text(md + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
