"""``python -m bench faults``: chain scenario 4's burst with faults at full size (kai_fn/local/faultburst.py).

100 TrainJobs (2 pods × 1 GPU each, every tenth one kai_fn must refuse) over four namespaces, while the function is
killed every 10 s and started again, the API server restarted once and the TrainJob source's adapter once; on one
chain testbed (started here, or the running one) with kai_fn on Knative's own adapters and a 10 s resync ping.
Prints the checks (each should be empty) and the figures as a Markdown section for BENCHMARKS.md; exit 1 when a
check failed. Nothing here is asserted about time.
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import psutil

from kai_fn.local.chain import Testbed, kubectl_of
from kai_fn.local.faultburst import Burst, Record, run
from kai_fn.local.realchain import ChainError, chain_cluster, kai_fn_running

POOL = "bfaults"


def checks(record: Record) -> dict[str, list[str]]:
    return {"faults that failed": record.fault_errors, "unsettled": record.unsettled(),
            "bound outside a whole gang": record.partly_bound(), "PodGroups per wave": record.podgroups_per_wave(),
            "pods bound before their PodGroup": record.missing_podgroups}


def report(record: Record, args: argparse.Namespace, elapsed: float, load: tuple[float, float, float]) -> str:
    b = record.burst
    lines = ["## Chain: a burst with faults, at scale (issue 16 item 5)", "",
             f"Command: `python -m bench faults --jobs {b.jobs} --namespaces {b.namespaces} --kills {b.kills}` "
             f"({elapsed:.0f} s with set-up). Machine: {platform.machine()}, {psutil.cpu_count()} CPUs, "
             f"{psutil.virtual_memory().total / 2**30:.0f} GiB, load average {load[0]:.1f} / {load[1]:.1f} / "
             f"{load[2]:.1f} (1 / 5 / 15 min) at the end.", "",
             f"{b.jobs} TrainJobs submitted plainly, back to back, round-robin over {b.namespaces} kai_fn-enabled "
             f"namespaces, {b.pods} pods × 1 GPU each; every {b.blocked_every}th asks for a Queue that does not exist "
             f"or one of 1 GPU. The function is SIGKILLed every {b.kill_every:.0f} s ({b.kills} times, the first "
             f"after {b.kill_every / 2:.0f} s) and started again 1 s later; the API server is restarted when half "
             "the burst is submitted; the TrainJob source's adapter is killed when three quarters are, and started "
             "again once Trainer is done with the last quarter. Resync ping (mtping) every "
             f"{args.ping:.0f} s, `KAI_FN_RESYNC_LIMIT` 50.", "",
             "| check | violations |", "|---|---|"]
    lines += [f"| {name} | {len(found)} |" for name, found in checks(record).items()]
    lines += ["", *[f"- {line}" for line in record.figures()]]
    pings = record.resync_lines()
    if pings:
        ms = sorted(float(e.get("ms", 0)) for e in pings)
        calls = sorted(int(e.get("api_calls", 0)) for e in pings)
        lines.append(f"- resync lines logged: {len(pings)}, ms median {ms[len(ms) // 2]:.0f} (max {ms[-1]:.0f}), "
                     f"API calls median {calls[len(calls) // 2]} (max {calls[-1]})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench faults", description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=100)
    p.add_argument("--namespaces", type=int, default=4)
    p.add_argument("--kills", type=int, default=6, help="times the function is killed, every --kill-every s")
    p.add_argument("--kill-every", type=float, default=10.0)
    p.add_argument("--ping", type=float, default=10.0, help="seconds between resync pings")
    p.add_argument("--settle", type=float, default=300.0, help="seconds to wait after the last fault")
    p.add_argument("--out", type=Path, help="also write the Markdown section here")
    args = p.parse_args(argv)
    state = os.environ.setdefault("KAI_FN_TESTBED_DIR", str(Path.home() / ".cache" / "kai-fn" / "testbed-bench"))
    burst = Burst(jobs=args.jobs, namespaces=args.namespaces, kills=args.kills, kill_every=args.kill_every,
                  settle=args.settle)
    began = time.monotonic()
    try:
        with chain_cluster(env={"KAI_FN_TESTBED_DIR": state}, quiet=True) as cluster, \
                kai_fn_running(cluster, ping_seconds=args.ping) as chain:
            bed = Testbed(cluster.kubeconfig, cluster.api, kubectl_of(cluster.kubeconfig))
            bed.delete_nodes(POOL)
            bed.nodes(burst.nodes, POOL)
            namespaces = [chain.namespace("bfaults") for _ in range(burst.namespaces)]
            print(f"bench faults: {burst.jobs} TrainJobs in {', '.join(namespaces)}", flush=True)
            try:
                record = run(chain, burst, namespaces, POOL)
            finally:
                bed.clear(namespaces, POOL)
    except ChainError as error:
        print(f"bench faults: {error}")
        return 1
    md = report(record, args, time.monotonic() - began, os.getloadavg())
    print(md)
    for name, found in checks(record).items():
        for line in found[:20]:
            print(f"{name}: {line}")
    if args.out:
        args.out.write_text(md + "\n")
    return 1 if any(checks(record).values()) else 0
