"""knative/ as an operator applies it, judged by a real API server: every variant goes through server-side apply with
strict field validation (the Knative, KAI and Trainer CRDs are installed, no Knative controllers run); and the
function's RBAC is tight enough that losing one rule makes it fail safe: 503 (retry later) and nothing written.

Only base is applied for real (the overlays reuse its names, so they are server dry runs, which need base's
Namespace). The ServiceMonitor overlay's own kinds have no CRD on the testbed, and the v1beta1 admission policy is
not served by Kubernetes 1.36's API server; the first is applied without them, the second not at all.
"""
from __future__ import annotations

import copy
import tempfile
import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from kubernetes import client

from kai_fn.core import keys
from kai_fn.local.chain import SEGMENT_POLICY, wait_for_policy, wait_for_segment_policy
from kai_fn.function.migration.jobset_hold import HELD_LABEL
from prometheus_client.parser import text_string_to_metric_families

from tests.ce import resource, send
from tests.conftest import sample_object
from tests.manifests import BASE, BROKER, KNATIVE, SCHEDULER_PLUGINS, render, with_monitoring
from tests.testbed.test_identity_policy import remove_identity_policy
from tests.testbed.kai_fn_install import (
    seed_samples,
    AUDIENCE, NAMESPACE, POLICY, SOURCE, SOURCE_SA, TRAINER, apply, enabled_namespace,
    function_process, rendered,
)
from tests.builders import held_by_0_2

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

# The other real-tier tests apply base's RBAC as field manager kai-fn-tests; an overlay that changes those fields
# would conflict with them, not with anything an operator owns: so forced, as when switching overlays.
STRICT = ("--server-side", "--force-conflicts", "--validate=strict", "--field-manager=kubectl")
# monitoring.coreos.com: the Prometheus Operator's CRDs are not installed (tests/deploy checks their shapes and PromQL)
NOT_ON_TESTBED = {"ServiceMonitor", "PrometheusRule"}


def apply_strict(testbed: LiveCluster, *source: str, dry_run: bool) -> Any:
    return testbed.kubectl("apply", *source, *STRICT, *(("--dry-run=server",) if dry_run else ()), check=False)


def apply_objects(testbed: LiveCluster, objs: list[dict[str, Any]], *extra: str) -> Any:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump_all(objs, f)
        f.flush()
        return testbed.kubectl("apply", "-f", f.name, *extra, check=False)


@pytest.fixture(scope="module")
def base_applied(testbed: LiveCluster) -> Iterator[None]:
    """`kubectl apply -k knative/base` for real; the admission policies it brings are removed afterwards (the hold
    would suspend TrainJobs of other tests' opted-in namespaces)."""
    applied = apply_strict(testbed, "-k", str(KNATIVE / BASE), dry_run=False)
    assert applied.returncode == 0, applied.stderr
    yield
    for plural in ("mutatingadmissionpolicybindings", "mutatingadmissionpolicies"):
        for name in (POLICY, SEGMENT_POLICY):
            testbed.kubectl("delete", f"{plural}.admissionregistration.k8s.io", name, "--ignore-not-found")
    probe = enabled_namespace(testbed, "unload-probe")
    try:  # unloaded, not only deleted: other modules' JobSets in labelled namespaces must not be named
        wait_for_policy(testbed.api, probe, "kai-scheduler", acting=False)
        wait_for_segment_policy(testbed.api, probe, acting=False)
    finally:
        client.CoreV1Api(testbed.api).delete_namespace(probe)
    remove_identity_policy(testbed)  # it would refuse the function's writes in other tests' namespaces


VARIANTS = [
    # (id, variant under knative/ or a kustomization's path, applied as `-k`?)
    (BASE, BASE, True),
    (BROKER, BROKER, True),
    (SCHEDULER_PLUGINS, SCHEDULER_PLUGINS, True),
    ("scheduler-plugins with monitoring", with_monitoring(SCHEDULER_PLUGINS), False),
]


@pytest.mark.parametrize("variant,as_kustomization", [v[1:] for v in VARIANTS], ids=[v[0] for v in VARIANTS])
def test_every_variant_passes_strict_server_side_apply(testbed: LiveCluster, base_applied: None, variant: str,
                                                       as_kustomization: bool):
    if as_kustomization:
        answer = apply_strict(testbed, "-k", str(KNATIVE / variant), dry_run=True)
        expected = len(render(variant))
    else:
        objs = [o for o in render(variant) if o["kind"] not in NOT_ON_TESTBED]
        answer = apply_objects(testbed, objs, *STRICT, "--dry-run=server")
        expected = len(objs)
    assert answer.returncode == 0, answer.stderr
    assert answer.stderr.strip() == "", answer.stderr  # strict validation warns of nothing either
    assert answer.stdout.count("serverside-applied (server dry run)") == expected, answer.stdout


def _typo_in_service(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    svc = next(o for o in objs if o["kind"] == "Service" and o["apiVersion"].startswith("serving.knative.dev"))
    svc["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"  # a typo of imagePullPolicy
    return objs


def _typo_in_clusterrole(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    role = next(o for o in objs if o["kind"] == "ClusterRole")
    role["rules"][0]["verb"] = ["delete"]  # a typo of verbs
    return objs


MUTATIONS = [
    # (id, what is done to base's rendering, the server's refusal or None)
    ("as-rendered", lambda objs: objs, None),
    ("unknown-field-in-a-crd-object", _typo_in_service,
     ".spec.template.spec.containers[0].imagePullPolcy: field not declared in schema"),
    ("unknown-field-in-a-built-in-object", _typo_in_clusterrole, ".rules[0].verb: field not declared in schema"),
]


@pytest.mark.parametrize("mutate,refusal", [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_strict_validation_refuses_a_rendered_object_with_an_unknown_field(testbed: LiveCluster, base_applied: None,
                                                                           mutate, refusal: str | None):
    answer = apply_objects(testbed, mutate(copy.deepcopy(render(BASE))), *STRICT, "--dry-run=server")
    assert (answer.returncode != 0) is (refusal is not None), answer.stderr
    if refusal:
        assert refusal in answer.stderr


# -- RBAC bites ------------------------------------------------------------------------------------------------------

def _without_podgroup_create(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rendered function ClusterRoles, with `create` taken off KAI's podgroups (get stays)."""
    objs = copy.deepcopy(objs)
    role = next(o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "kai-fn-podgroups")
    rule = next(r for r in role["rules"] if r["resources"] == ["podgroups"] and "create" in r["verbs"])
    rule["verbs"] = [v for v in rule["verbs"] if v != "create"]
    return objs


def _as_trainer_would(jobset: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    jobset = copy.deepcopy(jobset)
    jobset["metadata"].pop("uid", None)
    jobset["metadata"]["namespace"] = job["metadata"]["namespace"]
    jobset["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
    return jobset


@pytest.fixture
def scenery(testbed: LiveCluster) -> Iterator[str]:
    """An opted-in namespace with the runtimes and Queues the llama sample needs."""
    seed_samples(testbed)
    ns = enabled_namespace(testbed, "rbac")
    yield ns
    client.CoreV1Api(testbed.api).delete_namespace(ns)


FUNCTION_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"}

RBAC = [
    # (id, ClusterRoles as bound, the function's answer, the calls the real server refused with 403, gang made?)
    ("as-rendered", lambda objs: objs, 200, set(), True),
    ("without-create-on-podgroups", _without_podgroup_create, 503, {("create", "podgroups")}, False),
]


def _refused_calls(url: str) -> set[tuple[str, str]]:
    """(verb, resource) of the calls the API server answered 403, from the function's own metrics."""
    text = urllib.request.urlopen(f"{url.rstrip('/')}/metrics", timeout=10).read().decode()
    return {(s.labels["verb"], s.labels["resource"]) for family in text_string_to_metric_families(text)
            if family.name == "kai_fn_api_calls" for s in family.samples
            if s.name == "kai_fn_api_calls_total" and s.labels["code"] == "403" and s.value > 0}


@pytest.mark.parametrize("roles,status,forbidden,gang", [c[1:] for c in RBAC], ids=[c[0] for c in RBAC])
def test_a_missing_rule_makes_the_function_retry_later_without_writing(testbed: LiveCluster, scenery: str, roles,
                                                                       status: int, forbidden: set, gang: bool):
    objs = client.CustomObjectsApi(testbed.api)
    job = sample_object("trainjob-llama-finetune")
    del job["metadata"]["uid"]
    job["metadata"]["namespace"] = scenery
    job = objs.create_namespaced_custom_object(*TRAINER, scenery, "trainjobs", job)
    jobset = objs.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", scenery, "jobsets",
                                                  _as_trainer_would(held_by_0_2(sample_object("jobset-llama-finetune")), job))
    name = job["metadata"]["name"]
    podgroup = f"pg-{name}-{job['metadata']['uid']}"
    with function_process(testbed, KAI_FN_AUDIENCE=AUDIENCE, KAI_FN_SENDERS=SOURCE) as fn:
        try:
            apply(testbed, roles(rendered(FUNCTION_KINDS)))
            answer = send(fn.url, resource(job), token=testbed.sa_token(NAMESPACE, SOURCE_SA, [AUDIENCE]))
            refused = _refused_calls(fn.url)
        finally:
            apply(testbed, rendered(FUNCTION_KINDS))
    assert answer.status == status, answer.body
    assert refused == forbidden, answer.body
    made = objs.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", scenery, "podgroups")["items"]
    assert [pg["metadata"]["name"] for pg in made] == ([podgroup] if gang else [])
    live_jobset = objs.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", scenery, "jobsets", name)
    # JobSet's own controller writes its status; only a spec change (kai_fn's patch) moves the generation
    assert (live_jobset["metadata"]["generation"] != jobset["metadata"]["generation"]) is gang
    assert (live_jobset["spec"] != jobset["spec"]) is gang
    assert (HELD_LABEL in (live_jobset["metadata"].get("labels") or {})) is not gang
    live = objs.get_namespaced_custom_object(*TRAINER, scenery, "trainjobs", name)
    assert live["metadata"]["resourceVersion"] == job["metadata"]["resourceVersion"], "the TrainJob is never written"
