"""``python -m bench resync``: what one resync ping costs with 1,000 TrainJobs in the cluster, and how many pings
drain a backlog of held ones.

On one chain testbed (started here, or the running one), kai_fn on Knative's own adapters with the Service's
settings (``KAI_FN_RESYNC_LIMIT`` 50, runtime cache 30 s). ``--trainjobs`` TrainJobs of one pod × 1 GPU are submitted
plainly over ``--namespaces`` namespaces, through kai_fn, as a cluster comes to hold them (bench/resync_mix.py):
most have run and completed, some are running, some wait for nodes that do not exist (released, never bound). Then
pings are posted as mtping posts them (its OIDC identity and audience; mtping's own schedule is set to an hour so
every ping is one of ours): ``--pings`` on that steady state, ``--gap`` seconds apart; then ``--held`` more
TrainJobs are made while the TrainJob and JobSet sources' adapters are down (no event ever comes for them: their
JobSets stay held by the admission policy), and pings go every ``--period`` seconds (knative/base: a minute) until
none is held, timed from the first (the resync hands every held JobSet to the work queue at once). Per ping: wall
time, the function's log line (``ms``, ``api_calls``, what it did), its API calls by
verb and resource (the ``/metrics`` counters before and after), writes by its ServiceAccount in the audit log when
the testbed keeps one, and the peak RSS of the process that served it (psutil sampling every 10 ms, and the kernel's
high-water mark VmHWM, reset before each ping). Prints a Markdown section for BENCHMARKS.md; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from bench.resync_mix import POOL, Mix, census, held, populate, submit_held
from kai_fn.local import faults
from kai_fn.local.chain import NAMESPACE, SOURCE_SAS, Testbed, _token, kubectl_of, running
from kai_fn.local.realchain import ChainError, chain_cluster
from kai_fn.local.source import ping_event
from kubernetes import client



@dataclass
class Ping:
    seconds: float
    line: dict
    calls: Counter[str]
    writes: int | None
    peak_sampled: int
    peak_hwm: int
    rss_before: int


@dataclass
class Drain:
    """The backlog's drain: how long Trainer took to make the held JobSets, how many were held, how long from the
    first ping until none was, and the function's peak RSS and work queue meanwhile (sampled every 200 ms)."""
    made_s: float = 0.0
    held: int = 0
    released_s: float | None = None
    peak_rss: int = 0
    peak_queue: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)

    def sample(self, fn: Function) -> None:
        while not self.done.wait(0.2):
            self.peak_rss = max(self.peak_rss, fn.server.memory_info().rss)
            self.peak_queue = max(self.peak_queue, fn.queue_depth())


class Function:
    """The function process as the bench sees it: who serves requests, its log, its counters."""

    def __init__(self, chain, log: Path) -> None:
        self.url, self.log = chain.function.url, log
        self.server = psutil.Process(chain.function.proc.pid)  # the server: one process
        sa = SOURCE_SAS["ping"]
        token = _token(client.CoreV1Api(chain.api), NAMESPACE, sa, ["kai-fn"], 6 * 3600)
        self.headers = {**ping_event().headers, "Authorization": f"Bearer {token}"}

    def samples(self, name: str) -> list[Sample]:
        """The samples of metric ``name`` on the function's /metrics, read with prometheus_client's own parser."""
        text = requests.get(f"{self.url}/metrics", timeout=30).text
        return [s for family in text_string_to_metric_families(text) for s in family.samples if s.name == name]

    def calls(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for sample in self.samples("kai_fn_api_calls_total"):
            out[f"{sample.labels['verb']} {sample.labels['resource']}"] += int(sample.value)
        return out

    def queue_depth(self) -> float:
        return sum(sample.value for sample in self.samples("kai_fn_work_queue"))

    def hwm(self) -> int:
        for line in Path(f"/proc/{self.server.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def ping(self, audit: Path | None) -> Ping:
        Path(f"/proc/{self.server.pid}/clear_refs").write_text("5")  # VmHWM := current RSS
        before, offset = self.calls(), self.log.stat().st_size
        audit_at = audit.stat().st_size if audit and audit.exists() else None
        rss = self.server.memory_info().rss
        peak, done = [rss], threading.Event()

        def sample() -> None:
            while not done.wait(0.01):
                peak[0] = max(peak[0], self.server.memory_info().rss)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        began = time.monotonic()
        answer = requests.post(self.url, data=ping_event().body, headers=self.headers, timeout=600)
        seconds = time.monotonic() - began
        done.set()
        sampler.join()
        answer.raise_for_status()
        line = next((e for e in reversed(_lines(self.log, offset)) if str(e.get("reason", "")).startswith("resync:")),
                    {})
        return Ping(seconds, line, self.calls() - before, _writes(audit, audit_at), peak[0], self.hwm(), rss)


def _lines(path: Path, offset: int) -> list[dict]:
    with path.open("rb") as f:
        f.seek(offset)
        return [json.loads(s) for s in f.read().decode(errors="replace").splitlines() if s.startswith("{")]


def _writes(audit: Path | None, offset: int | None) -> int | None:
    """Successful writes by the function's ServiceAccount in the audit log since ``offset`` (the testbed's audit
    policy logs writes only)."""
    if audit is None or offset is None:
        return None
    with audit.open() as f:
        f.seek(offset)
        found = (json.loads(s) for s in f if '"system:serviceaccount:kai-fn:kai-fn"' in s)
        return sum(1 for e in found if e.get("stage") == "ResponseComplete"
                   and 200 <= (e.get("responseStatus") or {}).get("code", 0) < 300)


def mb(n: int) -> str:
    return f"{n / 2**20:.0f}"


def rows(pings: list[Ping], first: int = 1) -> list[str]:
    out = []
    for i, p in enumerate(pings, first):
        calls = ", ".join(f"{n} {k}" for k, n in sorted(p.calls.items(), key=lambda kv: -kv[1]))
        out.append(f"| {i} | {p.seconds:.2f} | {p.line.get('ms', '?')} | {p.line.get('api_calls', '?')} "
                   f"({calls}) | {'-' if p.writes is None else p.writes} | {mb(p.rss_before)} | "
                   f"{mb(p.peak_sampled)} | {mb(p.peak_hwm)} | {str(p.line.get('reason', ''))[:150]} |")
    return out


HEAD = ["| ping | wall s | function ms | API calls: the resync's (its line); all the function's meanwhile, by verb "
        "and resource (/metrics) | audit: writes that succeeded | RSS before MB | "
        "peak RSS MB (sampled) | VmHWM MB | what the resync did (its log line) |", "|---|---|---|---|---|---|---|---|---|"]


def report(args, mix: Mix, seen: dict[str, int], steady: list[Ping], backlog: list[Ping], drain: Drain, took: float,
           load: tuple[float, float, float]) -> str:
    released = (f"**all {drain.held} released {drain.released_s:.1f} s after the first ping, by {len(backlog)} "
                f"ping{'s' if len(backlog) != 1 else ''}**" if drain.released_s is not None else
                f"**not all released within {args.drain_deadline:.0f} s** ({len(backlog)} pings)")
    lines = ["## The resync: 1,000 TrainJobs present, and a backlog of held JobSets (issues 16 and 21)", "",
             f"Command: `python -m bench resync --trainjobs {args.trainjobs} --held {args.held}` ({took / 60:.0f} min "
             f"with the set-up). Machine: {platform.machine()}, {psutil.cpu_count()} CPUs, "
             f"{psutil.virtual_memory().total / 2**30:.0f} GiB, load average {load[0]:.1f} / {load[1]:.1f} / "
             f"{load[2]:.1f} (1 / 5 / 15 min) at the end.", "",
             f"Made through kai_fn, {args.namespaces} namespaces, one pod × 1 GPU each: {mix.text()}. Found at the "
             "first ping: " + (", ".join(f"{n} {k}" for k, n in seen.items()) or "none") + ".", "",
             f"Steady state ({len(steady)} pings, {args.gap:.0f} s apart):", "", *HEAD, *rows(steady), "",
             f"Backlog: {args.held} more TrainJobs made while the TrainJob and JobSet sources' adapters are down (no "
             f"event sent; they stay down until all are released); Trainer made their JobSets, held by the admission "
             f"policy ({drain.held} held, {drain.made_s:.0f} s after the first create). Then a ping, and one every "
             f"{args.period:.0f} s while any is held: {released}. The function meanwhile: peak RSS "
             f"{mb(drain.peak_rss)} MB, its work queue at most {drain.peak_queue:.0f} deep (sampled every 200 ms).", "",
             *HEAD, *rows(backlog)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench resync", description=__doc__.splitlines()[0])
    p.add_argument("--trainjobs", type=int, default=1000)
    p.add_argument("--held", type=int, default=1000,
                   help="TrainJobs made while the TrainJob and JobSet adapters are down, then drained")
    p.add_argument("--namespaces", type=int, default=10)
    p.add_argument("--pings", type=int, default=5, help="pings on the steady state")
    p.add_argument("--gap", type=float, default=5.0, help="seconds between the steady state's pings")
    p.add_argument("--period", type=float, default=60.0,
                   help="seconds between pings while a backlog is held (knative/base's PingSource: every minute)")
    p.add_argument("--drain-deadline", type=float, default=900.0, help="seconds the backlog may take")
    p.add_argument("--keep", action="store_true", help="leave the TrainJobs for the next run (which reuses them)")
    p.add_argument("--out", type=Path, help="also write the Markdown section here")
    args = p.parse_args(argv)
    state = Path(os.environ.setdefault("KAI_FN_TESTBED_DIR", str(Path.home() / ".cache" / "kai-fn" / "testbed-bench")))
    audit = state / "audit.log"
    began = time.monotonic()
    try:
        with chain_cluster(env={"KAI_FN_TESTBED_DIR": str(state)}, quiet=True) as cluster, \
                running(cluster.kubeconfig, ping_seconds=3600, settings={"KAI_FN_RUNTIME_CACHE_SECONDS": "30"}) as chain:
            bed = Testbed(cluster.kubeconfig, cluster.api, kubectl_of(cluster.kubeconfig))
            fn = Function(chain, chain.log_dir / "function.log")
            mix = Mix.of(args.trainjobs)
            namespaces = populate(chain, bed, mix, args.namespaces, ping=lambda: fn.ping(None))
            seen = census(chain)
            steady = []
            for _ in range(args.pings):
                steady.append(fn.ping(audit if audit.exists() else None))
                time.sleep(args.gap)
            backlog: list[Ping] = []
            drain_seen = Drain()

            def drain() -> None:
                """With the TrainJob and JobSet sources down throughout, only the resync can release them: a ping,
                then one every ``--period`` seconds while any is still held."""
                drain_seen.made_s = submit_held(chain, namespaces, args.held)
                drain_seen.held = held(chain, namespaces)
                sampler = threading.Thread(target=drain_seen.sample, args=(fn,), daemon=True)
                first = next_ping = time.monotonic()
                sampler.start()
                try:
                    while time.monotonic() < first + args.drain_deadline:
                        if time.monotonic() >= next_ping:
                            backlog.append(fn.ping(audit if audit.exists() else None))
                            next_ping = time.monotonic() + args.period
                        if held(chain, namespaces) == 0:
                            drain_seen.released_s = time.monotonic() - first
                            break
                        time.sleep(0.5)
                finally:
                    drain_seen.done.set()
                    sampler.join()

            faults.restart_adapters(chain, ("kai-fn-trainjobs", "kai-fn-jobsets"), meanwhile=drain)
            if not args.keep:
                bed.clear(namespaces, POOL, 600)
    except ChainError as error:
        print(f"bench resync: {error}")
        return 1
    md = report(args, mix, seen, steady, backlog, drain_seen, time.monotonic() - began, os.getloadavg())
    print(md)
    if args.out:
        args.out.write_text(md + "\n")
    return 0
