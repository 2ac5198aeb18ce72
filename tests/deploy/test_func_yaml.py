"""func.yaml names the Python function, uses only fields of the func schema and deploys like the kustomize base."""
from __future__ import annotations

import re
from functools import cache
from typing import Any

import yaml

from tests import kustomize
from tests.manifests import BASE, FUNCTION, IMAGE, NAMESPACE, REPO, container, env_of, ksvc, render


# Field names from knative/func schema/func_yaml-schema.json (Function, DeploySpec,
# RunSpec, Options) — the subset a hand-written file may use.
FUNC_TOP = {"specVersion", "name", "domain", "runtime", "registry", "image", "namespace", "created", "invoke",
            "build", "run", "deploy"}
FUNC_DEPLOY = {"namespace", "image", "annotations", "options", "labels", "healthEndpoints", "serviceAccountName",
               "subscriptions"}
FUNC_RUN = {"volumes", "envs", "startTimeout"}


@cache
def func_yaml() -> dict[str, Any]:
    return yaml.safe_load((REPO / "func.yaml").read_text())


def test_func_yaml_names_the_python_function():
    f = func_yaml()
    assert f["name"] == FUNCTION == ksvc(render(BASE))["metadata"]["name"]
    assert f["runtime"] == "python"
    assert re.fullmatch(r"\d+\.\d+\.\d+", f["specVersion"])
    assert f["created"]  # required by func's schema
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", f["name"])


def test_func_yaml_uses_only_fields_of_the_func_schema():
    f = func_yaml()
    assert set(f) <= FUNC_TOP
    assert set(f.get("deploy", {})) <= FUNC_DEPLOY
    assert set(f.get("run", {})) <= FUNC_RUN
    assert set(f["deploy"].get("options", {})) <= {"scale", "resources"}


def test_func_yaml_deploys_like_the_kustomize_base():
    f, svc = func_yaml(), ksvc(render(BASE))
    assert f["deploy"]["namespace"] == NAMESPACE
    assert f["deploy"]["serviceAccountName"] == svc["spec"]["template"]["spec"]["serviceAccountName"]
    assert {e["name"]: e["value"] for e in f["run"]["envs"]} == env_of(container(svc))
    assert f["deploy"]["options"]["resources"]["limits"]["concurrency"] == svc["spec"]["template"]["spec"]["containerConcurrency"]
    assert f["deploy"]["healthEndpoints"]["readiness"] == container(svc)["readinessProbe"]["httpGet"]["path"]
    assert kustomize.split_image(f["image"])[0] == IMAGE
