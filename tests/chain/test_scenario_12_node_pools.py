"""Scenario 12, a cluster sharded by node pool, through kai_fn and through KAI's podgrouper: the same PodGroup
metadata, so the same shard, priority and preemption delay.

Two pools of kwok nodes: ``np-a`` without KAI's node-pool label (the chain's scheduler, KAI's default shard) and
``np-b`` labelled ``kai.scheduler/node-pool: np-b``, with a second KAI scheduler of its own
(``--partition-label-value=np-b``, a shard as KAI's operator starts one per SchedulingShard), which takes only the
PodGroups, nodes and Queues of that pool. One TrainJob per pool (the one in ``np-b`` from a runtime whose pod template
carries the pool's label, labelled ``project: team``, so that KAI's naming puts it in the pool's Queue ``team-np-b``;
the one in ``np-a`` annotated ``kai.scheduler/preemption-delay``; neither naming a priority), once in a namespace
kai_fn takes and once in one left to KAI's podgrouper, submitted in both orders: each binds in its pool, and kai_fn's
PodGroup carries what the podgrouper's does (node-pool label, ``train``, the delay, the queue)."""
from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from kai_fn.local.chain import POOL_LABEL, RUNTIMES, SCHEDULERS, TRAINER, _bin_env, for_scheduler, sample
from tests.chain.conftest import REPORT, wait_for
from tests.chain.gangs import QUEUE_API, bound, pods, queue, table

NODE_POOL = "kai.scheduler/node-pool"
KAI_START = Path(__file__).resolve().parents[2] / "testbed" / "kai" / "start.sh"


@pytest.fixture(scope="module")
def pool_b_shard(chain_testbed) -> Iterator[None]:
    """A KAI scheduler for node pool ``np-b`` beside the chain's default one, and the pool's Queues (a shard sees only
    Queues labelled with its pool), for this module's tests."""
    kubeconfig = Path(chain_testbed.kubeconfig)
    objs = client.CustomObjectsApi(chain_testbed.api)
    made = [queue("team-parent"), queue("team-np-b", parent="team-parent")]
    for body in made:
        body["metadata"]["labels"] = {NODE_POOL: "np-b"}
        objs.create_cluster_custom_object(*QUEUE_API, body)
    log = (kubeconfig.parent / "kai-scheduler-np-b.log").open("w")
    shard = subprocess.Popen([str(KAI_START), "scheduler", _bin_env(kubeconfig)["kai"], "--partition-label-value=np-b"],
                             env={**os.environ, "KUBECONFIG": str(kubeconfig)}, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield
    finally:
        shard.terminate()
        shard.wait(timeout=30)
        log.close()
        for body in reversed(made):
            objs.delete_cluster_custom_object(*QUEUE_API, body["metadata"]["name"])


def runtime(chain, ns: str, pool: str, labelled: bool) -> None:
    """The chain's runtime, its pods on ``pool``; ``labelled``: its pod template carries KAI's node-pool label."""
    rt = for_scheduler(copy.deepcopy(sample(RUNTIMES[0])), SCHEDULERS["kai"])
    rt["kind"], rt["metadata"] = "TrainingRuntime", {**rt["metadata"], "name": "chain", "namespace": ns}
    for rj in rt["spec"]["template"]["spec"]["replicatedJobs"]:
        template = rj["template"]["spec"]["template"]
        template["spec"]["nodeSelector"] = {POOL_LABEL: pool}
        if labelled:
            template.setdefault("metadata", {}).setdefault("labels", {})[NODE_POOL] = pool
    client.CustomObjectsApi(chain.api).create_namespaced_custom_object(*TRAINER, ns, "trainingruntimes", rt)


def podgroup_of(chain, ns: str) -> dict:
    (group,) = client.CustomObjectsApi(chain.api).list_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", ns, "podgroups")["items"]
    return group


def seen(group: dict) -> dict:
    """What the scenario compares: the shard's label, priority, preemption delay, preemptibility, queue."""
    spec = group["spec"]
    return {"pool": (group["metadata"].get("labels") or {}).get(NODE_POOL), "priority": spec.get("priorityClassName"),
            "delay": spec.get("preemptionDelay"), "preemptibility": spec.get("preemptibility"),
            "queue": spec.get("queue")}


@pytest.mark.parametrize("first", ["kai-fn", "podgrouper"], ids=["kai-fn-first", "podgrouper-first"])
def test_each_pool_takes_its_trainjob_and_both_paths_write_the_same_metadata(chain, pool, namespaces, pool_b_shard,
                                                                            first):
    pool_a, pool_b = pool("np-a"), pool("np-b")
    pool_a.ensure("2x8")
    pool_b.ensure("2x8")
    chain.kubectl("label", "node", "--overwrite", "-l", f"{POOL_LABEL}=np-b", f"{NODE_POOL}=np-b")
    paths = ["kai-fn", "podgrouper"] if first == "kai-fn" else ["podgrouper", "kai-fn"]
    spaces: dict[tuple[str, str], str] = {}
    for path in paths:
        for name, labelled in (("np-a", False), ("np-b", True)):
            ns = namespaces(f"pool-{name[-1]}", enabled=path == "kai-fn")
            runtime(chain, ns, name, labelled)
            notes = {"kai.scheduler/preemption-delay": "30s"} if name == "np-a" else {}
            chain.trainjob(ns, "tj", num_nodes=1, annotations=notes, labels={"project": "team"} if labelled else {})
            spaces[(path, name)] = ns

    for (path, name), ns in spaces.items():
        placed = wait_for(f"{path}'s TrainJob in {name} binds", lambda ns=ns: (ps := pods(chain, ns, "tj"))
                          and len(bound(ps)) == 1 and ps, explain=lambda ns=ns: table(chain, ns))
        assert {p.spec.node_name.rsplit("-", 1)[0] for p in placed} == {name}, (path, name)

    groups = {key: seen(podgroup_of(chain, ns)) for key, ns in spaces.items()}
    assert groups[("kai-fn", "np-b")]["pool"] == "np-b" and groups[("kai-fn", "np-a")]["pool"] is None
    assert {g["priority"] for g in groups.values()} == {"train"}
    assert groups[("kai-fn", "np-a")]["delay"] == "30s" and groups[("kai-fn", "np-b")]["queue"] == "team-np-b"
    for name in ("np-a", "np-b"):
        assert groups[("kai-fn", name)] == groups[("podgrouper", name)], name
    fields = lambda g: ", ".join(f"{k} {v}" for k, v in g.items() if v)  # noqa: E731
    REPORT.append(f"node pools ({first} first): each TrainJob bound in its pool on both paths; kai_fn's PodGroup as "
                  f"the podgrouper's: np-a {fields(groups[('kai-fn', 'np-a')])}; np-b {fields(groups[('kai-fn', 'np-b')])}")
