"""The bare API baseline, run as its own process (as the function's API client is): the ``kubernetes`` client
configured by :func:`kai_fn.kube.api_client`, doing the calls kai_fn makes, from ``threads`` threads.

``python -m bench.bare_api SPEC.json`` prints one JSON object. SPEC: ``kubeconfig``, ``threads``, ``seconds``,
``mix`` (``write``: GET jobset, GET trainjob, GET podgroup (404), POST podgroup, POST event, i.e. an unauthenticated
new TrainJob's work with its JobSet named at admission, as the function does it (``bench/run.py`` prints the
function's own calls beside); ``read``: GET jobset, GET trainjob), ``timeout`` and ``jobs`` (``namespace``,
``name``, ``podgroup``, ``event``, prepared by the caller).
"""
from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from typing import Any

from kubernetes.client.api.core_v1_api import CoreV1Api
from kubernetes.client.api.custom_objects_api import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from kai_fn.core import keys
from kai_fn.kube import api_client

JOBSET = keys.JOBSET_API.split("/")
PODGROUP = keys.KAI_PODGROUP_API.split("/")
TRAINER = (keys.TRAINER_GROUP, keys.TRAINER_VERSION)


def main(spec_path: str) -> int:
    with open(spec_path, encoding="utf-8") as file:
        spec = json.load(file)
    jobs: list[dict[str, Any]] = spec["jobs"]
    threads, seconds, timeout, mix = int(spec["threads"]), float(spec["seconds"]), float(spec["timeout"]), spec["mix"]
    client = api_client(spec["kubeconfig"])
    api, core = CustomObjectsApi(client), CoreV1Api(client)
    ticket = itertools.count()
    start = threading.Barrier(threads + 1)
    go = threading.Event()
    lock = threading.Lock()
    totals = {"calls": 0, "units": 0, "errors": 0}
    deadline = [0.0]

    def write(job: dict[str, Any]) -> int:
        ns, name = job["namespace"], job["name"]
        api.get_namespaced_custom_object(*JOBSET, ns, "jobsets", name, _request_timeout=timeout)
        api.get_namespaced_custom_object(*TRAINER, ns, "trainjobs", name, _request_timeout=timeout)
        try:
            api.get_namespaced_custom_object(*PODGROUP, ns, "podgroups", job["podgroup"]["metadata"]["name"],
                                             _request_timeout=timeout)
        except ApiException as error:
            if error.status != 404:  # the answer the function gets for a gang not made yet
                raise
        api.create_namespaced_custom_object(*PODGROUP, ns, "podgroups", job["podgroup"],
                                            field_manager=keys.FIELD_MANAGER, _request_timeout=timeout)
        core.create_namespaced_event(ns, job["event"], field_manager=keys.FIELD_MANAGER, _request_timeout=timeout)
        return 5

    def read(job: dict[str, Any]) -> int:
        ns, name = job["namespace"], job["name"]
        api.get_namespaced_custom_object(*JOBSET, ns, "jobsets", name, _request_timeout=timeout)
        api.get_namespaced_custom_object(*TRAINER, ns, "trainjobs", name, _request_timeout=timeout)
        return 2

    unit = write if mix == "write" else read
    warm = jobs[0]

    def worker() -> None:
        calls = units = errors = 0
        try:  # open this thread's pooled connection before the clock starts
            api.get_namespaced_custom_object(*JOBSET, warm["namespace"], "jobsets", warm["name"], _request_timeout=timeout)
        except Exception:
            pass
        start.wait()
        go.wait()
        while time.perf_counter() < deadline[0]:
            i = next(ticket)
            if i >= len(jobs):
                break
            try:
                calls += unit(jobs[i])
                units += 1
            except Exception:
                errors += 1
        with lock:
            totals["calls"] += calls
            totals["units"] += units
            totals["errors"] += errors

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    start.wait()  # every thread is connected
    cpu0 = time.process_time()
    began = time.perf_counter()
    deadline[0] = began + seconds
    go.set()
    for t in pool:
        t.join(seconds + timeout * 4 + 5)
    elapsed = time.perf_counter() - began
    cpu = time.process_time() - cpu0
    print(json.dumps({**totals, "threads": threads, "mix": mix, "seconds": round(elapsed, 3),
                      "calls_per_s": round(totals["calls"] / elapsed, 1) if elapsed > 0 else 0.0,
                      "client_cpu_ms_per_call": round(cpu * 1000 / totals["calls"], 3) if totals["calls"] else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
