"""The admission policy: it suspends exactly the TrainJobs kai_fn will release, and marks them as kai_fn expects.

What the API server does with it is specified on the real testbed (tests/testbed/test_admission.py); here, its
shape, its agreement with the function and the source, and the beta variant.
"""
from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kai_fn.core import keys
from tests.manifests import BASE, FIRST_SERVED, K8S_VERSIONS, KNATIVE, VARIANTS, by_kind, one, render

COMPONENTS = KNATIVE / "components"
POLICY = "kai-fn-auto-suspend"


def policy_objects(component: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((COMPONENTS / component / "policy.yaml").read_text()) if d]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_installs_the_v1_policy_and_its_binding(variant):
    objs = render(variant)
    policy = one(objs, "MutatingAdmissionPolicy", POLICY, "admissionregistration.k8s.io")
    binding = one(objs, "MutatingAdmissionPolicyBinding", POLICY, "admissionregistration.k8s.io")
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"] == {"policyName": POLICY}


def test_policy_acts_on_trainjob_create_only_in_the_namespaces_the_source_watches():
    objs = render(BASE)
    spec = one(objs, "MutatingAdmissionPolicy", POLICY)["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule == {"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"], "resources": ["trainjobs"],
                    "operations": ["CREATE"]}
    sources = by_kind(objs, "ApiServerSource")
    assert sorted(s["metadata"]["name"] for s in sources) == ["kai-fn-podgroups", "kai-fn-trainjobs"]
    for src in sources:
        assert spec["matchConstraints"]["namespaceSelector"] == src["spec"]["namespaceSelector"]


def test_policy_is_a_json_patch_that_fails_closed_and_says_why():
    spec = one(render(BASE), "MutatingAdmissionPolicy", POLICY)["spec"]
    assert [m["patchType"] for m in spec["mutations"]] == ["JSONPatch"]
    assert spec["failurePolicy"] == "Fail"
    text = (COMPONENTS / "admission-policy" / "policy.yaml").read_text()
    assert re.search(r"#.*Fail, not Ignore", text), "the manifest states why Fail was chosen"


def test_policy_writes_the_annotation_the_function_reads():
    spec = one(render(BASE), "MutatingAdmissionPolicy", POLICY)["spec"]
    expression = spec["mutations"][0]["jsonPatch"]["expression"]
    assert expression.count(f'"{keys.AUTO_SUSPENDED_ANNOTATION}"') == 2  # with and without an annotations map
    assert '"/spec/suspend", value: true' in expression


def test_policy_conditions_name_the_keys_the_function_uses():
    conditions = {c["name"]: c["expression"] for c in one(render(BASE), "MutatingAdmissionPolicy", POLICY)["spec"]["matchConditions"]}
    assert set(conditions) == {"not-suspended-by-its-author", "not-queued-by-kueue", "managed-by-trainer"}
    assert f"'{keys.KUEUE_QUEUE_LABEL}'" in conditions["not-queued-by-kueue"]
    assert f"'{keys.TRAINER_MANAGER}'" in conditions["managed-by-trainer"]


def test_v1beta1_component_is_the_v1_policy_under_the_beta_api():
    v1, beta = policy_objects("admission-policy"), policy_objects("admission-policy-v1beta1")
    assert [o["apiVersion"] for o in beta] == ["admissionregistration.k8s.io/v1beta1"] * 2
    for obj in beta:
        obj["apiVersion"] = "admissionregistration.k8s.io/v1"
    assert beta == v1


@pytest.mark.parametrize("component", ["admission-policy", "admission-policy-v1beta1"])
def test_each_policy_component_validates_from_the_kubernetes_version_that_serves_it(component):
    objs = policy_objects(component)
    assert [o["kind"] for o in objs] == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
    for obj in objs:
        first = FIRST_SERVED[(obj["apiVersion"], obj["kind"])]
        kubernetes_validate.validate(obj, first, strict=True)
        kubernetes_validate.validate(obj, K8S_VERSIONS[-1], strict=True)
