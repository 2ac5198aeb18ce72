"""``python -m bench segments``: time to a bound gang with and without segments, a burst of TrainJobs each way.

On one chain testbed (started here, or the running one) with kai_fn: a pool of kwok nodes labelled in racks of 4
and blocks of 4 racks (docs/topology.md), a KAI Topology of block / rack / host, and a burst of ``--jobs`` TrainJobs
of 4 pods × 8 GPUs (a node each) submitted at once: first without segments, then (the pool emptied) the same burst
asking for segments of 2 within a rack. The pool has one node per pod of the burst, so only placement differs.
Measured from each TrainJob's creation to its last trainer pod bound (a pod watch): p50, p95, max, and how many
segments ended within one rack. Prints Markdown for BENCHMARKS.md; asserts nothing.
"""
from __future__ import annotations

import argparse
import math
import os
import time
import uuid
from pathlib import Path

from kubernetes import client

from bench.chain import nearest_rank
from kai_fn.core import keys
from kai_fn.local.chain import TRAINER, Chain
from kai_fn.local.podwatch import PodWatch
from kai_fn.local.realchain import ChainError, chain_cluster, kai_fn_running, submit

POOL = "bseg"
RACK, BLOCK, HOST = "topology.kai-fn.testbed/rack", "topology.kai-fn.testbed/block", "kubernetes.io/hostname"
TOPOLOGY_API = ("kai.scheduler", "v1alpha1", "topologies")
PODS = 4


def label(chain: Chain, nodes: int) -> None:
    core = client.CoreV1Api(chain.api)
    for i in range(nodes):
        name = f"{POOL}-{i}"
        core.patch_node(name, {"metadata": {"labels": {RACK: f"r{i // 4}", BLOCK: f"b{i // 16}", HOST: name}}})


def burst(chain: Chain, ns: str, jobs: int, notes: dict[str, str], deadline: float) -> tuple[list[float], int]:
    """Seconds from creation to the last of each gang's pods bound, and how many segments of 2 share a rack."""
    racks = {n.metadata.name: n.metadata.labels.get(RACK) for n in client.CoreV1Api(chain.api).list_node(
        label_selector=f"kai-fn.testbed/pool={POOL}").items}
    with PodWatch(chain.api, ns) as watch:
        created = {}
        for i in range(jobs):
            body = {"apiVersion": "/".join(TRAINER), "kind": "TrainJob",
                    "metadata": {"name": f"tj-{i}", "annotations": notes},
                    "spec": {"runtimeRef": {"name": "chain", "kind": "TrainingRuntime", "apiGroup": TRAINER[0]},
                             "trainer": {"numNodes": PODS}}}
            made = submit(chain.api, ns, body)
            created[made["metadata"]["name"]] = time.monotonic()
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            seen = watch.by_jobset()
            if all(len([p for p in seen.get(name, []) if p.bound_at]) == PODS for name in created):
                break
            time.sleep(0.5)
        seen = watch.by_jobset()
    took, together = [], 0
    for name, at in created.items():
        pods = [p for p in seen.get(name, []) if p.bound_at]
        if len(pods) == PODS:
            took.append(max(p.bound_at for p in pods) - at)
        by_index = sorted(pods, key=lambda p: p.name)
        together += sum(1 for s in range(0, len(by_index), 2) if len({racks.get(p.node) for p in by_index[s:s + 2]}) == 1)
    return took, together


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench segments", description=__doc__)
    parser.add_argument("--jobs", type=int, default=20, help="TrainJobs per burst (default 20)")
    parser.add_argument("--deadline", type=float, default=180.0, help="seconds a burst may take (default 180)")
    args = parser.parse_args(argv)
    os.environ.setdefault("KAI_FN_TESTBED_DIR", str(Path.home() / ".cache" / "kai-fn" / "testbed-bench"))
    nodes = args.jobs * PODS
    rows = []
    try:
        with chain_cluster(env={"KAI_FN_TESTBED_DIR": os.environ["KAI_FN_TESTBED_DIR"]}) as cluster, \
                kai_fn_running(cluster) as chain:
            topology = f"bseg-{uuid.uuid4().hex[:6]}"
            objs = client.CustomObjectsApi(chain.api)
            objs.create_cluster_custom_object(*TOPOLOGY_API, {
                "apiVersion": keys.KAI_TOPOLOGY_API, "kind": keys.TOPOLOGY_KIND, "metadata": {"name": topology},
                "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]}})
            asks = {"without segments": {},
                    "segments of 2 within a rack": {keys.KAI_TOPOLOGY: topology, keys.KAI_SEGMENT_SIZE: "2",
                                                    keys.KAI_SEGMENT_REQUIRED: RACK}}
            try:
                for what, notes in asks.items():
                    chain.delete_nodes(POOL)
                    chain.nodes(f"{nodes}x8", POOL)
                    label(chain, nodes)
                    ns = chain.namespace("bseg")
                    chain.runtime(ns, pool=POOL)
                    began = time.monotonic()
                    took, together = burst(chain, ns, args.jobs, notes, args.deadline)
                    rows.append((what, took, together, time.monotonic() - began))
                    client.CoreV1Api(chain.api).delete_namespace(ns)
                    chain.delete_nodes(POOL, deadline_s=120)
            finally:
                objs.delete_cluster_custom_object(*TOPOLOGY_API, topology)
    except ChainError as error:
        print(f"bench segments: {error}")
        return 1
    print(f"{args.jobs} TrainJobs of {PODS} pods x 8 GPUs at once, on {nodes} nodes in racks of 4; creation to the "
          "last trainer pod bound.\n")
    print("| ask | bound | p50 | p95 | max | segments of 2 within one rack | burst |\n|---|---|---|---|---|---|---|")
    for what, took, together, wall in rows:
        cells = [f"{nearest_rank(took, q):.1f} s" if took else "-" for q in (50, 95)]
        print(f"| {what} | {len(took)}/{args.jobs} | {cells[0]} | {cells[1]} | "
              f"{max(took) if took else math.nan:.1f} s | {together}/{args.jobs * PODS // 2} | {wall:.0f} s |")
    return 0
