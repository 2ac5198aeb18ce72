"""samples/chain: schema-valid, and planned without a problem by both flavors, their pods sent to the flavor's
scheduler (the staged runtime's gang is its trainer stage in the scheduler-plugins flavor)."""
from __future__ import annotations

import pytest

from kai_fn.core.models import Runtime, TrainJob
from kai_fn.core.plan import plan
from kai_fn.local.chain import RUNTIMES, SCHEDULERS, for_scheduler, sample
from tests import crds

JOB = sample("trainjob-chain.yaml")


@pytest.mark.parametrize("name", [*RUNTIMES, "trainjob-chain.yaml"])
def test_fits_the_crd(name):
    crds.validate(sample(name))


@pytest.mark.parametrize("flavor", sorted(SCHEDULERS))
def test_the_flat_runtime_plans_a_four_node_gang_of_32_gpus(flavor):
    rt = for_scheduler(sample(RUNTIMES[0]), SCHEDULERS[flavor])
    result = plan(_job(rt), Runtime.model_validate(rt), flavor=flavor)
    assert result.actionable and result.problems == ()
    assert [t.replicated_job for t in result.pod_templates] == ["node"]
    assert result.min_member == 4
    if flavor == "scheduler-plugins":
        assert result.min_resources["nvidia.com/gpu"] == "32"


def test_the_staged_runtime_gangs_its_trainer_stage_in_the_scheduler_plugins_flavor():
    rt = for_scheduler(sample(RUNTIMES[1]), SCHEDULERS["scheduler-plugins"])
    result = plan(_job(rt), Runtime.model_validate(rt), flavor="scheduler-plugins")
    assert result.actionable and result.problems == ()
    assert [t.replicated_job for t in result.pod_templates] == ["node"]
    assert (result.min_member, result.min_resources["nvidia.com/gpu"]) == (4, "32")


def test_the_samples_send_their_pods_to_kai():
    schedulers = {name: {rj["template"]["spec"]["template"]["spec"]["schedulerName"]
                         for rj in sample(name)["spec"]["template"]["spec"]["replicatedJobs"]} for name in RUNTIMES}
    assert schedulers == {name: {"kai-scheduler"} for name in RUNTIMES} and len(schedulers) == 2, schedulers


def _job(rt: dict) -> TrainJob:
    return TrainJob.model_validate({**JOB, "metadata": {"name": "chain", "namespace": "ns", "uid": "0" * 8},
                                    "spec": {**JOB["spec"], "runtimeRef": {"name": rt["metadata"]["name"]}}})
