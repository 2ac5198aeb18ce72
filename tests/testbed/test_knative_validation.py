"""Every Knative object in ``knative/`` passes Knative's own admission code (testbed/knvalidate: SetDefaults, then
Validate(ctx), as Serving's and Eventing's webhooks run them on create), and that code refuses what a CRD schema
lets through, so passing it means something.
"""
from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any
from collections.abc import Callable

import pytest
import yaml

from tests import crds, kustomize
from tests.testbed.gobuild import REPO, built

pytestmark = pytest.mark.testbed

VARIANTS = ["knative/base"] + sorted(str(p.relative_to(REPO)) for p in (REPO / "knative" / "overlays").iterdir()
                                     if p.is_dir())
KNATIVE_KINDS = {"Service", "ApiServerSource", "PingSource", "Broker", "Trigger"}


@pytest.fixture(scope="module")
def knvalidate() -> Path:
    return built("knvalidate")


def validate(binary: Path, objs: list[dict[str, Any]]) -> tuple[int, list[str]]:
    done = subprocess.run([str(binary)], input=yaml.safe_dump_all(objs), capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), f"knvalidate could not read its input:\n{done.stderr}"
    return done.returncode, done.stdout.splitlines()


def rendered(variant: str) -> list[dict[str, Any]]:
    return kustomize.render(REPO / variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_knative_object_passes_knative_validation(knvalidate: Path, variant: str):
    objs = rendered(variant)
    code, lines = validate(knvalidate, objs)
    assert code == 0, "\n".join(line for line in lines if line.startswith("error"))
    validated = sorted(line.split()[1] for line in lines if line.startswith("ok "))
    assert validated == sorted(o["kind"] for o in objs if _knative(o) and o["kind"] in KNATIVE_KINDS)


def _knative(obj: dict[str, Any]) -> bool:
    return obj["apiVersion"].rpartition("/")[0].endswith("knative.dev")


# Where a kind occurs more than once, the one the mutations change.
TARGET = {"ApiServerSource": "kai-fn-trainjobs"}


def _one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = [o for o in objs if o["kind"] == kind and _knative(o)
              and o["metadata"]["name"] == TARGET.get(kind, o["metadata"]["name"])]
    return obj


def _source_mode(objs: list[dict[str, Any]]) -> None:
    _one(objs, "ApiServerSource")["spec"]["mode"] = "Everything"


def _source_resource_api_version(objs: list[dict[str, Any]]) -> None:
    _one(objs, "ApiServerSource")["spec"]["resources"][0]["apiVersion"] = "trainer.kubeflow.org/v1alpha1/trainjobs"


def _trigger_filter_attribute(objs: list[dict[str, Any]]) -> None:
    _one(objs, "Trigger")["spec"]["filter"]["attributes"] = {"Kind": "TrainJob"}


def _trigger_filters_two_dialects(objs: list[dict[str, Any]]) -> None:
    _one(objs, "Trigger")["spec"]["filters"][0]["prefix"] = {"type": "dev.knative.apiserver."}


def _trigger_filters_cesql(objs: list[dict[str, Any]]) -> None:
    _one(objs, "Trigger")["spec"]["filters"].append({"cesql": "kind = = 'TrainJob'"})


def _service_reserved_env(objs: list[dict[str, Any]]) -> None:
    _one(objs, "Service")["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "K_SERVICE", "value": "x"})


def _ping_schedule(objs: list[dict[str, Any]]) -> None:
    _one(objs, "PingSource")["spec"]["schedule"] = "every five minutes"


MUTATIONS: list[tuple[str, str, Callable[[list[dict[str, Any]]], None], str, str]] = [
    # (what is wrong, variant, mutation, kind named in the error, what the error says: its field path as a rule)
    ("ApiServerSource mode not Reference/Resource", "knative/base", _source_mode, "ApiServerSource", "spec.mode"),
    ("ApiServerSource resource apiVersion not group/version", "knative/base", _source_resource_api_version,
     "ApiServerSource", "spec.resources[0].apiVersion"),
    ("Trigger filter attribute not lowercase", "knative/overlays/broker", _trigger_filter_attribute, "Trigger",
     "spec.filter.attributes[Kind]"),
    ("Trigger filter with two dialects", "knative/overlays/broker", _trigger_filters_two_dialects, "Trigger",
     "multiple dialects found"),  # Knative's message for this one names no field
    ("Trigger CESQL filter that does not parse", "knative/overlays/broker", _trigger_filters_cesql, "Trigger",
     "spec.filters[2].cesql"),
    ("Service env var Knative reserves", "knative/base", _service_reserved_env, "Service",
     "spec.template.spec.containers[0].env["),
    ("PingSource schedule not cron", "knative/base", _ping_schedule, "PingSource", "spec.schedule"),
]


@pytest.mark.parametrize(("wrong", "variant", "mutate", "kind", "says"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_knative_validation_refuses_what_the_crd_schema_admits(knvalidate: Path, wrong, variant, mutate, kind, says):
    objs = copy.deepcopy(rendered(variant))
    mutate(objs)
    assert crds.errors(_one(objs, kind)) == [], "the schema alone already refuses this: not a Knative-only check"
    code, lines = validate(knvalidate, objs)
    errors = [line for line in lines if line.startswith("error")]
    assert code == 1
    assert len(errors) == 1 and errors[0].startswith(f"error {kind} ") and says in errors[0], errors
