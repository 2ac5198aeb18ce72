"""On the chain testbed (Trainer's own controllers and webhooks in-process): a TrainJob submitted the ordinary way,
with no ``spec.suspend``, is suspended by the admission policy, gets its JobSet from Trainer still suspended, and is
released by the function with its gang; Trainer then resumes the JobSet with the PodGroup on every pod template.
Nothing is TooLate."""
from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.ce import ping, send
from tests.conftest import sample_object
from tests.testbed.conftest import wait_for
from tests.testbed.kai_fn_install import (
    TRAINER, admission_policy, create_ignoring_conflict, create_trainjob, enabled_namespace, function_process,
)

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

pytestmark = [pytest.mark.chain,
              pytest.mark.skipif(shutil.which("go") is None, reason="chain tier: Go is not installed")]
JOBSET = ("jobset.x-k8s.io", "v1alpha2")


@pytest.fixture(scope="module")
def chain(chain_testbed: LiveCluster) -> LiveCluster:
    """The session's chain testbed (tests/chain/conftest.py), without kai_fn's chain process: this test runs its own."""
    return chain_testbed



def test_a_plainly_submitted_trainjob_is_released_with_its_gang_and_never_too_late(chain: LiveCluster):
    objs = client.CustomObjectsApi(chain.api)
    runtime = sample_object("clustertrainingruntime-torch-kai")
    create_ignoring_conflict(lambda: objs.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime))
    for name in ("queue-default-parent", "queue-team-a"):  # the queue pre-check needs the gang's leaf Queue
        queue = sample_object(name)
        create_ignoring_conflict(lambda: objs.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", queue))
    with admission_policy(chain):
        ns = enabled_namespace(chain, "chain-plain")
        submitted = sample_object("trainjob-llama-finetune")
        del submitted["spec"]["suspend"], submitted["metadata"]["uid"]
        submitted["metadata"]["namespace"] = ns
        job = create_trainjob(chain, ns, submitted)
        assert job["spec"]["suspend"] is True

        def jobset() -> dict[str, Any] | None:
            try:
                return objs.get_namespaced_custom_object(*JOBSET, ns, "jobsets", "llama-finetune")
            except ApiException:
                return None

        assert wait_for("Trainer's JobSet", jobset)["spec"]["suspend"] is True
        with function_process(chain) as fn:  # the resync finds it: no ApiServerSource here
            answer = send(fn.url, ping())
        assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
        podgroup = f"pg-llama-finetune-{job['metadata']['uid']}"
        live = objs.get_namespaced_custom_object(*TRAINER, ns, "trainjobs", "llama-finetune")
        assert live["spec"]["suspend"] is False and live["metadata"]["annotations"]["kai-fn/podgroup"] == podgroup
        resumed = wait_for("Trainer resumes the JobSet", lambda: (js := jobset()) and js["spec"]["suspend"] is False
                           and js)
        templates = [rj["template"]["spec"]["template"]["metadata"] for rj in resumed["spec"]["replicatedJobs"]]
        assert all(t["annotations"]["pod-group-name"] == podgroup for t in templates)
        objs.get_namespaced_custom_object("scheduling.run.ai", "v2alpha2", ns, "podgroups", podgroup)
        reasons = {e.reason for e in client.CoreV1Api(chain.api).list_namespaced_event(ns).items}
        assert "GangCreated" in reasons and "TooLate" not in reasons
