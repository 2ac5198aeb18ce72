"""The chain's kwok stages (testbed/kwok/stages): a Running pod annotated ``kai-fn.testbed/complete-after`` goes
Succeeded that long after it runs, one duration per Job completion index when the value is a list; an initializer
pod (Trainer's replicatedJob names) at once without it; any other pod keeps running. What the staged scenarios need
to run an initializer longer than KAI's staleness grace period and to finish a trainer's pods at different times."""
from __future__ import annotations

import uuid

from kubernetes import client

from tests.chain.conftest import wait_for

AFTER = "kai-fn.testbed/complete-after"
INITIALIZER = {"jobset.sigs.k8s.io/replicatedjob-name": "dataset-initializer"}


def job(name: str, *, completions: int = 1, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(completion_mode="Indexed", completions=completions, parallelism=completions,
                              template=client.V1PodTemplateSpec(
                                  metadata=client.V1ObjectMeta(labels=labels, annotations=annotations),
                                  spec=client.V1PodSpec(restart_policy="Never",
                                                        node_selector={"kai-fn.testbed/pool": "gpu-node"},
                                                        containers=[client.V1Container(name="c", image="none")]))))


def test_pods_complete_after_their_annotated_time_per_index_and_others_keep_running(chain_testbed):
    core, batch = client.CoreV1Api(chain_testbed.api), client.BatchV1Api(chain_testbed.api)
    ns = f"kwok-stages-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        for j in (job("staggered", completions=3, annotations={AFTER: "1s,20s"}),
                  job("init-now", labels=INITIALIZER), job("init-later", labels=INITIALIZER, annotations={AFTER: "5s"}),
                  job("forever")):
            batch.create_namespaced_job(ns, j)

        def phases() -> dict[str, str]:
            """Phase by <job>-<completion index> (pods are named so)."""
            return {p.metadata.name.rsplit("-", 1)[0]: p.status.phase for p in core.list_namespaced_pod(ns).items}

        first = wait_for("indexes 0 and 2, and the initializer without a time, complete",
                         lambda: (ps := phases()) and all(ps.get(k) == "Succeeded" for k in
                                                          ("staggered-0", "staggered-2", "init-now-0")) and ps,
                         explain=lambda: str(phases()))
        assert first["staggered-1"] == "Running" and first["forever-0"] == "Running"
        wait_for("index 1 and the initializer with a time complete later",
                 lambda: (ps := phases())["staggered-1"] == "Succeeded" and ps["init-later-0"] == "Succeeded",
                 deadline_s=60, explain=lambda: str(phases()))
        assert phases()["forever-0"] == "Running"
    finally:
        core.delete_namespace(ns)
