"""The reliability checks themselves can fail: each overwrite or early PodGroup reference is caught."""
from __future__ import annotations

import pytest

from tests.conftest import JOBSET, KAI_PG, TRAINER, seed
from tests.reliability import (
    INCONSISTENT, POD_GROUP, SKIP, UNTOUCHED, first_pod, make_job, plant, rewrite, safety_violations, state_of,
)

TAMPERING = {
    "a container image changed": (JOBSET, "JobSet", lambda o: first_pod(o)["spec"]["containers"][0].update(
        image="other")),
    "another owner's JobSet annotation replaced": (JOBSET, "JobSet", lambda o: o["metadata"].update(
        annotations={SKIP: "true"})),
    "another owner's TrainJob annotation dropped": (TRAINER, "TrainJob", lambda o: o["metadata"]["annotations"].pop(
        "example.com/owner")),
    "TrainJob resumed without the marker": (TRAINER, "TrainJob", lambda o: o["spec"].update(suspend=False)),
    "the pre-existing PodGroup changed": (KAI_PG, "PodGroup", lambda o: o["spec"].update(minMember=1)),
}


@pytest.mark.parametrize("tampering", TAMPERING, ids=list(TAMPERING))
def test_the_state_check_calls_any_overwrite_inconsistent(api, tampering):
    api_version, kind, change = TAMPERING[tampering]
    job = make_job("rel-checks", "tampered", "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f", extras=True,
                   preexisting_podgroup=True)
    plant(api, [job])
    assert state_of(api, job) == (UNTOUCHED, [])
    rewrite(api, api_version, kind, job.namespace, job.pg_name if kind == "PodGroup" else job.name, change)
    state, problems = state_of(api, job)
    assert state == INCONSISTENT and problems


def test_the_safety_check_catches_a_jobset_naming_a_podgroup_before_it_exists(api):
    job = make_job("rel-checks", "early", "2d3e4f5a-6b7c-4d8e-9f0a-1b2c3d4e5f6a")
    since = plant(api, [job])
    rewrite(api, JOBSET, "JobSet", job.namespace, job.name, lambda o: first_pod(o).setdefault(
        "metadata", {}).setdefault("annotations", {}).update({POD_GROUP: job.pg_name}))
    seed(api, {"apiVersion": KAI_PG, "kind": "PodGroup", "metadata": {"name": job.pg_name, "namespace": job.namespace},
               "spec": {"minMember": 4, "queue": "team-a"}})
    (violation,) = safety_violations(api, job, since)
    assert f"names PodGroup {job.pg_name}, created at" in violation
