"""The admission policy: it names the gang of exactly the JobSets kai_fn gangs, and marks them as kai_fn expects.

What the API server does with it is specified on the real testbed (tests/testbed/test_gang_naming.py); here, its
shape, its agreement with the function and the sources, and the beta variant.
"""
from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kai_fn.core import keys
from kai_fn.function.migration.jobset_hold import HELD_LABEL
from tests.manifests import BASE, FIRST_SERVED, K8S_VERSIONS, KNATIVE, VARIANTS, by_kind, one, render

COMPONENTS = KNATIVE / "components"
POLICY = keys.NAMING_POLICY_NAME


def policy_objects(component: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((COMPONENTS / component / "policy.yaml").read_text()) if d]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_installs_the_v1_policy_and_its_binding(variant):
    objs = render(variant)
    policy = one(objs, "MutatingAdmissionPolicy", POLICY, "admissionregistration.k8s.io")
    binding = one(objs, "MutatingAdmissionPolicyBinding", POLICY, "admissionregistration.k8s.io")
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"] == {"policyName": POLICY}


def test_policy_acts_on_jobset_create_and_update_only_in_the_namespaces_the_sources_watch():
    objs = render(BASE)
    spec = one(objs, "MutatingAdmissionPolicy", POLICY)["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule == {"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"], "resources": ["jobsets"],
                    "operations": ["CREATE", "UPDATE"]}
    sources = by_kind(objs, "ApiServerSource")
    assert len(sources) == 3
    assert {str(s["spec"]["namespaceSelector"]) for s in sources} == {str(spec["matchConstraints"]["namespaceSelector"])}


def test_policy_is_a_json_patch_that_fails_closed_and_says_why():
    spec = one(render(BASE), "MutatingAdmissionPolicy", POLICY)["spec"]
    assert [m["patchType"] for m in spec["mutations"]] == ["JSONPatch", "JSONPatch"]  # the names, then segments
    assert spec["failurePolicy"] == "Fail"
    text = (COMPONENTS / "admission-policy" / "policy.yaml").read_text()
    assert re.search(r"#.*Fail, not Ignore", text), "the manifest states why Fail was chosen"


def test_policy_names_the_gang_never_suspends_and_writes_the_label_the_jobset_source_selects():
    objs = render(BASE)
    expression = one(objs, "MutatingAdmissionPolicy", POLICY)["spec"]["mutations"][0]["jsonPatch"]["expression"]
    assert expression.count(f'"{keys.NAMED_LABEL}"') == 2  # with and without a labels map
    assert expression.count(f'"{keys.KAI_SKIP_PODGROUPER}"') == 3  # on the JobSet (with and without a map), its pods
    assert expression.count(f"\"{keys.KAI_POD_GROUP_ANNOTATION}\"") == 2  # a missing metadata, or annotations map
    assert "suspend" not in expression and HELD_LABEL not in expression
    source = one(objs, "ApiServerSource", "kai-fn-jobsets")
    (resource,) = source["spec"]["resources"]
    assert (resource["apiVersion"], resource["kind"]) == (keys.JOBSET_API, keys.JOBSET_KIND)
    assert resource["selector"] == {"matchLabels": {keys.NAMED_LABEL: "true"}}


def test_policy_names_the_podgroups_as_the_planner_names_them():
    """The naming convention and the waves' rule, as kai_fn/core/plan.py and kai_fn/core/stages.py write them (held
    to each other on a real API server by tests/testbed/test_gang_naming.py)."""
    variables = {v["name"]: v["expression"]
                 for v in one(render(BASE), "MutatingAdmissionPolicy", POLICY)["spec"]["variables"]}
    assert "'pg-' + variables.owner.name + '-' + variables.owner.uid" in variables["gang"]
    assert "'-stage-' + string(w)" in variables["podgroups"]
    assert "'node' in variables.names" in variables["main"] and f"'{keys.ANCESTOR_LABEL}'" in variables["trainers"]
    assert f"d.status == '{keys.READY}'" in variables["steps"]


@pytest.mark.parametrize(("variant", "scheduler"), [(BASE, keys.KAI_SCHEDULER_NAME),
                                                    (KNATIVE / "overlays" / "scheduler-plugins",
                                                     "scheduler-plugins-scheduler")])
def test_policy_conditions_name_the_keys_the_function_uses_and_the_flavors_scheduler(variant, scheduler):
    policy = one(render(variant), "MutatingAdmissionPolicy", POLICY)
    conditions = {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}
    assert list(conditions) == ["controlled-by-a-trainjob", "asks-for-the-scheduler", "not-being-deleted",
                                "named-from-its-create"]
    assert f"'{keys.NAMED_LABEL}' in oldObject.metadata.labels" in conditions["named-from-its-create"]
    assert f"'{keys.TRAINJOB_KIND}'" in conditions["controlled-by-a-trainjob"]
    assert f"'{scheduler}'" in conditions["asks-for-the-scheduler"]


def test_the_scheduler_plugins_overlay_names_the_main_wave_with_coscheduling_s_label():
    policy = one(render(KNATIVE / "overlays" / "scheduler-plugins"), "MutatingAdmissionPolicy", POLICY)
    expression = policy["spec"]["mutations"][0]["jsonPatch"]["expression"]
    assert f'"{keys.SP_POD_GROUP_LABEL}"' in expression and keys.KAI_POD_GROUP_ANNOTATION not in expression
    assert "variables.waves[i] == variables.main" in expression
    steps = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}["steps"]
    assert steps == "variables.jobs.map(j, 1)"  # no placeholders in that flavor: every dependsOn is a new wave


@pytest.mark.parametrize("component", ["admission-policy", "segment-policy"])
def test_v1beta1_component_is_the_v1_policy_under_the_beta_api(component):
    v1, beta = policy_objects(component), policy_objects(f"{component}-v1beta1")
    assert [o["apiVersion"] for o in beta] == ["admissionregistration.k8s.io/v1beta1"] * 2
    for obj in beta:
        obj["apiVersion"] = "admissionregistration.k8s.io/v1"
    assert beta == v1


@pytest.mark.parametrize("component", ["admission-policy", "admission-policy-v1beta1", "segment-policy",
                                       "segment-policy-v1beta1"])
def test_each_policy_component_validates_from_the_kubernetes_version_that_serves_it(component):
    objs = policy_objects(component)
    assert [o["kind"] for o in objs] == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
    for obj in objs:
        first = FIRST_SERVED[(obj["apiVersion"], obj["kind"])]
        kubernetes_validate.validate(obj, first, strict=True)
        kubernetes_validate.validate(obj, K8S_VERSIONS[-1], strict=True)


SEGMENTS = keys.SEGMENT_POLICY_NAME


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_labels_segment_pods_with_their_subgroup(variant):
    objs = render(variant)
    one(objs, "MutatingAdmissionPolicy", SEGMENTS, "admissionregistration.k8s.io")
    assert one(objs, "MutatingAdmissionPolicyBinding", SEGMENTS)["spec"] == {"policyName": SEGMENTS}


def test_segment_policy_acts_on_pod_create_of_marked_templates_in_kai_fns_namespaces_and_fails_closed():
    objs = render(BASE)
    spec = one(objs, "MutatingAdmissionPolicy", SEGMENTS)["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule == {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}
    assert spec["matchConstraints"]["objectSelector"] == {
        "matchExpressions": [{"key": keys.SEGMENT_SIZE_LABEL, "operator": "Exists"}]}
    naming = one(objs, "MutatingAdmissionPolicy", POLICY)["spec"]
    assert spec["matchConstraints"]["namespaceSelector"] == naming["matchConstraints"]["namespaceSelector"]
    assert spec["failurePolicy"] == "Fail" and [m["patchType"] for m in spec["mutations"]] == ["JSONPatch"]


def test_segment_policy_reads_the_keys_kai_fn_writes_and_the_index_labels():
    text = (COMPONENTS / "segment-policy" / "policy.yaml").read_text()
    read = (keys.SEGMENT_SIZE_LABEL, keys.SEGMENT_PARENT_ANNOTATION, keys.SEGMENT_JOB_PODS_ANNOTATION,
            keys.JOB_COMPLETION_INDEX_LABEL, keys.JOBSET_JOB_INDEX_LABEL, keys.KAI_SUBGROUP_LABEL)
    assert [key for key in read if f"'{key}'" not in text and f'"{key}"' not in text] == []
