"""``python -m bench``: throughput, latency, API calls, overhead, cold start, import time and memory of kai_fn.

Order of work (about two minutes on 2 cores):
  1. the kmock emulator in this process, seeded with the sample runtimes and queues;
  2. the real function server (FunctionProcess, KAI_FN_THREADS=16, default settings, so a 30 s runtime cache), warmed up;
  3. per client concurrency 1, 4, 16: (a) new TrainJobs, the bare API write mix, (c) stale duplicates, the bare
     API read mix, (b) marked duplicates, (d) out-of-scope events; memory is sampled during the concurrency-16 runs;
  4. cold starts, kai_fn and a bare function alternating; import times, alternating.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from bench import cloudevent, workload
from bench.load import LoadResult, drive
from bench.memory import RssSampler
from bench.startup import BARE, cold_starts, import_times
from kai_fn.core import keys
from kai_fn.core.models import Runtime, TrainJob, parse
from kai_fn.core.plan import plan
from kai_fn.core.reasons import GANG_CREATED
from kai_fn.kube.events import event_body
from kai_fn.local.emulator import Emulator
from kai_fn.local.process import REPO, FunctionProcess

CONCURRENCY = (1, 4, 16)
SERVER_THREADS = 16
SCENARIOS = {
    "new": ("(a) new in-scope TrainJob", "done"),
    "dup_marked": ("(b) duplicate, marker carried", "skipped"),
    "dup_stale": ("(c) duplicate, stale copy", "skipped"),
    "out_of_scope": ("(d) out of scope", "ignored"),
}
TARGETS = {"new_calls": 5, "dup_marked_calls": 0, "dup_stale_calls": 2, "overhead": 0.8, "cold": 1.5,
           "import": 1.5, "rss_mb": 120.0}
RUNTIME_RESOURCES = ("clustertrainingruntimes", "trainingruntimes", "queues")  # cached for KAI_FN_RUNTIME_CACHE_SECONDS
API_TIMEOUT = 5.0  # kai_fn's default KAI_FN_API_TIMEOUT_SECONDS, used by the bare client too


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "platform": platform.platform(), "loadavg_start": [round(x, 2) for x in os.getloadavg()]}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.api = Emulator().start()
        workload.seed_cluster(self.api)
        self.kai_runtime = parse(Runtime, self.api.get(keys.TRAINER_API, keys.CLUSTER_TRAINING_RUNTIME, None,
                                                       workload.KAI_RUNTIME))
        # Each event reconciled before its answer: these figures are the cost of one event's work (the chain
        # benchmark measures knative/base's KAI_FN_BACKGROUND_WORKERS, which answers first).
        self.env = {"KUBECONFIG": self.api.kubeconfig, "KAI_FN_BACKGROUND_WORKERS": "0"}
        self.tmp = Path(tempfile.mkdtemp(prefix="kai-fn-bench-"))
        self.fn: FunctionProcess | None = None
        self.serial = 0
        self.cap: dict[str, int] = {}

    def close(self) -> None:
        if self.fn is not None:
            self.fn.stop()
        self.api.stop()

    def prefix(self, what: str) -> str:
        self.serial += 1
        return f"{what}-{self.serial}"

    # -- events --------------------------------------------------------------------------------------

    def new_events(self, count: int) -> tuple[list[cloudevent.Post], list[dict[str, Any]]]:
        jobs = workload.seed_new(self.api, self.prefix("new"), count)
        return [cloudevent.resource(j) for j in jobs], jobs

    @staticmethod
    def cycle(objects: list[dict[str, Any]], count: int, action: str) -> list[cloudevent.Post]:
        return [cloudevent.resource(objects[i % len(objects)], action) for i in range(count)]

    def out_of_scope_events(self, count: int) -> list[cloudevent.Post]:
        prefix = self.prefix("oos")
        return [cloudevent.resource(workload.trainjob(f"{prefix}-{i:05d}", in_scope=False)) for i in range(count)]

    # -- the function server -------------------------------------------------------------------------

    def start_function(self) -> None:
        self.fn = FunctionProcess(self.env, threads=SERVER_THREADS).start()

    def server_cpu(self) -> float:
        """CPU seconds (user + system) used so far by the function server, one process."""
        assert self.fn is not None and self.fn.proc is not None
        t = psutil.Process(self.fn.proc.pid).cpu_times()
        return float(t.user + t.system)

    def prewarm(self) -> None:
        """Refresh both runtime cache entries and the Queues (a 30 s TTL) right before a measured run, then clear
        the call log."""
        assert self.fn is not None
        warm, _ = self.new_events(1)
        drive(self.fn.url, warm + self.out_of_scope_events(1), 1, 10)
        self.api.reset_calls()

    def measure(self, requests: list[cloudevent.Post], concurrency: int) -> tuple[LoadResult, dict[str, Any]]:
        assert self.fn is not None
        self.prewarm()
        cpu0 = self.server_cpu()
        result = drive(self.fn.url, requests, concurrency, self.args.seconds)
        cpu = self.server_cpu() - cpu0
        logged = self.api.calls
        # A runtime GET or Queue LIST is the 30 s cache expiring during the run, not the event's own work: counted
        # apart, so "per event" means "with the cache warm" (the targets' wording).
        refreshes = [c for c in logged if c.method == "GET" and c.resource in RUNTIME_RESOURCES]
        calls = [c for c in logged if c not in refreshes]
        kinds = Counter(f"{c.method} {c.resource}{'' if c.status and c.status < 300 else f' -> {c.status}'}"
                        for c in calls)
        per_event = len(calls) / result.answered if result.answered else None
        return result, {"server_cpu_ms_per_event": round(cpu * 1000 / result.answered, 3) if result.answered else None,
                        "api_calls": len(calls), "runtime_cache_refresh_gets": len(refreshes),
                        "api_calls_per_event": None if per_event is None else round(per_event, 3),
                        "api_call_kinds": dict(sorted(kinds.items()))}

    def warm_up(self) -> dict[str, Any]:
        """Exercise every path at concurrency 4 (not measured), and size the runs from the rate seen."""
        assert self.fn is not None
        n = self.args.warmup
        new, jobs = self.new_events(n)
        began = time.perf_counter()
        first = drive(self.fn.url, new, 4, 20)
        rate = first.answered / (time.perf_counter() - began)
        done = [self.api.get(keys.TRAINER_API, keys.TRAINJOB_KIND, workload.NAMESPACE, j["metadata"]["name"]) for j in jobs]
        drive(self.fn.url, self.cycle(jobs, n, "update") + self.cycle(done, n, "update")
              + self.out_of_scope_events(n), 4, 20)
        # Enough events that the time bound, not the count, ends a run (up to 2.5x the concurrency-4 rate);
        # duplicates and out-of-scope events are cheaper, so they get 8x as many. Bounded either way.
        per_run = rate * self.args.seconds
        self.cap = {"new": int(min(max(per_run * 2.5, 200), 6000)), "cheap": int(min(max(per_run * 20, 1000), 30000))}
        return {"events": first.answered, "new_per_s_conc4": round(rate, 1), "caps": self.cap,
                "outcomes": dict(first.outcomes)}

    # -- the bare API baseline -----------------------------------------------------------------------

    def bare(self, mix: str, concurrency: int, jobs: list[dict[str, Any]]) -> dict[str, Any]:
        spec = {"kubeconfig": self.api.kubeconfig, "threads": concurrency, "seconds": self.args.seconds,
                "timeout": API_TIMEOUT, "mix": mix, "jobs": jobs}
        path = self.tmp / f"bare-{mix}-{concurrency}.json"
        path.write_text(json.dumps(spec))
        self.api.reset_calls()
        done = subprocess.run([sys.executable, "-m", "bench.bare_api", str(path)], cwd=REPO, env={**os.environ, **self.env},
                              capture_output=True, text=True, timeout=self.args.seconds * 4 + 60)
        if done.returncode != 0:
            raise RuntimeError(f"bare API run failed: {done.stderr[-2000:]}")
        out = json.loads(done.stdout.strip().splitlines()[-1])
        served = self.api.calls
        out["emulator_saw"] = len(served) - concurrency  # minus each thread's warm-up GET
        out["emulator_non_2xx"] = sum(1 for c in served if not (c.status and c.status < 300))
        return out

    def bare_write_jobs(self, count: int) -> list[dict[str, Any]]:
        """Fresh TrainJobs and JobSets, with the very bodies kai_fn would send (its planner and its Event)."""
        prefix = self.prefix("bare")
        out = []
        for stored in workload.seed_new(self.api, prefix, count):
            result = plan(parse(TrainJob, stored), self.kai_runtime)
            out.append({"namespace": workload.NAMESPACE, "name": stored["metadata"]["name"],
                        "podgroup": result.podgroup,
                        "event": event_body(stored, GANG_CREATED, f"PodGroup {result.podgroup_name} created", False)})
        return out

    # -- the whole run -------------------------------------------------------------------------------

    def throughput(self) -> dict[str, Any]:
        assert self.fn is not None and self.fn.proc is not None
        sampler = RssSampler(self.fn.proc.pid)
        sampler.sample()
        idle = sampler.now()
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in SCENARIOS}
        bare: dict[str, list[dict[str, Any]]] = {"write": [], "read": []}
        memory: dict[str, Any] = {"idle_after_warmup": idle}
        for conc in CONCURRENCY:
            in_16 = conc == max(CONCURRENCY)
            if in_16:
                sampler.__enter__()
            try:
                self._log(f"concurrency {conc}: (a) new TrainJobs")
                requests, jobs = self.new_events(self.cap["new"])
                result, calls = self.measure(requests, conc)
                runs["new"].append({**result.summary(), **calls})
                done = jobs[: max(result.sent, 1)]
                self._log(f"concurrency {conc}: bare API, write mix")
                bare["write"].append(self.bare("write", conc, self.bare_write_jobs(self.cap["new"])))
                self._log(f"concurrency {conc}: (c) stale duplicates")
                result, calls = self.measure(self.cycle(done, self.cap["cheap"], "update"), conc)
                runs["dup_stale"].append({**result.summary(), **calls})
                self._log(f"concurrency {conc}: bare API, read mix")
                reads = [{"namespace": workload.NAMESPACE, "name": j["metadata"]["name"]} for j in done]
                bare["read"].append(self.bare("read", conc, [reads[i % len(reads)] for i in range(self.cap["cheap"])]))
                self._log(f"concurrency {conc}: (b) marked duplicates")
                current = [self.api.get(keys.TRAINER_API, keys.TRAINJOB_KIND, workload.NAMESPACE, j["metadata"]["name"])
                           for j in done[:500]]
                result, calls = self.measure(self.cycle(current, self.cap["cheap"], "update"), conc)
                runs["dup_marked"].append({**result.summary(), **calls})
                self._log(f"concurrency {conc}: (d) out of scope")
                result, calls = self.measure(self.out_of_scope_events(self.cap["cheap"]), conc)
                runs["out_of_scope"].append({**result.summary(), **calls})
            finally:
                if in_16:
                    sampler.__exit__()
                    memory["during_concurrency_16"] = sampler.peaks()
                    memory["after_concurrency_16"] = sampler.now()
        return {"scenarios": runs, "bare_api": bare, "memory": memory}

    def bare_function(self) -> dict[str, Any]:
        """The floor: the bare functions-framework function (bench/bare_main.py) answering the same CloudEvents
        (duplicates carrying the marker, the cheapest kai_fn path), same server and threads, same client."""
        jobs = workload.seed_new(self.api, self.prefix("ref"), 200)
        runs = []
        with FunctionProcess(self.env, source=BARE, threads=SERVER_THREADS) as fn:
            self.fn = fn
            try:
                requests = self.cycle(jobs, self.args.warmup, "update")
                drive(fn.url, requests, 4, 20)
                for conc in CONCURRENCY:
                    self._log(f"concurrency {conc}: bare functions-framework function (reference)")
                    cpu0 = self.server_cpu()
                    result = drive(fn.url, self.cycle(jobs, self.cap["cheap"], "update"), conc, self.args.seconds)
                    cpu = self.server_cpu() - cpu0
                    runs.append({**result.summary(), "api_calls_per_event": 0.0,
                                 "server_cpu_ms_per_event": round(cpu * 1000 / max(result.answered, 1), 3)})
            finally:
                self.fn = None
        return {"bare_function": runs}

    def startup(self) -> dict[str, Any]:
        def first_event() -> cloudevent.Post:
            requests, _ = self.new_events(1)
            return requests[0]

        self._log(f"cold starts: {self.args.repeats} x (kai_fn, kai_fn with production deps, bare), in turn")
        cold = cold_starts(self.env, first_event, self.args.repeats, SERVER_THREADS)
        self._log(f"import times: {self.args.repeats} x (main, main with production deps, functions_framework)")
        imports = import_times({**os.environ, **self.env}, self.args.repeats)
        return {"cold_start": cold, "import": imports}

    @staticmethod
    def _log(message: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def overhead(results: dict[str, Any]) -> list[dict[str, Any]]:
    """(events/s x API calls per event) / bare API calls/s, per concurrency, for the two scenarios with API work."""
    rows = []
    for scenario, mix in (("new", "write"), ("dup_stale", "read")):
        for run, base, oos in zip(results["scenarios"][scenario], results["bare_api"][mix],
                                  results["scenarios"]["out_of_scope"]):
            api_rate = run["events_per_s"] * (run["api_calls_per_event"] or 0)
            # the server's CPU per API call: what an event costs beyond an out-of-scope one (HTTP in, CloudEvent and
            # TrainJob parsing, planning, the log line), spread over its API calls; no ratio where the function made
            # no call (a stale duplicate, answered from its memory)
            extra = (run["server_cpu_ms_per_event"] or 0) - (oos["server_cpu_ms_per_event"] or 0)
            rows.append({"scenario": scenario, "mix": mix, "concurrency": run["concurrency"],
                         "function_api_calls_per_s": round(api_rate, 1), "bare_api_calls_per_s": base["calls_per_s"],
                         "ratio": round(api_rate / base["calls_per_s"], 2) if base["calls_per_s"] and api_rate else None,
                         "function_cpu_ms_per_call": round(extra / run["api_calls_per_event"], 3)
                         if run["api_calls_per_event"] else None,
                         "bare_client_cpu_ms_per_call": base.get("client_cpu_ms_per_call")})
    return rows


def judge(results: dict[str, Any]) -> list[dict[str, Any]]:
    sc = results["scenarios"]

    def worst(name: str) -> float:
        return max(r["api_calls_per_event"] or 0 for r in sc[name])

    ratios = [r["ratio"] for r in results["overhead"] if r["scenario"] == "new" and r["ratio"] is not None]
    mem = results["memory"]["during_concurrency_16"]["peak_rss_total_mb"]
    rows = [
        ("API calls per new TrainJob (incl. its Event), worst concurrency", worst("new"), "<=", TARGETS["new_calls"]),
        ("API calls per duplicate carrying the marker", worst("dup_marked"), "<=", TARGETS["dup_marked_calls"]),
        ("API calls per stale duplicate (no marker)", worst("dup_stale"), "<=", TARGETS["dup_stale_calls"]),
        ("API calls per out-of-scope event (cache warm)", worst("out_of_scope"), "<=", 0),
        ("overhead ratio, new TrainJobs, worst concurrency", min(ratios) if ratios else 0.0, ">=", TARGETS["overhead"]),
        ("cold start to first answered event, kai_fn / bare (medians; production deps)",
         results["cold_start"]["ratio_prod_deps"], "<=", TARGETS["cold"]),
        ("cold start, as above, dev venv as installed", results["cold_start"]["ratio"], "<=", TARGETS["cold"]),
        ("import time, main / functions_framework (medians; production deps)", results["import"]["ratio_prod_deps"],
         "<=", TARGETS["import"]),
        ("import time, as above, dev venv as installed", results["import"]["ratio"], "<=", TARGETS["import"]),
        ("peak RSS of the server (one process) at concurrency 16, MB", mem, "<=", TARGETS["rss_mb"]),
    ]
    correct = all(r["statuses"].keys() <= {"200"} and not r["errors"]
                  and set(r["outcomes"]) <= {SCENARIOS[name][1]} for name, runs in sc.items() for r in runs)
    out = [{"target": t, "value": v, "op": op, "limit": lim,
            "met": (v <= lim) if op == "<=" else (v >= lim)} for t, v, op, lim in rows]
    out.append({"target": "every answer HTTP 200 with the expected outcome, no client errors", "value": correct,
                "op": "==", "limit": True, "met": correct})
    return out


def table(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [f"kai_fn benchmark - {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}, "
             f"server KAI_FN_THREADS={SERVER_THREADS}, {results['settings']['seconds']} s per run",
             "",
             f"{'scenario':<32} {'conc':>4} {'events':>6} {'ev/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} "
             f"{'API/ev':>6} {'CPU ms/ev':>9}  outcomes"]
    for name, runs in results["scenarios"].items():
        for r in runs:
            outcomes = ", ".join(f"{k} {v}" for k, v in r["outcomes"].items())
            if r["errors"]:
                outcomes += f"; errors {r['errors']}"
            lines.append(f"{SCENARIOS[name][0]:<32} {r['concurrency']:>4} {r['events']:>6} {r['events_per_s']:>7.1f} "
                         f"{r['p50_ms']:>7.2f} {r['p95_ms']:>7.2f} {r['p99_ms']:>7.2f} {r['api_calls_per_event']:>6.2f}"
                         f" {r['server_cpu_ms_per_event']:>9.2f}  {outcomes}")
    for r in results["reference"]["bare_function"]:
        lines.append(f"{'(e) bare ff function (reference)':<32} {r['concurrency']:>4} {r['events']:>6} "
                     f"{r['events_per_s']:>7.1f} {r['p50_ms']:>7.2f} {r['p95_ms']:>7.2f} {r['p99_ms']:>7.2f} "
                     f"{0.0:>6.2f} {r['server_cpu_ms_per_event']:>9.2f}  answered {r['events']}")
    new = results["scenarios"]["new"][0]
    lines += ["", "API calls of a new TrainJob (concurrency 1): "
              + ", ".join(f"{k} x{v}" for k, v in new["api_call_kinds"].items())]
    refreshes = [(name, r["concurrency"], r["runtime_cache_refresh_gets"]) for name, runs in results["scenarios"].items()
                 for r in runs if r["runtime_cache_refresh_gets"]]
    lines.append("runtime GETs from the 30 s cache expiring mid-run (not counted per event): "
                 + (", ".join(f"{n} at concurrency {c}: {k}" for n, c, k in refreshes) or "none")
                 + " (more than 1 in one run = concurrent misses of one expiry, each fetching)")
    lines += ["", f"{'overhead (function API calls/s / bare API calls/s)':<52} {'conc':>4} {'fn calls/s':>10} "
              f"{'bare calls/s':>12} {'ratio':>6} {'fn CPU ms/call':>14} {'bare CPU ms/call':>16}"]
    for r in results["overhead"]:
        label = "(a) new vs bare write mix" if r["scenario"] == "new" else "(c) stale dup vs bare read mix"
        lines.append(f"{label:<52} {r['concurrency']:>4} {_num(r['function_api_calls_per_s'], 10, 1)} "
                     f"{_num(r['bare_api_calls_per_s'], 12, 1)} {_num(r['ratio'], 6, 2)} "
                     f"{_num(r['function_cpu_ms_per_call'], 14, 2)} {_num(r['bare_client_cpu_ms_per_call'], 16, 2)}")
    cold, imp = results["cold_start"], results["import"]
    mem = results["memory"]
    lines += ["",
              f"cold start, Popen to first answered event (median of {cold['repeats']}): kai_fn "
              f"{cold['kai_fn']['answered_s']:.3f} s (listening at {cold['kai_fn']['listening_s']:.3f} s), "
              f"kai_fn with production deps {cold['kai_fn_prod_deps']['answered_s']:.3f} s, bare "
              f"{cold['bare']['answered_s']:.3f} s (listening at {cold['bare']['listening_s']:.3f} s): "
              f"{cold['ratio']:.2f}x, production deps {cold['ratio_prod_deps']:.2f}x",
              f"import (median of {imp['repeats']}): main {imp['main_s']:.3f} s, main with production deps "
              f"{imp['main_prod_deps_s']:.3f} s, functions_framework {imp['functions_framework_s']:.3f} s: "
              f"{imp['ratio']:.2f}x, production deps {imp['ratio_prod_deps']:.2f}x",
              "import breakdown, production deps (cumulative ms, -X importtime; a module counts where first imported): "
              + ", ".join(f"{k} {v:.0f}" for k, v in imp["breakdown_prod_deps_ms"].items()),
              f"memory: idle after warm-up RSS {mem['idle_after_warmup']['rss_mb']:.1f} MB "
              f"(PSS {mem['idle_after_warmup']['pss_mb']:.1f}); peak RSS at concurrency 16 "
              f"{mem['during_concurrency_16']['peak_rss_total_mb']:.1f} MB (one process); "
              f"after it PSS {mem['after_concurrency_16']['pss_mb']:.1f} MB",
              "", "targets:"]
    for t in results["targets"]:
        value = t["value"] if not isinstance(t["value"], float) else round(t["value"], 2)
        lines.append(f"  [{'MET   ' if t['met'] else 'MISSED'}] {t['target']}: {value} (target {t['op']} {t['limit']})")
    return "\n".join(lines)


def _num(value: float | None, width: int, places: int) -> str:
    """A figure right-aligned, or "-" where there is none (a scenario that made no API call has no ratio)."""
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{places}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="on the chain testbed (each has --help): python -m bench chain | shapes | faults | resync")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON to this file")
    parser.add_argument("--seconds", type=float, default=4.0, help="time bound of each measured run (default 4)")
    parser.add_argument("--repeats", type=int, default=5, help="cold starts and imports of each kind (default 5)")
    parser.add_argument("--warmup", type=int, default=60, help="events of each kind in the warm-up (default 60)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results: dict[str, Any] = {"machine": machine(), "settings": {
        "seconds": args.seconds, "repeats": args.repeats, "server_threads": SERVER_THREADS,
        "concurrency": list(CONCURRENCY),
        "function_env": "KUBECONFIG and KAI_FN_BACKGROUND_WORKERS=0 (kai_fn defaults otherwise: runtime cache 30 s)"}}
    bench = Bench(args)
    try:
        Bench._log("starting the function server")
        bench.start_function()
        results["warmup"] = bench.warm_up()
        results |= bench.throughput()
        bench.fn.stop()  # type: ignore[union-attr]
        bench.fn = None
        results["reference"] = bench.bare_function()
        results |= bench.startup()
    finally:
        bench.close()
    results["overhead"] = overhead(results)
    results["targets"] = judge(results)
    results["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    print(f"\n(total {results['wall_seconds']} s; load average {results['machine']['loadavg_start']} at start, "
          f"{results['machine']['loadavg_end']} at end)")
    if args.out:
        print(f"figures written to {args.out}")
    return 0
