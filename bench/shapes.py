"""``python -m bench shapes``: every runtime shape Trainer has, through kai_fn and through KAI's podgrouper alone.

One TrainJob per shape and path, on a pool of its own that fits exactly its gang, on one chain testbed (started
here, or the running one). The podgrouper path is a namespace kai_fn does not take: no admission policy, no
kai_fn; KAI's podgrouper groups the JobSet as KAI does. Each TrainJob is watched until every pod of its trainer
replicatedJobs is bound, or ``--deadline`` seconds: bound whole (and how long from creation), partly bound, or
deadlocked (none bound). Prints a Markdown table for BENCHMARKS.md; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from kubernetes import client

from kai_fn.commands.tables import table
from kai_fn.local.chain import TRAINER, Testbed, kubectl_of
from kai_fn.local.realchain import ChainError, chain_cluster, kai_fn_running
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench shapes", description=__doc__)
    parser.add_argument("--deadline", type=float, default=45.0, help="seconds to wait for a gang (default 45)")
    args = parser.parse_args(argv)
    os.environ.setdefault("KAI_FN_TESTBED_DIR", str(Path.home() / ".cache" / "kai-fn" / "testbed-bench"))
    try:
        with chain_cluster(env={"KAI_FN_TESTBED_DIR": os.environ["KAI_FN_TESTBED_DIR"]}) as cluster, \
                kai_fn_running(cluster):
            bed = Testbed(cluster.kubeconfig, cluster.api, kubectl_of(cluster.kubeconfig))
            rows = [[s.name, *(cell(fare(bed, s, path, args.deadline)) for path in PATHS)] for s in SHAPES]
    except ChainError as error:
        print(f"bench shapes: {error}")
        return 1
    print(f"One TrainJob per shape and path on nodes that fit exactly its gang; deadline {args.deadline:.0f} s; "
          "time from the TrainJob's creation to its last trainer pod bound.\n")
    print("| shape | through kai_fn | KAI's podgrouper alone |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    print(table(rows, ["SHAPE", "KAI_FN", "PODGROUPER"]))
    return 0
