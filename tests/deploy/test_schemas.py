"""Every rendered object validates, strictly and offline, against the real CRD schemas or the Kubernetes OpenAPI."""
from __future__ import annotations

import json
import re
from typing import Any

import kubernetes_validate
import pytest

from tests import crds
from tests.manifests import (
    BASE, BROKER, DEFAULT_ENABLED_FLAGS, FIRST_SERVED, K8S_VERSIONS, VARIANTS, container, knative_services, ksvc, render,
    version_key,
)


def _walk_declared(obj: Any, schema: dict[str, Any], path: str, out: list[str]) -> None:
    """Fields the CRD schema does not declare, and fields behind a Serving feature flag.

    The API server keeps unknown fields under ``x-kubernetes-preserve-unknown-fields``
    and the controller then ignores them, so a typo there passes plain schema
    validation. A node with declared ``properties`` is a struct: any other key is
    reported. A node without ``properties`` is a free-form map (labels, filter maps).
    """
    desc = schema.get("description", "")
    flag = re.match(r"This is accessible behind a feature flag - (\S+)", desc)
    if flag and flag.group(1) not in DEFAULT_ENABLED_FLAGS:
        out.append(f"{path}: behind Knative feature flag {flag.group(1)} (off by default)")
    if isinstance(obj, dict):
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        for key, value in obj.items():
            sub = f"{path}.{key}" if path else key
            if props is not None and key in props:
                _walk_declared(value, props[key], sub, out)
            elif isinstance(addl, dict):
                _walk_declared(value, addl, sub, out)
            elif props is not None:
                out.append(f"{sub}: not declared by the schema")
            # else: a free-form map (no declared properties), any key is fine
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            _walk_declared(item, schema["items"], f"{path}[{i}]", out)


def undeclared_fields(obj: dict[str, Any]) -> list[str]:
    schema = crds._schemas()[(obj["apiVersion"], obj["kind"])]
    out: list[str] = []
    # apiVersion, kind and ObjectMeta are the API server's, not the CRD's (some
    # Knative CRDs do not list them); metadata keys are checked separately.
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    _walk_declared(body, schema, "", out)
    return out


KNOWN_METADATA = {"name", "namespace", "labels", "annotations"}


def all_objects():
    for variant in VARIANTS:
        for o in render(variant):
            yield pytest.param(variant, o, id=f"{variant}:{o['kind']}/{o['metadata']['name']}")


@pytest.mark.parametrize("variant,obj", list(all_objects()))
def test_every_object_validates_against_its_schema(variant, obj):
    """Knative kinds against the real CRD; built-in kinds against Kubernetes' own (strict)."""
    assert set(obj["metadata"]) <= KNOWN_METADATA
    if obj["apiVersion"].rpartition("/")[0].endswith("knative.dev"):
        assert crds.known(obj), f"no CRD for {obj['apiVersion']} {obj['kind']}"
        crds.validate(obj)
        assert undeclared_fields(obj) == []
    else:
        first = FIRST_SERVED.get((obj["apiVersion"], obj["kind"]), K8S_VERSIONS[0])
        for version in sorted({first, *K8S_VERSIONS}, key=version_key):
            if version_key(version) >= version_key(first):
                kubernetes_validate.validate(obj, version, strict=True)


def _template_as_pod(svc: dict[str, Any]) -> dict[str, Any]:
    template = svc["spec"]["template"]
    spec = {
        k: v
        for k, v in template["spec"].items()
        # Knative's RevisionSpec fields on top of the PodSpec.
        if k not in ("containerConcurrency", "timeoutSeconds", "responseStartTimeoutSeconds", "idleTimeoutSeconds")
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": svc["metadata"]["name"], **template.get("metadata", {})},
        "spec": json.loads(json.dumps(spec)),
    }
    # Knative lets probes leave out the port and fills in the serving port;
    # a core Pod requires it, so do what Knative does.
    for c in pod["spec"]["containers"]:
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            for handler in ("httpGet", "tcpSocket", "grpc"):
                action = c.get(probe, {}).get(handler)
                if action is not None and "port" not in action:
                    action["port"] = c["ports"][0]["containerPort"]
    return pod


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("k8s", K8S_VERSIONS)
def test_knative_service_template_is_a_valid_core_pod_spec(variant, k8s):
    """The Serving CRD leaves parts loose; the pod it stamps out must be a strict core Pod."""
    services = knative_services(render(variant))
    assert len(services) == (2 if variant == BROKER else 1)  # the broker variant adds its dead-letter sink
    for svc in services:
        kubernetes_validate.validate(_template_as_pod(svc), k8s, strict=True)


@pytest.mark.parametrize(
    "mutate,problem",
    [
        (lambda s: s["spec"].__setitem__("templte", {}), "spec.templte: not declared"),
        (
            lambda s: container(s).__setitem__("readinessProb", {}),
            "containers[0].readinessProb: not declared",
        ),
        (
            lambda s: s["spec"]["template"]["spec"].__setitem__("nodeSelector", {"a": "b"}),
            "kubernetes.podspec-nodeselector",
        ),
    ],
    ids=["typo-at-spec", "typo-in-container", "feature-flagged-field"],
)
def test_schema_strictness_check_catches_what_plain_validation_misses(mutate, problem):
    svc = ksvc(render(BASE))
    mutate(svc)
    assert any(problem in p for p in undeclared_fields(svc)), undeclared_fields(svc)


def test_pod_check_rejects_an_invalid_container_field():
    svc = ksvc(render(BASE))
    container(svc)["securityContext"]["runAsNonroot"] = True  # wrong case
    with pytest.raises(kubernetes_validate.ValidationError, match=r"\('runAsNonroot' was unexpected\)"):
        kubernetes_validate.validate(_template_as_pod(svc), K8S_VERSIONS[0], strict=True)
