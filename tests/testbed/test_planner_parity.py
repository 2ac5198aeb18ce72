"""kai_fn's planner against Trainer's own code (testbed/oracle, linked against github.com/kubeflow/trainer/v2).

For the samples and for generated shapes (tests/testbed/shapes.py), the pod sets (name, count, per-pod requests),
``minMember`` and ``minResources`` kai_fn computes must equal what Trainer's runtime framework and its coscheduling
plugin compute; quantities are compared as numbers.
"""
from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any
from collections.abc import Iterator

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from kai_fn.core.models import Runtime, TrainJob, parse
from kai_fn.core.plan import plan
from kai_fn.core.quantity import Quantity
from tests.crds import CRDS_DIR
from tests.testbed import shapes
from tests.testbed.gobuild import REPO, LineOracle

pytestmark = pytest.mark.testbed

SAMPLES = REPO / "samples" / "cluster"


class Oracle(LineOracle):
    """Trainer's runtime framework, one process for the whole module."""

    def __call__(self, job: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
        return self.ask({"trainJob": job, "runtime": with_policy(runtime, {"coscheduling": {}})})


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    o = Oracle("oracle", "--crds", str(CRDS_DIR))
    yield o
    o.close()


def with_policy(runtime: dict[str, Any], policy: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(runtime)
    out["spec"]["podGroupPolicy"] = policy
    return out


def numbers(resources: dict[str, str]) -> dict[str, Decimal]:
    """Quantities as numbers; a zero entry says nothing, so it is dropped on both sides."""
    values = {k: Quantity.parse(v).value for k, v in resources.items()}
    return {k: v for k, v in values.items() if v != 0}


def trainer_view(answer: dict[str, Any]) -> dict[str, Any]:
    return {
        "podSets": [(ps["name"], ps["count"], numbers(ps["requests"])) for ps in answer["podSets"]],
        "minMember": answer["podGroup"]["minMember"],
        "minResources": numbers(answer["podGroup"]["minResources"]),
    }


def kai_fn_view(job: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """The arithmetic over every pod set, as the kai flavor's root minMember/minResources hold it (the
    scheduler-plugins flavor gangs only the trainer stage of a dependsOn runtime; Trainer's plugin gangs all)."""
    p = plan(parse(TrainJob, job), parse(Runtime, with_policy(runtime, {"kai": {}})), flavor="kai")
    return {
        "podSets": [(ps.name, ps.count, numbers(ps.requests)) for ps in p.pod_sets],
        "minMember": p.min_member,
        "minResources": numbers(p.min_resources),
    }


def sample_pairs() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    docs = [yaml.safe_load(p.read_text()) for p in sorted(SAMPLES.glob("*.yaml"))]
    runtimes = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"].endswith("TrainingRuntime")}
    pairs = []
    for job in (d for d in docs if d["kind"] == "TrainJob"):
        ref = job["spec"]["runtimeRef"]
        pairs.append((job["metadata"]["name"], job, runtimes[(ref.get("kind", "ClusterTrainingRuntime"), ref["name"])]))
    return pairs


@pytest.mark.parametrize(("name", "job", "runtime"), sample_pairs(), ids=[p[0] for p in sample_pairs()])
def test_samples_plan_as_trainer_computes(oracle: Oracle, name: str, job: dict[str, Any], runtime: dict[str, Any]):
    assert kai_fn_view(job, runtime) == trainer_view(oracle(job, runtime))


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes.case())
def test_generated_shapes_plan_as_trainer_computes(oracle: Oracle, shape: tuple[dict[str, Any], dict[str, Any]]):
    job, runtime = shape
    assert kai_fn_view(job, runtime) == trainer_view(oracle(job, runtime))
