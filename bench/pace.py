"""``python -m bench pace``: what sets Trainer's pace in a burst, path by path: when it has made each JobSet, and the
API server's requests meanwhile.

Trainer's TrainJob controller runs one worker; every JobSet of a burst waits for it, and each of its reconciles is
a few API calls in a row, so its pace is the API server's latency. The same burst as ``bench chain`` goes through
variants of kai_fn's path, one after another on one chain testbed:

- ``podgrouper``: a namespace kai_fn does not take (the anchor);
- ``kai-fn``: an enabled one, everything running;
- ``no-podgroup-events`` / ``no-trainjob-events``: that source's adapter stopped (SIGSTOP) for the burst, so
  kai_fn's work on those events is gone;
- ``no-events``: every adapter stopped: the JobSets are made and held and nothing is released (no pod, no binding),
  which is Trainer's pace with the admission policy and nothing else going on;
- ``suspended``: TrainJobs submitted with ``spec.suspend: true`` where kai_fn does not take them: Trainer makes
  their JobSets suspended, no policy, no pod (the baseline of ``no-events``).

Per variant: TrainJobs bound (p50, p95 from create), when Trainer made the JobSets (p50, last; audit log), Trainer's
write latencies (p50), and the API server's requests by verb and resource during the burst (its
``apiserver_request_total``). Prints Markdown; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from kubernetes import client

from bench import audit
from bench import chain as bench_chain
from kai_fn.local import faults
from kai_fn.local.chain import TRAINER, Chain, kubectl_of
from kai_fn.local.realchain import ChainError, chain_cluster, kai_fn_running, submit, trainjob

VARIANTS = ("podgrouper", "kai-fn", "suspended", "no-events", "no-podgroup-events", "no-trainjob-events")
UNRELEASED = ("suspended", "no-events")  # no pod is made: Trainer's pace with nothing else going on
STOPPED = {"no-events": ("trainjobs", "jobsets", "podgroups"), "no-podgroup-events": ("podgroups",),
           "no-trainjob-events": ("trainjobs",)}
_REQUESTS = re.compile(r'^apiserver_request_total\{(.*)\} ([0-9.e+]+)$')


def requests_served(kubectl: Path, kubeconfig: Path) -> Counter[str]:
    text = subprocess.run([str(kubectl), "--kubeconfig", str(kubeconfig), "get", "--raw", "/metrics"],
                          capture_output=True, text=True, check=True).stdout
    out: Counter[str] = Counter()
    for line in text.splitlines():
        if m := _REQUESTS.match(line):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
            out[f"{labels.get('verb')} {labels.get('resource', '')}{sub}"] += int(float(m.group(2)))
    return out


@contextmanager
def adapters_stopped(chain: Chain, names: tuple[str, ...]) -> Iterator[None]:
    procs = [s.current.proc for s in chain.sources if getattr(s, "current", None) and s.current.proc is not None
             and any(s.spec.name.endswith(n) for n in names)]
    if len(procs) != len(names):
        raise ChainError(f"adapters {names}: found {len(procs)} running")
    with faults.paused(procs):
        yield


def trainer_writes(audit_log: Path, offset: int, ns: str) -> tuple[list[float], dict[str, list[float]]]:
    """Seconds from the first create to each JobSet Trainer made; Trainer's write latencies (ms) by resource."""
    found = list(audit.writes(audit_log, offset, ns))
    t0 = min(w.at for w in found if w.resource == "trainjobs" and w.verb == "create")
    made = sorted(w.at - t0 for w in found if w.component == audit.TRAINER and w.resource == "jobsets"
                  and w.code == 201)
    latency: dict[str, list[float]] = defaultdict(list)
    stamp = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()  # noqa: E731
    with audit_log.open() as f:
        f.seek(offset)
        for line in f:
            e = json.loads(line)
            ref = e.get("objectRef") or {}
            if (e.get("stage") == "ResponseComplete" and ref.get("namespace") == ns
                    and audit.component(e) == audit.TRAINER):
                what = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                latency[what].append((stamp(e["stageTimestamp"]) - stamp(e["requestReceivedTimestamp"])) * 1000)
    return made, latency


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench pace", description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=100, help="TrainJobs per burst (default 100)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="which, in the order they run")
    p.add_argument("--out", type=Path, help="also write the Markdown here")
    args = p.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    state = Path(os.environ.get("KAI_FN_TESTBED_DIR") or Path.home() / ".cache" / "kai-fn" / "testbed-bench")
    audit_log = state / "audit.log"
    env = {"KAI_FN_TESTBED_DIR": str(state), "KAI_FN_TESTBED_AUDIT_LOG": str(audit_log)}
    rows = []
    try:
        with chain_cluster("4x8", env) as cluster, \
                kai_fn_running(cluster, ping_seconds=60, production=True, queue_proxy=True) as chain:
            kubectl = kubectl_of(cluster.kubeconfig)
            objs = client.CustomObjectsApi(chain.api)
            objs.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", bench_chain.runtime())
            chain.nodes(f"{args.jobs * 2 // bench_chain.GPUS_PER_NODE + 1}x{bench_chain.GPUS_PER_NODE}",
                        bench_chain.POOL)
            spaces = {v: chain.namespace(f"pace-{v}", enabled=v not in ("podgrouper", "suspended")) for v in variants}
            try:
                for variant in variants:
                    bench_chain.settle(1.5, 90)
                    ns, offset = spaces[variant], audit_log.stat().st_size
                    before = requests_served(kubectl, cluster.kubeconfig)
                    with adapters_stopped(chain, STOPPED.get(variant, ())):
                        if variant in UNRELEASED:  # no pod: until Trainer has made every JobSet
                            for i in range(args.jobs):
                                body = trainjob(f"tj-{i:03d}", bench_chain.RUNTIME, nodes=2, gpus=1)
                                body["spec"]["suspend"] = variant == "suspended"
                                submit(chain.api, ns, body)
                            end = time.monotonic() + 120
                            while time.monotonic() < end and len(objs.list_namespaced_custom_object(
                                    "jobset.x-k8s.io", "v1alpha2", ns, "jobsets")["items"]) < args.jobs:
                                time.sleep(0.5)
                            time.sleep(2)
                            b = None
                        else:
                            b = bench_chain.burst(chain, variant, ns, args.jobs, 2, audit_log,
                                                  cluster.state / "function.log", 60 + 2 * args.jobs)
                    served = requests_served(kubectl, cluster.kubeconfig) - before
                    made, latency = trainer_writes(audit_log, offset, ns)
                    rows.append((variant, b, made, latency, served))
                    print(f"bench pace: {variant}: JobSets made by {made[-1] if made else float('nan'):.2f} s",
                          flush=True)
                    bench_chain.clear(chain, ns)
            finally:
                for ns in spaces.values():
                    client.CoreV1Api(chain.api).delete_namespace(ns)
                objs.delete_cluster_custom_object(*TRAINER, "clustertrainingruntimes", bench_chain.RUNTIME)
                chain.delete_nodes(bench_chain.POOL)
    except ChainError as error:
        print(f"bench pace: {error}")
        return 1
    md = report(rows, args.jobs, bench_chain.commit_of())
    print(md)
    if args.out:
        args.out.write_text(md + "\n")
    return 0


def report(rows, jobs: int, commit: str) -> str:
    rank = bench_chain.nearest_rank
    lines = [f"Command: `python -m bench pace --jobs {jobs}`, code at {commit}; {jobs} TrainJobs a burst, 2 pods × 1 "
             "GPU each.", "",
             "| variant | bound | p50 / p95 s | Trainer made the JobSets: p50 / last s | Trainer's writes, ms p50: "
             "ConfigMap apply, JobSet apply, status patch | API requests in the burst |", "|---|---|---|---|---|---|"]
    for variant, b, made, latency, served in rows:
        lat = b.latencies() if b else []
        cells = ", ".join(f"{rank(latency.get(r, []), 50):.0f}" for r in ("configmaps", "jobsets", "trainjobs/status"))
        lines.append(f"| {variant} | {f'{b.bound()}/{b.jobs}' if b else 'none released'} | "
                     f"{f'{rank(lat, 50):.2f} / {rank(lat, 95):.2f}' if lat else '–'} | "
                     f"{rank(made, 50):.2f} / {max(made, default=0):.2f} | "
                     f"{cells} | {sum(served.values())} |")
    lines += ["", "<details><summary>the API server's requests by verb and resource, per variant (the 12 most)"
              "</summary>", ""]
    for variant, _, _, _, served in rows:
        lines.append(f"- {variant}: " + ", ".join(f"{k} {n}" for k, n in served.most_common(12)))
    lines += ["", "</details>"]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
