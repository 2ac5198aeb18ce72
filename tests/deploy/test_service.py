"""The rendered variants hold the expected objects; the Knative Service meets Serving's contract and the settings."""
from __future__ import annotations

from collections import Counter

import pytest
import yaml

from kai_fn import settings
from tests import kustomize
from tests.manifests import (
    ADMISSION_KINDS, BASE, BROKER, FUNCTION, IMAGE, KNATIVE, NAMESPACE, RESERVED_ENV, SCHEDULER_PLUGINS, SETTINGS_DEFAULTS,
    VARIANTS,
    container, env_of, knative_services, ksvc, one, render,
)


# --------------------------------------------------------------------------- render shape

EXPECTED_KINDS = {
    BASE: {
        ("v1", "Namespace"): 1,
        ("v1", "ServiceAccount"): 2,
        ("rbac.authorization.k8s.io/v1", "ClusterRole"): 4,  # + kai-fn-marks, for operators who release
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): 3,
        ("rbac.authorization.k8s.io/v1", "Role"): 1,  # the heartbeat's one Lease
        ("rbac.authorization.k8s.io/v1", "RoleBinding"): 1,
        ("coordination.k8s.io/v1", "Lease"): 1,  # the resync's heartbeat
        ("serving.knative.dev/v1", "Service"): 1,
        ("networking.k8s.io/v1", "NetworkPolicy"): 1,  # who may reach the function's pods
        ("sources.knative.dev/v1", "ApiServerSource"): 3,  # TrainJobs; held JobSets; kai_fn's PodGroups
        ("sources.knative.dev/v1", "PingSource"): 1,
        ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): 2,  # the JobSet hold; segment pods
        ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): 2,
        # kai_fn's marks are kai_fn's; what kai_fn's own ServiceAccount may write
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): 2,
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): 2,
    },
}
EXPECTED_KINDS[SCHEDULER_PLUGINS] = dict(EXPECTED_KINDS[BASE])
EXPECTED_KINDS[BROKER] = {
    **EXPECTED_KINDS[BASE],
    ("serving.knative.dev/v1", "Service"): 2,  # + the dead-letter sink
    ("eventing.knative.dev/v1", "Broker"): 1,
    ("eventing.knative.dev/v1", "Trigger"): 1,
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_render_has_expected_kinds_and_counts(variant):
    counts = Counter((o["apiVersion"], o["kind"]) for o in render(variant))
    assert dict(counts) == EXPECTED_KINDS[variant]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_namespaced_object_is_in_the_kai_fn_namespace(variant):
    objs = render(variant)
    one(objs, "Namespace", NAMESPACE)
    kinds = {o["kind"] for o in objs if o["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding")}
    assert kinds - ADMISSION_KINDS >= {"ServiceAccount", "Service", "ApiServerSource", "PingSource"}, kinds
    for o in objs:
        if o["kind"] in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert "namespace" not in o["metadata"], o["metadata"]
        elif o["kind"] in ADMISSION_KINDS:
            pass  # cluster-scoped, but kustomize does not know it: see tests/kustomize.py
        else:
            assert o["metadata"].get("namespace") == NAMESPACE, (o["kind"], o["metadata"]["name"])


def test_base_image_is_the_placeholder_set_through_kustomize_images():
    kustomization = yaml.safe_load((KNATIVE / BASE / "kustomization.yaml").read_text())
    assert [i["name"] for i in kustomization["images"]] == [IMAGE]
    name, _, _ = kustomize.split_image(container(ksvc(render(BASE)))["image"])
    assert name == IMAGE
    assert "sha256:" in (KNATIVE / BASE / "kustomization.yaml").read_text(), "no digest-pinning hint"


# --------------------------------------------------------------------------- Knative Serving contract


def all_services():
    for variant in VARIANTS:
        for svc in knative_services(render(variant)):
            yield pytest.param(svc, id=f"{variant}:{svc['metadata']['name']}")


@pytest.mark.parametrize("svc", list(all_services()))
def test_service_has_exactly_one_container_port(svc):
    ports = container(svc).get("ports", [])
    assert len(ports) == 1
    assert ports[0]["containerPort"] == 8080
    assert ports[0].get("name") in ("http1", "h2c")


@pytest.mark.parametrize("svc", list(all_services()))
def test_service_sets_no_reserved_env_var(svc):
    assert not RESERVED_ENV & set(env_of(container(svc)))


@pytest.mark.parametrize("svc", list(all_services()))
def test_service_requests_and_limits_cpu_and_memory(svc):
    resources = container(svc)["resources"]
    assert set(resources.get("requests", {})) >= {"cpu", "memory"}
    assert set(resources.get("limits", {})) >= {"cpu", "memory"}


@pytest.mark.parametrize("svc", list(all_services()))
def test_service_container_is_locked_down(svc):
    sc = container(svc)["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc.get("privileged") in (None, False)
    assert sc.get("runAsUser", 1) != 0


@pytest.mark.parametrize("svc", list(all_services()))
def test_service_is_not_exposed_outside_the_cluster(svc):
    assert svc["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"


@pytest.mark.parametrize("variant", VARIANTS)
def test_function_readiness_probe_is_http_get_healthz_on_the_serving_port(variant):
    probe = container(ksvc(render(variant)))["readinessProbe"]
    assert probe["httpGet"]["path"] == "/healthz"
    # Knative only allows the serving port; leaving it out means exactly that.
    assert probe["httpGet"].get("port") in (None, 8080, "http1")


@pytest.mark.parametrize("variant", VARIANTS)
def test_container_concurrency_equals_the_servers_threads(variant):
    """One process (kai_fn/function/serve.py) with KAI_FN_THREADS threads: queue-proxy sends no more at once."""
    svc = ksvc(render(variant))
    env = env_of(container(svc))
    assert "WORKERS" not in env and "THREADS" not in env, "functions-framework's gunicorn settings: nothing reads them"
    assert svc["spec"]["template"]["spec"]["containerConcurrency"] == int(env["KAI_FN_THREADS"]) >= 1


@pytest.mark.parametrize("variant", VARIANTS)
def test_function_timeout_and_scale_bounds_are_set(variant):
    svc = ksvc(render(variant))
    tspec = svc["spec"]["template"]["spec"]
    assert 0 < tspec["timeoutSeconds"] <= 600  # Knative's default max-revision-timeout
    ann = svc["spec"]["template"]["metadata"]["annotations"]
    assert ann["autoscaling.knative.dev/min-scale"] == "1", "min-scale 1 avoids cold starts on the watch path"
    assert int(ann["autoscaling.knative.dev/max-scale"]) >= 1


@pytest.mark.parametrize("variant", VARIANTS)
def test_function_runs_as_its_own_service_account(variant):
    objs = render(variant)
    svc = ksvc(objs)
    assert svc["spec"]["template"]["spec"]["serviceAccountName"] == FUNCTION
    one(objs, "ServiceAccount", FUNCTION)


@pytest.mark.parametrize("variant", VARIANTS)
def test_read_only_root_has_a_writable_tmp(variant):
    tspec = ksvc(render(variant))["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in container(ksvc(render(variant))).get("volumeMounts", [])}
    assert "/tmp" in mounts
    volumes = {v["name"]: v for v in tspec["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


@pytest.mark.parametrize("name,default", sorted(SETTINGS_DEFAULTS.items()))
def test_base_sets_every_setting_as_env_with_its_default(name, default):
    env = env_of(container(ksvc(render(BASE))))
    assert env[name] == default


# --------------------------------------------------------------------------- settings cross-check


def test_manifest_env_covers_exactly_the_function_settings():
    aliases = {f.alias for f in settings.Settings.model_fields.values()}
    assert aliases == set(SETTINGS_DEFAULTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_manifest_env_values_are_accepted_by_the_function(variant, monkeypatch):
    for name in SETTINGS_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    env = {k: v for k, v in env_of(container(ksvc(render(variant)))).items() if k in SETTINGS_DEFAULTS}
    assert set(env) == set(SETTINGS_DEFAULTS), "every variant spells out every setting"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    loaded = settings.load()
    if variant == BASE:
        for name in SETTINGS_DEFAULTS:
            monkeypatch.delenv(name, raising=False)
        # Two settings differ from the function's defaults on purpose: base authenticates delivery, and serves
        # /metrics apart from the event port (docs/security.md).
        assert loaded == settings.load(KAI_FN_AUDIENCE="kai-fn", KAI_FN_METRICS_PORT=9095), \
            "base spells out the function's own defaults"
