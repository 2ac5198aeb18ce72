"""samples/chain: schema-valid, and planned by the scheduler-plugins flavor without a problem (the staged runtime's
gang is its trainer stage)."""
from __future__ import annotations

import pytest

from kai_fn.core.models import Runtime, TrainJob
from kai_fn.core.plan import plan
from kai_fn.local.chain import RUNTIMES, sample
from tests import crds

JOB = sample("trainjob-chain.yaml")


@pytest.mark.parametrize("name", [*RUNTIMES, "trainjob-chain.yaml"])
def test_fits_the_crd(name):
    crds.validate(sample(name))


@pytest.mark.parametrize("name, ganged", [(RUNTIMES[0], ["node"]), (RUNTIMES[1], ["node"])])
def test_the_chain_runtimes_plan_a_four_node_gang_of_32_gpus(name, ganged):
    rt = sample(name)
    job = {**JOB, "metadata": {"name": "chain", "namespace": "ns", "uid": "0" * 8},
           "spec": {**JOB["spec"], "runtimeRef": {"name": rt["metadata"]["name"]}}}
    result = plan(TrainJob.model_validate(job), Runtime.model_validate(rt), flavor="scheduler-plugins")
    assert result.actionable and result.problems == ()
    assert [t.replicated_job for t in result.pod_templates] == ganged
    assert (result.min_member, result.min_resources["nvidia.com/gpu"]) == (4, "32")
