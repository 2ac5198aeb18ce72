"""Deployment artefacts: knative/ kustomizations, Dockerfile, .dockerignore, func.yaml.

Renders every kustomization (``kubectl kustomize`` when on PATH, else the small
renderer in ``tests/kustomize.py``; ``KAI_FN_RENDERER=python`` forces the latter)
and checks the objects against the real CRD schemas (``tests.crds``), against
the Kubernetes OpenAPI schemas bundled with ``kubernetes_validate`` (strict,
offline), against Knative Serving's container contract, and against the exact
least-privilege RBAC the function needs. No network is used.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests import crds
from tests import kustomize

REPO = Path(__file__).resolve().parents[2]
KNATIVE = REPO / "knative"
BASE = "base"
BROKER = "overlays/broker"
SCHEDULER_PLUGINS = "overlays/scheduler-plugins"
VARIANTS = (BASE, BROKER, SCHEDULER_PLUGINS)

NAMESPACE = "kai-fn"
FUNCTION = "kai-fn"  # Service, ServiceAccount and ClusterRole name
SOURCE_SA = "kai-fn-source"
IMAGE = "ghcr.io/example/kai-fn"

KUBECTL = shutil.which("kubectl")
USE_KUBECTL = KUBECTL is not None and os.environ.get("KAI_FN_RENDERER", "") != "python"

# Kubernetes versions to validate built-in kinds against: the oldest one that
# Knative 1.22 supports and the newest schemas kubernetes_validate ships.
K8S_VERSIONS = ("1.33", kubernetes_validate.latest_version())

RESERVED_ENV = {"PORT", "K_SERVICE", "K_CONFIGURATION", "K_REVISION"}

# Settings kai_fn reads at start-up, with their documented defaults.
SETTINGS_DEFAULTS = {
    "KAI_DEFAULT_QUEUE": "default-queue",
    "KAI_PODGROUP_FLAVOR": "kai",
    "KAI_FN_RESUME": "true",
    "KAI_FN_NAMESPACES": "",
    "KAI_FN_RUNTIME_CACHE_SECONDS": "30",
    "KAI_FN_MAX_BODY_BYTES": "4194304",
    "KAI_FN_API_TIMEOUT_SECONDS": "5",
    "KAI_FN_LOG_LEVEL": "INFO",
    "KAI_FN_RESYNC_LIMIT": "50",
}

# The exact API calls kai_fn makes: (apiGroup, resource, verb).
COMMON_TRIPLES = {
    ("trainer.kubeflow.org", "trainjobs", "get"),
    ("trainer.kubeflow.org", "trainjobs", "patch"),
    ("trainer.kubeflow.org", "trainjobs", "list"),  # resync (PingSource) only
    ("trainer.kubeflow.org", "trainingruntimes", "get"),
    ("trainer.kubeflow.org", "clustertrainingruntimes", "get"),
    ("jobset.x-k8s.io", "jobsets", "get"),
    ("jobset.x-k8s.io", "jobsets", "patch"),
    ("", "events", "create"),
}
KAI_PODGROUPS = {("scheduling.run.ai", "podgroups", "create")}
SP_PODGROUPS = {("scheduling.x-k8s.io", "podgroups", "create")}
FUNCTION_TRIPLES = {
    BASE: COMMON_TRIPLES | KAI_PODGROUPS,
    BROKER: COMMON_TRIPLES | KAI_PODGROUPS,
    SCHEDULER_PLUGINS: COMMON_TRIPLES | SP_PODGROUPS,
}
SOURCE_TRIPLES = {("trainer.kubeflow.org", "trainjobs", v) for v in ("get", "list", "watch")}

# Knative Serving feature flags (config-features) that are on by default, so
# fields gated behind them may be used.
DEFAULT_ENABLED_FLAGS = {"kubernetes.podspec-volumes-emptydir"}


# --------------------------------------------------------------------------- rendering


@cache
def _render_cached(variant: str) -> str:
    path = KNATIVE / variant
    if USE_KUBECTL:
        done = subprocess.run(
            [KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"kubectl kustomize {variant} failed:\n{done.stderr}"
        return done.stdout
    return yaml.safe_dump_all(kustomize.render(path))


def render(variant: str) -> list[dict[str, Any]]:
    """Fresh objects of one kustomization (callers may mutate them)."""
    return [d for d in yaml.safe_load_all(_render_cached(variant)) if d]


def by_kind(objs: list[dict[str, Any]], kind: str, api_group: str | None = None) -> list[dict[str, Any]]:
    return [
        o
        for o in objs
        if o["kind"] == kind and (api_group is None or o["apiVersion"].rpartition("/")[0] == api_group)
    ]


def one(objs: list[dict[str, Any]], kind: str, name: str, api_group: str | None = None) -> dict[str, Any]:
    found = [o for o in by_kind(objs, kind, api_group) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name!r}, found {len(found)}"
    return found[0]


def ksvc(objs: list[dict[str, Any]], name: str = FUNCTION) -> dict[str, Any]:
    return one(objs, "Service", name, "serving.knative.dev")


def container(svc: dict[str, Any]) -> dict[str, Any]:
    containers = svc["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "a Knative Service here has exactly one container"
    return containers[0]


def env_of(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def knative_services(objs):
    return by_kind(objs, "Service", "serving.knative.dev")


# --------------------------------------------------------------------------- render shape

EXPECTED_KINDS = {
    BASE: {
        ("v1", "Namespace"): 1,
        ("v1", "ServiceAccount"): 2,
        ("rbac.authorization.k8s.io/v1", "ClusterRole"): 3,
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): 3,
        ("serving.knative.dev/v1", "Service"): 1,
        ("sources.knative.dev/v1", "ApiServerSource"): 1,
        ("sources.knative.dev/v1", "PingSource"): 1,
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
    for o in objs:
        if o["kind"] in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert "namespace" not in o["metadata"], o["metadata"]
        else:
            assert o["metadata"].get("namespace") == NAMESPACE, (o["kind"], o["metadata"]["name"])


def test_base_image_is_the_placeholder_set_through_kustomize_images():
    kustomization = yaml.safe_load((KNATIVE / BASE / "kustomization.yaml").read_text())
    assert [i["name"] for i in kustomization["images"]] == [IMAGE]
    name, _, _ = kustomize.split_image(container(ksvc(render(BASE)))["image"])
    assert name == IMAGE
    assert "sha256:" in (KNATIVE / BASE / "kustomization.yaml").read_text(), "no digest-pinning hint"


# --------------------------------------------------------------------------- schemas


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
        for version in K8S_VERSIONS:
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
    for svc in knative_services(render(variant)):
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
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(_template_as_pod(svc), K8S_VERSIONS[0], strict=True)


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
    for kind in ("requests", "limits"):
        assert set(resources.get(kind, {})) >= {"cpu", "memory"}, kind


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
def test_container_concurrency_equals_gunicorn_threads_with_one_worker(variant):
    svc = ksvc(render(variant))
    env = env_of(container(svc))
    assert env["WORKERS"] == "1"
    assert int(env["THREADS"]) >= 1
    assert svc["spec"]["template"]["spec"]["containerConcurrency"] == int(env["THREADS"]) * int(env["WORKERS"])


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


# --------------------------------------------------------------------------- RBAC


def bound_triples(objs: list[dict[str, Any]], sa: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) granted to ServiceAccount ``kai-fn/<sa>`` by ClusterRoleBindings."""
    roles = {r["metadata"]["name"]: r for r in by_kind(objs, "ClusterRole")}
    triples: set[tuple[str, str, str]] = set()
    for binding in by_kind(objs, "ClusterRoleBinding") + by_kind(objs, "RoleBinding"):
        subjects = binding.get("subjects", [])
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa and s["namespace"] == NAMESPACE for s in subjects):
            continue
        assert binding["roleRef"]["kind"] == "ClusterRole"
        role = roles[binding["roleRef"]["name"]]  # KeyError: binding to a missing role
        for rule in role["rules"]:
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        triples.add((group, resource, verb))
    return triples


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_role_uses_a_wildcard(variant):
    for role in by_kind(render(variant), "ClusterRole"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                for value in rule.get(key, []):
                    assert "*" not in value, (role["metadata"]["name"], key, value)


@pytest.mark.parametrize("variant", VARIANTS)
def test_function_is_granted_exactly_the_calls_it_makes(variant):
    assert bound_triples(render(variant), FUNCTION) == FUNCTION_TRIPLES[variant]


@pytest.mark.parametrize("variant", VARIANTS)
def test_source_may_only_get_list_watch_trainjobs(variant):
    assert bound_triples(render(variant), SOURCE_SA) == SOURCE_TRIPLES


@pytest.mark.parametrize("variant", VARIANTS)
def test_bindings_name_existing_service_accounts(variant):
    objs = render(variant)
    sas = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in by_kind(objs, "ServiceAccount")}
    for binding in by_kind(objs, "ClusterRoleBinding"):
        for s in binding["subjects"]:
            assert (s["namespace"], s["name"]) in sas, binding["metadata"]["name"]


@cache
def crd_plurals() -> dict[tuple[str, str], dict[str, Any]]:
    """(group, plural) -> {kind, versions served} for every CRD in ../shared/crds."""
    out = {}
    for path in sorted(crds.CRDS_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                spec = doc["spec"]
                out[(spec["group"], spec["names"]["plural"])] = {
                    "kind": spec["names"]["kind"],
                    "versions": {v["name"] for v in spec["versions"] if v.get("served")},
                }
    return out


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_granted_custom_resource_exists_upstream(variant):
    triples = bound_triples(render(variant), FUNCTION) | bound_triples(render(variant), SOURCE_SA)
    for group, resource, _ in triples:
        if group == "":
            assert resource == "events"
            continue
        assert (group, resource) in crd_plurals(), (group, resource)


# --------------------------------------------------------------------------- sources


@pytest.mark.parametrize(
    "variant,sink",
    [
        (BASE, ("serving.knative.dev/v1", "Service", FUNCTION)),
        (SCHEDULER_PLUGINS, ("serving.knative.dev/v1", "Service", FUNCTION)),
        (BROKER, ("eventing.knative.dev/v1", "Broker", "kai-fn")),
    ],
)
def test_apiserversource_watches_trainjobs_in_labelled_namespaces(variant, sink):
    objs = render(variant)
    (src,) = by_kind(objs, "ApiServerSource")
    spec = src["spec"]
    assert spec["mode"] == "Resource"
    assert spec["namespaceSelector"] == {"matchLabels": {"kai-fn.io/enabled": "true"}}
    assert spec["serviceAccountName"] == SOURCE_SA
    assert [(r["apiVersion"], r["kind"]) for r in spec["resources"]] == [("trainer.kubeflow.org/v1alpha1", "TrainJob")]
    ref = spec["sink"]["ref"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == sink
    assert "namespace" not in ref  # defaults to the source's own namespace
    one(objs, sink[1], sink[2], sink[0].rpartition("/")[0])


def test_watched_kind_is_a_served_version_of_the_trainjob_crd():
    (src,) = by_kind(render(BASE), "ApiServerSource")
    (res,) = src["spec"]["resources"]
    group, version = res["apiVersion"].split("/")
    crd = crd_plurals()[(group, "trainjobs")]
    assert crd["kind"] == res["kind"] and version in crd["versions"]


def test_optional_queue_label_selector_is_documented_but_off():
    text = (KNATIVE / BASE / "apiserversource.yaml").read_text()
    commented = "\n".join(line.strip().lstrip("#").strip() for line in text.splitlines() if line.strip().startswith("#"))
    assert "key: kai.scheduler/queue" in commented and "operator: Exists" in commented
    (src,) = by_kind(render(BASE), "ApiServerSource")
    assert "selector" not in src["spec"]["resources"][0]


@pytest.mark.parametrize("variant", VARIANTS)
def test_pingsource_sends_resync_to_the_service_directly(variant):
    (ping,) = by_kind(render(variant), "PingSource")
    spec = ping["spec"]
    assert spec["schedule"] == "*/5 * * * *"
    assert spec["contentType"] == "application/json"
    assert json.loads(spec["data"]) == {"resync": True}
    ref = spec["sink"]["ref"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == ("serving.knative.dev/v1", "Service", FUNCTION)


# --------------------------------------------------------------------------- broker overlay


def trigger_passes(spec: dict[str, Any], event: dict[str, str]) -> bool:
    """The Trigger's `filters` (exact / any / all / not), as the broker evaluates them."""

    def ev(f: dict[str, Any]) -> bool:
        (dialect, arg), = f.items()
        if dialect == "exact":
            return all(event.get(k) == v for k, v in arg.items())
        if dialect == "any":
            return any(ev(x) for x in arg)
        if dialect == "all":
            return all(ev(x) for x in arg)
        if dialect == "not":
            return not ev(arg)
        raise AssertionError(f"dialect {dialect} not modelled")

    return all(ev(f) for f in spec.get("filters", []))


ADD = "dev.knative.apiserver.resource.add"
UPDATE = "dev.knative.apiserver.resource.update"
DELETE = "dev.knative.apiserver.resource.delete"


@pytest.mark.parametrize(
    "event,delivered",
    [
        ({"type": ADD, "kind": "TrainJob"}, True),
        ({"type": UPDATE, "kind": "TrainJob"}, True),
        ({"type": DELETE, "kind": "TrainJob"}, False),
        ({"type": "dev.knative.apiserver.ref.add", "kind": "TrainJob"}, False),
        ({"type": ADD, "kind": "JobSet"}, False),
        ({"type": ADD}, False),
        ({"type": "dev.knative.sources.ping"}, False),
    ],
    ids=["add", "update", "delete", "reference-mode", "other-kind", "no-kind", "ping"],
)
def test_trigger_delivers_only_trainjob_add_and_update(event, delivered):
    trigger = one(render(BROKER), "Trigger", "kai-fn-trainjobs")
    assert trigger_passes(trigger["spec"], event) is delivered


def test_trigger_legacy_filter_fallback_still_narrows_to_trainjobs():
    trigger = one(render(BROKER), "Trigger", "kai-fn-trainjobs")
    assert trigger["spec"]["filter"] == {"attributes": {"kind": "TrainJob"}}


def _iso_duration_seconds(text: str) -> float:
    m = re.fullmatch(r"PT(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?", text)
    assert m and any(m.groups()), f"not an ISO-8601 duration: {text}"
    return int(m.group(1) or 0) * 60 + float(m.group(2) or 0)


def test_trigger_retries_with_exponential_backoff_into_a_dead_letter_service():
    objs = render(BROKER)
    trigger = one(objs, "Trigger", "kai-fn-trainjobs")
    spec = trigger["spec"]
    one(objs, "Broker", spec["broker"])
    sub = spec["subscriber"]["ref"]
    assert (sub["apiVersion"], sub["kind"], sub["name"]) == ("serving.knative.dev/v1", "Service", FUNCTION)
    delivery = spec["delivery"]
    assert delivery["retry"] >= 3
    assert delivery["backoffPolicy"] == "exponential"
    assert 0 < _iso_duration_seconds(delivery["backoffDelay"]) <= 10
    dls = delivery["deadLetterSink"]["ref"]
    assert dls["kind"] == "Service" and dls["apiVersion"] == "serving.knative.dev/v1"
    assert dls["name"] != FUNCTION
    ksvc(objs, dls["name"])


def _without(objs, *ids):
    return sorted(
        (o for o in objs if kustomize.object_id(o) not in ids), key=lambda o: kustomize.object_id(o)
    )


def test_broker_overlay_changes_only_the_source_sink_and_adds_its_objects():
    base, broker = render(BASE), render(BROKER)
    added = {
        ("eventing.knative.dev", "Broker", NAMESPACE, "kai-fn"),
        ("eventing.knative.dev", "Trigger", NAMESPACE, "kai-fn-trainjobs"),
        ("serving.knative.dev", "Service", NAMESPACE, "kai-fn-dead-letter"),
    }
    assert {kustomize.object_id(o) for o in broker} - {kustomize.object_id(o) for o in base} == added
    expected = render(BASE)
    by_kind(expected, "ApiServerSource")[0]["spec"]["sink"]["ref"] = {
        "apiVersion": "eventing.knative.dev/v1",
        "kind": "Broker",
        "name": "kai-fn",
    }
    assert _without(broker, *added) == _without(expected)


# --------------------------------------------------------------------------- scheduler-plugins overlay


@pytest.mark.parametrize("variant,flavor", [(BASE, "kai"), (BROKER, "kai"), (SCHEDULER_PLUGINS, "scheduler-plugins")])
def test_podgroup_flavor_env(variant, flavor):
    assert env_of(container(ksvc(render(variant))))["KAI_PODGROUP_FLAVOR"] == flavor


@pytest.mark.parametrize(
    "variant,group",
    [(BASE, "scheduling.run.ai"), (BROKER, "scheduling.run.ai"), (SCHEDULER_PLUGINS, "scheduling.x-k8s.io")],
)
def test_podgroup_api_group_granted_matches_the_flavor(variant, group):
    granted = {g for g, r, _ in bound_triples(render(variant), FUNCTION) if r == "podgroups"}
    assert granted == {group}
    assert (group, "podgroups") in crd_plurals()


def test_scheduler_plugins_overlay_changes_only_flavor_env_and_podgroup_group():
    expected = render(BASE)
    for e in container(ksvc(expected))["env"]:
        if e["name"] == "KAI_PODGROUP_FLAVOR":
            e["value"] = "scheduler-plugins"
    one(expected, "ClusterRole", "kai-fn-podgroups")["rules"][0]["apiGroups"] = ["scheduling.x-k8s.io"]
    assert _without(render(SCHEDULER_PLUGINS)) == _without(expected)


# --------------------------------------------------------------------------- the renderer itself


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not on PATH")
@pytest.mark.parametrize("variant", VARIANTS)
def test_python_renderer_agrees_with_kubectl_kustomize(variant):
    done = subprocess.run([KUBECTL, "kustomize", str(KNATIVE / variant)], capture_output=True, text=True, check=True)
    theirs = sorted((d for d in yaml.safe_load_all(done.stdout) if d), key=kustomize.object_id)
    ours = sorted(kustomize.render(KNATIVE / variant), key=kustomize.object_id)
    assert ours == theirs


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


DEPLOY = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  template:
    spec:
      containers:
        - {name: a, image: "example.com/app:1"}
        - {name: b, image: "other.io/x"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r}
rules: []
"""


@pytest.mark.parametrize(
    "images,expected",
    [
        ([{"name": "example.com/app", "newTag": "2"}], "example.com/app:2"),
        ([{"name": "example.com/app", "newName": "reg/app", "digest": "sha256:" + "a" * 64}], "reg/app@sha256:" + "a" * 64),
        ([{"name": "example.com/app", "newName": "reg:5000/app"}], "reg:5000/app:1"),
        ([{"name": "example.com/ap", "newTag": "9"}], "example.com/app:1"),
    ],
    ids=["new-tag", "new-name-and-digest", "new-name-keeps-tag", "no-prefix-match"],
)
def test_renderer_sets_images_by_exact_name(tmp_path, images, expected):
    k = {"resources": ["d.yaml"], "images": images}
    _write(tmp_path, {"d.yaml": DEPLOY, "kustomization.yaml": yaml.safe_dump(k)})
    deploy, _ = kustomize.render(tmp_path)
    a, b = deploy["spec"]["template"]["spec"]["containers"]
    assert (a["image"], b["image"]) == (expected, "other.io/x")


def test_renderer_sets_namespace_on_namespaced_objects_only(tmp_path):
    _write(tmp_path, {"d.yaml": DEPLOY, "kustomization.yaml": "namespace: ns\nresources: [d.yaml]\n"})
    deploy, role = kustomize.render(tmp_path)
    assert deploy["metadata"]["namespace"] == "ns"
    assert "namespace" not in role["metadata"]


PATCHED = """\
resources: [../base]
patches:
  - target: {group: apps, version: v1, kind: Deployment, name: d}
    patch: |-
      - op: test
        path: /spec/template/spec/containers/0/name
        value: %s
      - op: replace
        path: /spec/template/spec/containers/0/image
        value: patched
"""


@pytest.mark.parametrize("guard,ok", [("a", True), ("b", False)], ids=["guard-holds", "guard-fails"])
def test_renderer_applies_json6902_patches_with_test_guards(tmp_path, guard, ok):
    _write(tmp_path, {"base/d.yaml": DEPLOY, "base/kustomization.yaml": "resources: [d.yaml]\n"})
    _write(tmp_path, {"overlay/kustomization.yaml": PATCHED % guard})
    if ok:
        deploy, _ = kustomize.render(tmp_path / "overlay")
        assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "patched"
    else:
        with pytest.raises(kustomize.KustomizeError, match="test"):
            kustomize.render(tmp_path / "overlay")


@pytest.mark.parametrize(
    "kustomization",
    [
        "resources: [d.yaml]\ncommonLabels: {a: b}\n",
        "resources: [https://example.com/x.yaml]\n",
        "resources: [d.yaml]\npatches:\n  - path: p.yaml\n",  # strategic merge
        "resources: [d.yaml]\npatches:\n  - target: {kind: Nope}\n    patch: '[]'\n",
        "resources: [d.yaml, d.yaml]\n",
    ],
    ids=["unsupported-field", "remote-resource", "strategic-merge", "target-matches-nothing", "duplicate"],
)
def test_renderer_refuses_what_it_does_not_support(tmp_path, kustomization):
    _write(tmp_path, {"d.yaml": DEPLOY, "p.yaml": "kind: Deployment\n", "kustomization.yaml": kustomization})
    with pytest.raises(kustomize.KustomizeError):
        kustomize.render(tmp_path)


# --------------------------------------------------------------------------- Dockerfile


@dataclass
class Instruction:
    cmd: str
    args: str
    line: int


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, cmd: str) -> list[Instruction]:
        return [i for i in self.instructions if i.cmd == cmd]


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with their arguments; comments dropped, ``\\`` continuations joined.

    As in Docker, a comment line inside a continuation is dropped and does not
    end it; the escape character is the default backslash.
    """
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if not pending:
            start = n
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        joined = " ".join(p for p in pending if p)
        pending = []
        cmd, _, args = joined.partition(" ")
        out.append(Instruction(cmd.upper(), args.strip(), start))
    assert not pending, "Dockerfile ends inside a line continuation"
    return out


def _substitute(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""), text)


def stages(instructions: list[Instruction]) -> list[Stage]:
    global_args: dict[str, str] = {}
    out: list[Stage] = []
    for ins in instructions:
        if ins.cmd == "FROM":
            words = [w for w in ins.args.split() if not w.startswith("--platform")]
            image = _substitute(words[0], global_args)
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            out.append(Stage(image, name))
        elif not out:
            assert ins.cmd == "ARG", f"line {ins.line}: only ARG may precede the first FROM"
            key, _, value = ins.args.partition("=")
            global_args[key.strip()] = value.strip().strip('"')
        else:
            out[-1].instructions.append(ins)
    return out


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), "use the exec (JSON) form"
    return value


def env_pairs(args: str) -> dict[str, str]:
    words = shlex.split(args)
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}  # legacy `ENV key value`
    return dict(w.split("=", 1) for w in words)


DOCKERFILE_SAMPLE = """\
# syntax=docker/dockerfile:1
ARG IMG=python:3.11-slim
FROM ${IMG} AS b
RUN a \\
    # a comment inside a continuation
    && b

FROM $IMG
ENV A=1 \\
    B="two words"
CMD ["x", "--y"]
"""


def test_dockerfile_parser_joins_continuations_and_resolves_from_args():
    ins = parse_dockerfile(DOCKERFILE_SAMPLE)
    assert [(i.cmd, i.line) for i in ins] == [("ARG", 2), ("FROM", 3), ("RUN", 4), ("FROM", 8), ("ENV", 9), ("CMD", 11)]
    assert ins[2].args == "a && b"
    first, final = stages(ins)
    assert (first.image, first.name, final.image, final.name) == ("python:3.11-slim", "b", "python:3.11-slim", None)
    assert env_pairs(final.all("ENV")[0].args) == {"A": "1", "B": "two words"}
    assert exec_form(final.all("CMD")[0].args) == ["x", "--y"]


@cache
def dockerfile() -> list[Stage]:
    return stages(parse_dockerfile((REPO / "Dockerfile").read_text()))


def final_stage() -> Stage:
    return dockerfile()[-1]


def final_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in final_stage().all("ENV"):
        env.update(env_pairs(ins.args))
    return env


def test_dockerfile_is_multi_stage_with_a_slim_python_final_stage():
    all_stages = dockerfile()
    assert len(all_stages) >= 2
    assert re.fullmatch(r"python:3\.11-slim(@sha256:[0-9a-f]{64})?", final_stage().image), final_stage().image
    assert all_stages[0].image == final_stage().image, "the venv must be built on the final stage's interpreter"


def test_dockerfile_final_stage_runs_as_numeric_non_root_matching_the_service():
    users = final_stage().all("USER")
    assert users, "no USER in the final stage"
    uid, _, gid = users[-1].args.partition(":")
    assert uid.isdigit() and int(uid) != 0
    assert not gid or gid.isdigit()
    sc = container(ksvc(render(BASE)))["securityContext"]
    assert sc["runAsUser"] == int(uid)
    if gid:
        assert sc.get("runAsGroup", int(gid)) == int(gid)


def test_dockerfile_exposes_the_service_port():
    exposed = {p for ins in final_stage().all("EXPOSE") for p in ins.args.split()}
    port = container(ksvc(render(BASE)))["ports"][0]["containerPort"]
    assert exposed == {str(port)} == {"8080"}


def test_dockerfile_runs_functions_framework_on_main_handle():
    st = final_stage()
    argv: list[str] = []
    for cmd in ("ENTRYPOINT", "CMD"):
        found = st.all(cmd)
        if found:
            argv += exec_form(found[-1].args)
    assert argv[0] == "functions-framework"
    pairs = dict(zip(argv[1::2], argv[2::2]))
    assert pairs["--target"] == "handle"
    assert pairs["--source"] == "main.py"
    assert pairs.get("--signature-type", "http") == "http"
    assert "--port" not in argv, "the port must come from $PORT, which Knative sets"
    # --source is relative: it must resolve against WORKDIR, where main.py is copied.
    workdir = st.all("WORKDIR")[-1].args
    assert any(shlex.split(c.args)[-1] in (f"{workdir}/main.py", "./", "main.py") for c in st.all("COPY"))


def test_dockerfile_installs_the_pinned_requirements_in_the_builder():
    builder = dockerfile()[0]
    runs = " ".join(i.args for i in builder.all("RUN"))
    assert re.search(r"pip install\b[^&;]*-r\s+\S*requirements\.txt", runs), runs
    assert any("requirements.txt" in c.args for c in builder.all("COPY"))
    reqs = [
        line.split("#")[0].strip()
        for line in (REPO / "requirements.txt").read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    assert reqs and all(re.fullmatch(r"[A-Za-z0-9_.\[\]-]+==[\w.]+", r) for r in reqs), reqs


BUILD_TOOLS = ("gcc", "g++", "build-essential", "make", "clang", "python3-dev", "libc6-dev")


def test_dockerfile_final_stage_installs_no_build_tools():
    for ins in final_stage().all("RUN"):
        words = set(re.split(r"[\s;&|]+", ins.args))
        assert not words & set(BUILD_TOOLS), f"line {ins.line}: {ins.args}"
        assert not re.search(r"\b(apt-get|apt|apk|yum|dnf)\b.*\binstall\b", ins.args), f"line {ins.line}"


def test_dockerfile_adds_no_urls():
    for st in dockerfile():
        for ins in st.all("ADD"):
            assert not re.search(r"\b(https?|git|ftp)://|git@", ins.args), f"line {ins.line}: {ins.args}"


def test_dockerfile_final_stage_copies_only_the_venv_and_the_app():
    copies = []
    for ins in final_stage().all("COPY"):
        words = shlex.split(ins.args)
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        copies.append((tuple(flags), tuple(p.rstrip("/") for p in paths[:-1])))
    assert sorted(copies) == sorted(
        [(("--from=builder",), ("/opt/venv",)), ((), ("main.py",)), ((), ("kai_fn",))]
    ), copies


def test_dockerfile_works_with_a_read_only_root_filesystem():
    env = final_env()
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    mounts = {m["mountPath"] for m in container(ksvc(render(BASE))).get("volumeMounts", [])}
    for var in ("HOME", "TMPDIR"):
        assert any(env[var] == m or env[var].startswith(m + "/") for m in mounts), (var, env[var], mounts)


def test_dockerignore_admits_only_what_the_dockerfile_copies():
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert lines[0] == "*", "exclude everything by default"
    included = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    from_context = set()
    for st in dockerfile():
        for ins in st.all("COPY"):
            words = shlex.split(ins.args)
            if any(w.startswith("--from") for w in words):
                continue
            sources = [w for w in words if not w.startswith("--")][:-1]
            from_context |= {w.rstrip("/") for w in sources}
    assert included == from_context


# --------------------------------------------------------------------------- func.yaml

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


# --------------------------------------------------------------------------- settings cross-check


def _settings_module():
    return pytest.importorskip("kai_fn.function.settings")


def test_manifest_env_covers_exactly_the_function_settings():
    settings = _settings_module()
    aliases = {f.alias for f in settings.Settings.model_fields.values()}
    assert aliases == set(SETTINGS_DEFAULTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_manifest_env_values_are_accepted_by_the_function(variant, monkeypatch):
    settings = _settings_module()
    for name in SETTINGS_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    env = {k: v for k, v in env_of(container(ksvc(render(variant)))).items() if k in SETTINGS_DEFAULTS}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    loaded = settings.load()
    if variant == BASE:
        for name in SETTINGS_DEFAULTS:
            monkeypatch.delenv(name, raising=False)
        assert loaded == settings.load(), "base spells out the function's own defaults"
