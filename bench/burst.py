"""``python -m bench burst``: a tenant's burst of bad objects beside another team's good TrainJob (issue 39, item 1).

On a plain testbed (the real API server and etcd; ``./run.sh cluster up``, the running one or one started here and
stopped after), the function as a real local process with knative/base's settings (4 background workers, runtime
cache 30 s, resync limit 50) and the admin kubeconfig. In namespace ``burst-bad``: ``--bad`` TrainJobs whose
``kai-fn/schedule-timeout-seconds`` is not a number (kai_fn refuses each: ``PlanBlocked``), each with its JobSet as
Trainer makes it and the admission policy names it (so every resync finds it owed its gang), and ``--big`` JobSets
of ``--big-mb`` MB each (``tolerations: [{}, …]``, no owner: attack 1). Then:

1. the good TrainJob alone (namespace ``burst-good``): its event posted, the time until its PodGroup exists;
2. a resync ping, which finds every bad TrainJob owed and queues them all, and right after it a new good TrainJob's
   event, in ``burst-good`` and (for comparison) in ``burst-bad`` behind the burst: the time until each PodGroup
   exists;
3. once the queue is empty, another ping: its time and API calls (the refused TrainJobs back off).

Throughout, the function's peak RSS (psutil every 10 ms, and the kernel's VmHWM). Prints a Markdown section for
BENCHMARKS.md; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import requests
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

from bench.memory import MB, RssSampler
from kai_fn.local.emulator import naming
from kai_fn.local.process import REPO, FunctionProcess
from kai_fn.local.source import TRAINJOBS, apiserver_event, ping_event

BAD, GOOD = "burst-bad", "burst-good"
ENABLED = {"kai-fn.io/enabled": "true"}
SOURCE = "https://127.0.0.1/apis/v1/namespaces/kai-fn/apiserversources/kai-fn-trainjobs"
SETTINGS = {"KAI_FN_BACKGROUND_WORKERS": "4", "KAI_FN_RUNTIME_CACHE_SECONDS": "30", "KAI_FN_RESYNC_LIMIT": "50",
            "KAI_FN_API_TIMEOUT_SECONDS": "10"}


def sample(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "samples" / "cluster" / f"{name}.yaml").read_text())


def cluster_up() -> tuple[Path, bool]:
    """The testbed's admin kubeconfig, and whether this run started it."""
    run = str(REPO / "run.sh")
    reused = subprocess.run([run, "cluster", "status"], cwd=REPO, capture_output=True).returncode == 0
    up = subprocess.run([run, "cluster", "up"], cwd=REPO, capture_output=True, text=True)
    if up.returncode != 0:
        sys.exit(f"burst: ./run.sh cluster up failed: {up.stderr.strip().splitlines()[-1:]}")
    return Path(up.stdout.strip().splitlines()[-1]), not reused


class Bed:
    def __init__(self, kubeconfig: Path) -> None:
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core, self.objs = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)

    def namespace(self, name: str) -> None:
        try:
            self.core.delete_namespace(name)
            while True:
                self.core.read_namespace(name)
                time.sleep(0.5)
        except ApiException as error:
            if error.status != 404:
                raise
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=ENABLED)))

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        group, version = obj["apiVersion"].split("/")
        plural = {"TrainJob": "trainjobs", "JobSet": "jobsets", "Queue": "queues",
                  "ClusterTrainingRuntime": "clustertrainingruntimes"}[obj["kind"]]
        try:
            if obj["kind"] in ("Queue", "ClusterTrainingRuntime"):
                return self.objs.create_cluster_custom_object(group, version, plural, obj)
            return self.objs.create_namespaced_custom_object(group, version, obj["metadata"]["namespace"], plural,
                                                             obj)
        except ApiException as error:
            if error.status != 409:
                raise
            return obj

    def podgroup(self, namespace: str, name: str) -> bool:
        try:
            self.objs.get_namespaced_custom_object("scheduling.run.ai", "v2alpha2", namespace, "podgroups", name)
            return True
        except ApiException as error:
            if error.status != 404:
                raise
            return False


def trainjob(namespace: str, name: str, bad: bool) -> dict[str, Any]:
    tj = sample("trainjob-llama-finetune")
    tj["metadata"].update(name=name, namespace=namespace)
    tj["metadata"].pop("uid", None)
    if bad:
        tj["metadata"].setdefault("annotations", {})["kai-fn/schedule-timeout-seconds"] = "soon"
    return tj


def named_jobset(made: dict[str, Any]) -> dict[str, Any]:
    """The JobSet Trainer makes of the sample runtime for ``made``, as the admission policy names it at CREATE."""
    js = sample("jobset-llama-finetune")
    meta = js["metadata"]
    meta.update(name=made["metadata"]["name"], namespace=made["metadata"]["namespace"])
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        meta.pop(key, None)
    meta["labels"].pop("kai-fn/held", None)
    meta["labels"]["trainer.kubeflow.org/trainjob-name"] = made["metadata"]["name"]
    meta["ownerReferences"][0].update(name=made["metadata"]["name"], uid=made["metadata"]["uid"])
    js["spec"]["suspend"] = False
    return naming.named(js)


def big_jobset(i: int, megabytes: float) -> dict[str, Any]:
    """An unowned JobSet of ``megabytes`` MB: a pod template with that many bytes of empty tolerations."""
    js = sample("jobset-llama-finetune")  # labelled as if named: listed by kai_fn's selector, the worst case
    js["metadata"] = {"name": f"big-{i}", "namespace": BAD, "labels": {"kai-fn/named": "true"}}
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["tolerations"] = [{}] * int(megabytes * MB / 3)
    js["spec"]["suspend"] = True
    return js


def post(url: str, event: Any) -> requests.Response:
    return requests.post(url, data=event.body, headers=event.headers, timeout=120)


def scrape(url: str) -> dict[str, float]:
    text = requests.get(f"{url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}" if s.labels else "")
            out[key] = s.value
    return out


def api_calls(before: dict[str, float], after: dict[str, float]) -> Counter[str]:
    calls: Counter[str] = Counter()
    for key, value in after.items():
        if key.startswith("kai_fn_api_calls_total{") and (n := int(value - before.get(key, 0))):
            labels = dict(p.split("=", 1) for p in key[key.index("{") + 1:-1].split(","))
            calls[f"{labels.get('verb')} {labels.get('resource')}"] += n
    return calls


def time_to_gang(bed: Bed, url: str, namespace: str, name: str, timeout: float = 600.0) -> float:
    """Creates a good TrainJob, posts its add as the adapter would, and waits for its PodGroup."""
    made = bed.create(trainjob(namespace, name, bad=False))
    started = time.perf_counter()
    answer = post(url, apiserver_event(TRAINJOBS, made, "add", SOURCE))
    answer.raise_for_status()
    podgroup = f"pg-{name}-{made['metadata']['uid']}"
    while not bed.podgroup(namespace, podgroup):
        if time.perf_counter() - started > timeout:
            return float("inf")
        time.sleep(0.01)
    return time.perf_counter() - started


def queue_depth(url: str) -> float:
    return scrape(url).get("kai_fn_work_queue", 0.0)


def hwm_mb(pid: int) -> float:
    """The kernel's high-water mark of the server's largest process (the one that serves, under any server)."""
    peaks = []
    for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]) / 1024)
    return max(peaks, default=0.0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench burst", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bad", type=int, default=500, help="refused TrainJobs in the tenant's namespace")
    parser.add_argument("--big", type=int, default=14, help="unowned JobSets of --big-mb MB each")
    parser.add_argument("--big-mb", type=float, default=1.3)
    args = parser.parse_args(argv)

    started = time.time()
    kubeconfig, ours = cluster_up()
    bed = Bed(kubeconfig)
    try:
        return run(bed, kubeconfig, args, started)
    finally:
        if ours:
            subprocess.run([str(REPO / "run.sh"), "cluster", "down"], cwd=REPO, capture_output=True)


def run(bed: Bed, kubeconfig: Path, args: argparse.Namespace, started: float) -> int:
    for ns in (BAD, GOOD):
        bed.namespace(ns)
    for name in ("queue-default-parent", "queue-team-a", "clustertrainingruntime-torch-kai"):
        bed.create(sample(name))
    log = open(os.devnull, "wb")  # noqa: SIM115 - closed with the process
    fn = FunctionProcess({"KUBECONFIG": str(kubeconfig), **SETTINGS}, log=log).start()
    try:
        assert fn.proc is not None
        pid = fn.proc.pid
        alone = time_to_gang(bed, fn.url, GOOD, "good-alone")
        t0 = time.perf_counter()
        for i in range(args.bad):
            made = bed.create(trainjob(BAD, f"bad-{i}", bad=True))
            bed.create(named_jobset(made))
        for i in range(args.big):
            bed.create(big_jobset(i, args.big_mb))
        seeded = time.perf_counter() - t0
        rss_before = sum(p.memory_info().rss for p in [psutil.Process(pid), *psutil.Process(pid).children(True)]) / MB
        with RssSampler(pid, interval=0.01) as sampler:
            before = scrape(fn.url)
            t1 = time.perf_counter()
            first = post(fn.url, ping_event())
            ping1 = time.perf_counter() - t1
            depth = queue_depth(fn.url)
            other_ns = time_to_gang(bed, fn.url, GOOD, "good-beside")
            same_ns = time_to_gang(bed, fn.url, BAD, "good-behind")
            t2 = time.perf_counter()
            while queue_depth(fn.url) > 0 and time.perf_counter() - t2 < 900:
                time.sleep(0.2)
            drained = time.perf_counter() - t1
            middle = scrape(fn.url)
            t3 = time.perf_counter()
            second = post(fn.url, ping_event())
            ping2 = time.perf_counter() - t3
            after = scrape(fn.url)
            behind_backoff = time_to_gang(bed, fn.url, GOOD, "good-after")
        peak = sampler.peak_total / MB
        hwm = hwm_mb(pid)  # before the stop: the server's processes still exist
    finally:
        fn.stop()
        log.close()

    first_calls, second_calls = api_calls(before, middle), api_calls(middle, after)
    print("## A burst of bad objects beside a good TrainJob (issue 39, item 1)\n")
    print(f"Command: `python -m bench burst --bad {args.bad} --big {args.big} --big-mb {args.big_mb}` "
          f"({time.time() - started:.0f} s with set-up; {platform.node()}, {os.cpu_count()} cores; load average "
          f"{os.getloadavg()[0]:.2f} at the end). Seeding took {seeded:.1f} s.\n")
    print("| | seconds |")
    print("|---|---|")
    print(f"| the good TrainJob alone: event to PodGroup | {alone:.2f} |")
    print(f"| ping 1 (the resync finds {args.bad} refused TrainJobs owed): its answer, HTTP {first.status_code} | "
          f"{ping1:.2f} (work queue then {depth:.0f} deep) |")
    print(f"| a good TrainJob of another namespace, right after: event to PodGroup | {other_ns:.2f} |")
    print(f"| a good TrainJob in the tenant's namespace, behind the burst: event to PodGroup | {same_ns:.2f} |")
    print(f"| ping 1 to an empty work queue | {drained:.1f} |")
    print(f"| ping 2 (the refused back off): its answer, HTTP {second.status_code} | {ping2:.2f} |")
    print(f"| a good TrainJob after ping 2: event to PodGroup | {behind_backoff:.2f} |")
    print()
    print(f"Function RSS (all its processes): {rss_before:.0f} MB before ping 1; peak {peak:.0f} MB "
          f"(sampled every 10 ms); VmHWM of its largest process {hwm:.0f} MB over the whole run.\n")
    print(f"API calls of ping 1 and the passes it queued: {sum(first_calls.values())} "
          f"({', '.join(f'{n} {k}' for k, n in first_calls.most_common(8))}).  ")
    print(f"API calls of ping 2: {sum(second_calls.values())} "
          f"({', '.join(f'{n} {k}' for k, n in second_calls.most_common(8))}).")
    return 0
