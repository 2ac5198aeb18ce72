"""What Eventing's controller hands Knative's ApiServerSource adapter, computed from knative/base's manifests
(kai_fn/local/adapter.py); the real adapter runs with it in tests/testbed/test_adapter_*.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kai_fn.local.adapter import (adapter_env, guess_resource, load, reflectors, selector_string, source_config,
                                  source_spec)
from kai_fn.local.process import REPO

BASE = REPO / "knative" / "base"


@pytest.mark.parametrize("kind, resource", [
    ("TrainJob", "trainjobs"), ("PodGroup", "podgroups"), ("Ingress", "ingresses"), ("Policy", "policies"),
    ("Pod", "pods"),
])
def test_kind_becomes_the_resource_kubernetes_guesses(kind, resource):
    assert guess_resource(kind) == resource


@pytest.mark.parametrize("selector, text", [
    (None, ""),
    ({}, ""),
    ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
    ({"matchExpressions": [{"key": "kai.scheduler/queue", "operator": "Exists"}]}, "kai.scheduler/queue"),
    ({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, "!x"),
    ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["b", "a"]}],
      "matchLabels": {"app": "kai-fn"}}, "app=kai-fn,t in (a,b)"),
    ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]}, "t notin (a)"),
])
def test_label_selector_is_written_as_apimachinery_writes_it(selector, text):
    assert selector_string(selector) == text


def test_trainjob_source_config_is_the_controllers():
    spec = load(BASE / "apiserversource.yaml")
    assert source_config(spec, ["team-b", "team-a"]) == {
        "namespaces": ["team-a", "team-b"], "allNamespaces": False, "mode": "Resource",
        "resources": [{"gvr": {"Group": "trainer.kubeflow.org", "Version": "v1alpha1", "Resource": "trainjobs"}}],
    }
    assert (spec.name, spec.namespace, spec.service_account, spec.audience) == \
        ("kai-fn-trainjobs", "kai-fn", "kai-fn-source", "kai-fn")


def test_podgroup_source_keeps_its_label_selector():
    spec = load(BASE / "apiserversource-podgroups.yaml")
    assert source_config(spec, ["team-a"])["resources"] == [{
        "gvr": {"Group": "scheduling.run.ai", "Version": "v2alpha2", "Resource": "podgroups"},
        "selector": "app.kubernetes.io/managed-by=kai-fn"}]
    assert reflectors(spec, ["team-a", "team-b"]) == {
        "scheduling.run.ai/v2alpha2, Resource=podgroups/team-a",
        "scheduling.run.ai/v2alpha2, Resource=podgroups/team-b"}


@pytest.mark.parametrize("selector, all_namespaces", [(None, False), ({}, True), ({"matchLabels": {"a": "b"}}, False)])
def test_only_an_empty_namespace_selector_watches_every_namespace(selector, all_namespaces):
    manifest = {"metadata": {"name": "s"}, "spec": {"resources": [{"apiVersion": "v1", "kind": "Pod"}],
                                                    "namespaceSelector": selector}}
    spec = source_spec(manifest)
    assert spec.all_namespaces is all_namespaces
    assert spec.mode == "Reference"  # the API's default
    assert reflectors(spec, ["x"]) == ({"/v1, Resource=pods"} if all_namespaces else {"/v1, Resource=pods/x"})


@pytest.mark.parametrize("oidc", [True, False])
def test_env_names_the_oidc_identity_knative_makes_only_with_oidc(oidc):
    spec = load(BASE / "apiserversource.yaml")
    env = adapter_env(spec, sink="http://127.0.0.1:1", kubeconfig=Path("/k"), namespaces=["a"], profiling_port=9,
                      oidc=oidc)
    assert json.loads(env["K_SOURCE_CONFIG"])["namespaces"] == ["a"]
    assert (env["NAMESPACE"], env["NAME"], env["K_SINK"], env["PROFILING_PORT"]) == \
        ("kai-fn", "kai-fn-trainjobs", "http://127.0.0.1:1", "9")
    oidc_env = {k: env[k] for k in ("K_AUDIENCE", "K_OIDC_SERVICE_ACCOUNT") if k in env}
    assert oidc_env == ({"K_AUDIENCE": "kai-fn",
                         "K_OIDC_SERVICE_ACCOUNT": "kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource"}
                        if oidc else {})
