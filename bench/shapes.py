"""``python -m bench shapes``: every runtime shape Trainer has, through kai_fn and through KAI's podgrouper alone.

One TrainJob per shape and path, on a pool of its own that fits exactly its gang, on one chain testbed (started
here, or the running one). The podgrouper path is a namespace kai_fn does not take: no admission policy, no
kai_fn; KAI's podgrouper groups the JobSet as KAI does. Each TrainJob is watched until every pod of its trainer
replicatedJobs is bound, or ``--deadline`` seconds: bound whole (and how long from creation), partly bound, or
deadlocked (none bound). Prints a Markdown table for BENCHMARKS.md; asserts nothing.

Then Trainer v2.3.0's own runtimes (kai_fn/local/runtimes.py: read from the Go module cache, ``schedulerName`` added
on the runtime, the queue label, numNodes, a GPU request and the pool's nodeSelector on the TrainJob), all side by
side, each path and runtime on a pool of its own that fits the gang and one node more (room for part of a second):
whether a first TrainJob binds whole, and the contention column: how many GPU pods of a second one were bound while
the first held the pool (until KAI said why it waits, and 3 s more), and whether it bound whole once the first was
deleted. ``--only shapes`` or ``--only runtimes`` runs one of the two tables.
"""
from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client

from kai_fn.commands.tables import table
from kai_fn.local.chain import TRAINER, Testbed, kubectl_of
from kai_fn.local.realchain import ChainError, chain_cluster, kai_fn_running
from kai_fn.local.runtimes import Run, as_user, delete_volumes, key_of, official, scenario
from kai_fn.local.shapes import SHAPES, Fared, Shape, submit, watch_fare

PATHS = ("kai-fn", "podgrouper")


def fare(bed: Testbed, shape: Shape, path: str, deadline: float) -> Fared:
    pool = f"b{path[0]}-{shape.name}"[:30]
    bed.delete_nodes(pool)
    bed.nodes(shape.nodes, pool)
    ns = bed.namespace(f"{path[:3]}-{shape.name}"[:24], enabled=path == "kai-fn")
    client.CustomObjectsApi(bed.api).create_namespaced_custom_object(*TRAINER, ns, "trainingruntimes",
                                                                     shape.runtime(ns, pool))
    try:
        return watch_fare(bed, ns, "tj", shape, submit(bed, ns, "tj", shape, shape.name), deadline)
    finally:
        client.CoreV1Api(bed.api).delete_namespace(ns)
        bed.delete_nodes(pool)


def cell(f: Fared) -> str:
    if f.outcome == "bound":
        return f"bound whole, {f.seconds:.1f} s"
    return f"{f.outcome} ({f.bound}/{f.pods} pods bound after the deadline)" if f.pods else f"{f.outcome} (no trainer pod)"


def runtime_runs(bed: Testbed, deadline: float) -> list[tuple[Run, Run]]:
    """Every official runtime through kai_fn and through KAI's podgrouper alone, all at once; (kai_fn, podgrouper)
    per runtime."""
    shipped = official()
    bed.apply([as_user(rt) for rt in shipped.values()])
    spaces = {path: bed.namespace(f"rt-{path[:3]}", enabled=path == "kai-fn") for path in PATHS}
    pools = {(path, name): f"br{path[0]}-{key_of(name)}" for path in PATHS for name in shipped}
    try:
        with ThreadPoolExecutor(len(pools)) as workers:
            list(workers.map(bed.delete_nodes, pools.values()))
            done = {(path, name): workers.submit(scenario, bed, shipped[name], spaces[path], pool, path,
                                                 deadline_s=deadline)
                    for (path, name), pool in pools.items()}
            return [(done["kai-fn", name].result(), done["podgrouper", name].result()) for name in shipped]
    finally:
        for ns in spaces.values():
            client.CoreV1Api(bed.api).delete_namespace(ns)
        with ThreadPoolExecutor(len(pools)) as workers:
            list(workers.map(bed.delete_nodes, pools.values()))
        for ns in spaces.values():
            delete_volumes(bed, ns)
        for name in shipped:
            client.CustomObjectsApi(bed.api).delete_cluster_custom_object(*TRAINER, "clustertrainingruntimes", name)


def bound_cell(r: Run) -> str:
    if r.error:
        return f"error: {r.error.splitlines()[0][:80]}"
    if r.first and r.first.bound:
        return f"yes, {r.first.seconds:.1f} s"
    f = r.first
    return (f"no: {f.placed} of {r.want} GPU pods bound after the deadline ({f.pods} made)" if f and f.pods
            else "no: no GPU pod made")


def contention_cell(r: Run) -> str:
    if not (r.waiting and r.second):
        return "-"
    held = r.waiting.held_at_most
    after = f"bound whole {r.second.seconds:.1f} s after the first went" if r.second.bound else \
        f"{r.second.placed}/{r.want} bound after the first went"
    return f"{'**' if held else ''}{held} of {r.want} GPU pods held while waiting{'**' if held else ''}; {after}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench shapes", description=__doc__)
    parser.add_argument("--deadline", type=float, default=45.0, help="seconds to wait for a gang (default 45)")
    parser.add_argument("--only", choices=("shapes", "runtimes"), help="one of the two tables")
    args = parser.parse_args(argv)
    os.environ.setdefault("KAI_FN_TESTBED_DIR", str(Path.home() / ".cache" / "kai-fn" / "testbed-bench"))
    rows: list[list[str]] = []
    pairs: list[tuple[Run, Run]] = []
    try:
        with chain_cluster(env={"KAI_FN_TESTBED_DIR": os.environ["KAI_FN_TESTBED_DIR"]}) as cluster, \
                kai_fn_running(cluster) as chain:
            bed = Testbed(cluster.kubeconfig, cluster.api, kubectl_of(cluster.kubeconfig))
            if args.only != "runtimes":
                rows = [[s.name, *(cell(fare(bed, s, path, args.deadline)) for path in PATHS)] for s in SHAPES]
            if args.only != "shapes":
                began = time.monotonic()
                pairs = runtime_runs(chain, args.deadline)  # its namespace() waits until the sources watch
                wall = time.monotonic() - began
    except ChainError as error:
        print(f"bench shapes: {error}")
        return 1
    if rows:
        print(f"One TrainJob per shape and path on nodes that fit exactly its gang; deadline {args.deadline:.0f} s; "
              "time from the TrainJob's creation to its last trainer pod bound.\n")
        print("| shape | through kai_fn | KAI's podgrouper alone |\n|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        print()
        print(table(rows, ["SHAPE", "KAI_FN", "PODGROUPER"]))
    if pairs:
        print(f"\nTrainer v2.3.0's runtimes, {len(pairs)} x 2 paths side by side in {wall:.0f} s; deadline "
              f"{args.deadline:.0f} s a phase. Bound whole: the first TrainJob's creation to its last GPU pod bound. "
              "Contention: a second TrainJob while the first holds the pool.\n")
        print("| runtime | GPU pods (numNodes) | through kai_fn: bound whole | contention | "
              "KAI's podgrouper alone: bound whole | contention |\n|---|---|---|---|---|---|")
        for kai, pg in pairs:
            print(f"| {kai.runtime} | {kai.want} ({kai.num_nodes}) | {bound_cell(kai)} | {contention_cell(kai)} | "
                  f"{bound_cell(pg)} | {contention_cell(pg)} |")
    return 0
