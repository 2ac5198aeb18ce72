"""One install path per supported Kubernetes version, each keeping every protection its API server serves.

knative/base is for 1.36+; knative/overlays/kubernetes-1.34 (1.34, 1.35) has the mutating policies under the beta
API; knative/overlays/kubernetes-1.33 drops them, which 1.33 does not serve. Every one keeps the marks policy
(ValidatingAdmissionPolicy, GA since 1.30). The version components put any variant on those versions. Each path is
rendered by ``kubectl kustomize`` where it is on the PATH (tests/manifests.py); tests/testbed/test_kustomize_builds.py
requires it in CI.
"""
from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from kai_fn.core import keys
from tests import kustomize
from tests.manifests import (
    BASE, FIRST_SERVED, INSTALLS, KNATIVE, VARIANTS, VERSION_COMPONENTS, one, render, version_key, with_components,
)

MUTATING = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
VALIDATING = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
MARKS = "kai-fn-own-marks"


def served(obj, version: str) -> bool:
    """Whether the API server of ``version`` serves the object's kind at its apiVersion (kinds older than every
    supported version are served by all)."""
    first = FIRST_SERVED.get((obj["apiVersion"], obj["kind"]))
    return first is None or version_key(first) <= version_key(version)


def is_admission(obj) -> bool:
    return obj["apiVersion"].startswith("admissionregistration.k8s.io/")


def ids(objs) -> set[tuple[str, str, str]]:
    return {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in objs}


@pytest.mark.parametrize("version", INSTALLS)
def test_each_versions_install_holds_only_what_its_api_server_serves(version):
    objs = render(INSTALLS[version])
    assert [(o["apiVersion"], o["kind"]) for o in objs if not served(o, version)] == []
    for obj in objs:
        if is_admission(obj):
            kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", INSTALLS)
def test_each_versions_install_keeps_the_marks_policy(version):
    objs = render(INSTALLS[version])
    policy = one(objs, "ValidatingAdmissionPolicy", MARKS, "admissionregistration.k8s.io")
    binding = one(objs, "ValidatingAdmissionPolicyBinding", MARKS, "admissionregistration.k8s.io")
    assert policy == one(render(BASE), "ValidatingAdmissionPolicy", MARKS)
    assert binding["spec"]["policyName"] == MARKS


@pytest.mark.parametrize("version, mutating", [
    ("1.36", "admissionregistration.k8s.io/v1"),
    ("1.35", "admissionregistration.k8s.io/v1beta1"),
    ("1.34", "admissionregistration.k8s.io/v1beta1"),
    ("1.33", None),
])
def test_the_naming_and_segment_policies_are_there_wherever_the_api_server_serves_them(version, mutating):
    objs = render(INSTALLS[version])
    found = sorted((o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in objs if o["kind"] in MUTATING)
    names = (keys.NAMING_POLICY_NAME, keys.SEGMENT_POLICY_NAME)
    assert found == ([] if mutating is None else sorted((mutating, k, n) for k in MUTATING for n in names))


@pytest.mark.parametrize("version", INSTALLS)
def test_each_versions_install_is_knative_base_but_for_the_mutating_policies_api(version):
    base, objs = render(BASE), render(INSTALLS[version])
    rest = [o for o in objs if o["kind"] not in MUTATING]
    assert sorted(map(kustomize.object_id, rest)) == sorted(kustomize.object_id(o) for o in base
                                                             if o["kind"] not in MUTATING)
    by_id = {kustomize.object_id(o): o for o in base}
    assert [o for o in rest if o != by_id[kustomize.object_id(o)]] == []
    for obj in (o for o in objs if o["kind"] in MUTATING):
        v1 = obj | {"apiVersion": "admissionregistration.k8s.io/v1"}
        assert v1 == by_id[kustomize.object_id(v1)]


def test_the_1_34_install_holds_the_beta_components_policies():
    objs = [o for o in render(INSTALLS["1.34"]) if o["kind"] in MUTATING]
    beta = [d for c in ("admission-policy-v1beta1", "segment-policy-v1beta1")
            for d in yaml.safe_load_all((KNATIVE / "components" / c / "policy.yaml").read_text()) if d]
    assert sorted(map(without_namespace, objs), key=str) == sorted(map(without_namespace, beta), key=str)


def without_namespace(obj):
    """kustomize's namespace on a cluster-scoped policy, which the API server drops (tests/kustomize.py)."""
    return obj | {"metadata": {k: v for k, v in obj["metadata"].items() if k != "namespace"}}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("version", VERSION_COMPONENTS)
def test_the_version_components_put_every_variant_on_that_version_keeping_its_own_patches(variant, version):
    objs = render(with_components(variant, VERSION_COMPONENTS[version]))
    assert [(o["apiVersion"], o["kind"]) for o in objs if not served(o, version)] == []
    one(objs, "ValidatingAdmissionPolicy", MARKS)
    plain = render(variant)
    for obj in (o for o in objs if o["kind"] in MUTATING):
        (same,) = [p for p in plain if p["kind"] == obj["kind"] and p["metadata"]["name"] == obj["metadata"]["name"]]
        assert obj["spec"] == same["spec"], "the variant's own patches of the policy stay"
    assert ids(o for o in objs if not is_admission(o)) == ids(o for o in plain if not is_admission(o))
