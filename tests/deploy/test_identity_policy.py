"""The policy ``kai-fn-identity`` (knative/components/identity-policy) agrees with what it guards: the Service's
ServiceAccount and placeholder image, and every write kai_fn's RBAC grants. Its behaviour on a real API server:
tests/testbed/test_identity_policy.py."""
from __future__ import annotations

import pytest

from kai_fn import settings
from tests.manifests import NAMESPACE, VARIANTS, by_kind, container, env_of, ksvc, one, render

POLICY = "kai-fn-identity"
WRITES = {"create", "update", "patch", "delete", "deletecollection", "*"}
# Writes that change no tenant's state: reviewing a token, and the virtual resource of the marks policy.
NOT_STATE = {("authentication.k8s.io", "tokenreviews"), ("kai-fn.io", "marks")}


def policy(variant: str) -> dict:
    return one(render(variant), "ValidatingAdmissionPolicy", POLICY)


def variable(pol: dict, name: str) -> str:
    return next(v["expression"] for v in pol["spec"]["variables"] if v["name"] == name)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_policy_admits_the_image_the_function_puts_on_its_placeholders(variant):
    image = env_of(container(ksvc(render(variant))))["KAI_FN_PLACEHOLDER_IMAGE"]
    assert variable(policy(variant), "PLACEHOLDER_IMAGE") == repr(image) == repr(settings.DEFAULT_PLACEHOLDER_IMAGE)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_policy_judges_the_service_account_the_function_runs_as_and_is_bound_to_deny(variant):
    objs = render(variant)
    account = ksvc(objs)["spec"]["template"]["spec"]["serviceAccountName"]
    (condition,) = policy(variant)["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{account}'"
    binding = one(objs, "ValidatingAdmissionPolicyBinding", POLICY)
    assert binding["spec"]["validationActions"] == ["Deny"] and policy(variant)["spec"]["failurePolicy"] == "Fail"


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_write_kai_fns_cluster_roles_grant_is_judged_by_the_policy(variant):
    objs = render(variant)
    bound = {b["roleRef"]["name"] for b in by_kind(objs, "ClusterRoleBinding")
             if any(s.get("name") == "kai-fn" and s.get("namespace") == NAMESPACE for s in b["subjects"])}
    granted = {(group, resource) for role in by_kind(objs, "ClusterRole") if role["metadata"]["name"] in bound
               for rule in role["rules"] if WRITES & set(rule["verbs"])
               for group in rule["apiGroups"] for resource in rule["resources"]}
    judged = {(group, rule_resource) for rule in policy(variant)["spec"]["matchConstraints"]["resourceRules"]
              for group in rule["apiGroups"] for rule_resource in rule["resources"]
              if {"CREATE", "UPDATE", "DELETE"} <= set(rule["operations"])}
    assert granted - NOT_STATE and not (granted - NOT_STATE) - judged, (granted - NOT_STATE) - judged
