"""Deployment artefacts (knative/, Dockerfile, func.yaml), shared by tests/deploy: variants, rendering, expectations.

Renders every kustomization (``kubectl kustomize`` when on PATH, else the small
renderer in ``tests/kustomize.py``; ``KAI_FN_RENDERER=python`` forces the latter)
and checks the objects against the real CRD schemas (``tests.crds``), against
the Kubernetes OpenAPI schemas bundled with ``kubernetes_validate`` (strict,
offline), against Knative Serving's container contract, and against the exact
least-privilege RBAC the function needs. No network is used.
"""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from tests import crds
from tests import kustomize

REPO = Path(__file__).resolve().parent.parent
KNATIVE = REPO / "knative"
BASE = "base"
BROKER = "overlays/broker"
SCHEDULER_PLUGINS = "overlays/scheduler-plugins"
VARIANTS = (BASE, BROKER, SCHEDULER_PLUGINS)
# One install path per supported Kubernetes version (README.md, "Install"); each newer version's is knative/base.
INSTALLS = {"1.33": "overlays/kubernetes-1.33", "1.34": "overlays/kubernetes-1.34", "1.35": "overlays/kubernetes-1.34",
            "1.36": BASE}
VERSION_COMPONENTS = {"1.33": "components/kubernetes-1.33", "1.34": "components/kubernetes-1.34"}

NAMESPACE = "kai-fn"
FUNCTION = "kai-fn"  # Service, ServiceAccount and ClusterRole name
SOURCE_SA = "kai-fn-source"
IMAGE = "ghcr.io/example/kai-fn"

KUBECTL = shutil.which("kubectl")
USE_KUBECTL = KUBECTL is not None and os.environ.get("KAI_FN_RENDERER", "") != "python"

# Kubernetes versions to validate built-in kinds against: the oldest one that
# Knative 1.22 supports and the newest schemas kubernetes_validate ships.
K8S_VERSIONS = ("1.33", kubernetes_validate.latest_version())
# Kinds newer than the oldest of those, with the first version that serves them. kustomize's built-in schema does
# not know them either, so it sets a namespace on them (the API server drops it: they are cluster-scoped).
ADMISSION_KINDS = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}
FIRST_SERVED = {
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): "1.30",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): "1.30",
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): "1.36",
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): "1.36",
    ("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicy"): "1.34",
    ("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicyBinding"): "1.34",
}


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))

RESERVED_ENV = {"PORT", "K_SERVICE", "K_CONFIGURATION", "K_REVISION"}

# Settings kai_fn reads at start-up, with their documented defaults.
SETTINGS_DEFAULTS = {
    "KAI_DEFAULT_QUEUE": "default-queue",
    "KAI_PODGROUP_FLAVOR": "kai",
    "KAI_FN_RESUME": "true",
    "KAI_FN_NAMESPACES": "",
    "KAI_FN_RUNTIME_CACHE_SECONDS": "30",
    "KAI_FN_NAMESPACE_CACHE_SECONDS": "10",
    "KAI_FN_MAX_BODY_BYTES": "4194304",
    "KAI_FN_API_TIMEOUT_SECONDS": "5",
    "KAI_FN_LOG_LEVEL": "INFO",
    "KAI_FN_RESYNC_LIMIT": "50",
    "KAI_FN_BACKGROUND_WORKERS": "4",
    "KAI_FN_AUDIENCE": "kai-fn",
    "KAI_FN_SENDERS": "",
    "KAI_FN_QUEUE_CHECK": "enforce",
    "KAI_FN_SCHEDULE_TIMEOUT_SECONDS": "",
    "KAI_FN_ON_TIMEOUT": "event",
    "KAI_FN_STALENESS_GRACE_PERIOD": "-1s",
    "KAI_FN_PLACEHOLDER_IMAGE": "registry.k8s.io/pause:3.10",
    "KAI_FN_HEARTBEAT_LEASE": "kai-fn/kai-fn-resync",
    "KAI_NODEPOOL_LABEL_KEY": "kai.scheduler/node-pool",
    "KAI_DEFAULTS_CONFIGMAP": "",
    "KAI_FN_METRICS_PORT": "9095",
    "KAI_FN_THREADS": "8",
    "KAI_FN_REQUEST_SECONDS": "30",
    "KAI_FN_RESYNC_BACKOFF_SECONDS": "60",
}

# The exact API calls kai_fn makes: (apiGroup, resource, verb).
COMMON_TRIPLES = {
    ("trainer.kubeflow.org", "trainjobs", "get"),
    ("trainer.kubeflow.org", "trainjobs", "patch"),  # the migration (earlier TrainJob gate); ON_TIMEOUT=suspend
    ("trainer.kubeflow.org", "trainjobs", "list"),  # resync (PingSource) only
    ("trainer.kubeflow.org", "trainingruntimes", "get"),
    ("trainer.kubeflow.org", "clustertrainingruntimes", "get"),
    ("jobset.x-k8s.io", "jobsets", "get"),
    ("jobset.x-k8s.io", "jobsets", "patch"),  # the one patch that decides a held JobSet
    ("jobset.x-k8s.io", "jobsets", "list"),  # resync: the held JobSets
    ("", "events", "create"),
    ("", "namespaces", "list"),  # which opted in (kai_fn/function/optin.py), by the label kai-fn.io/enabled=true
    ("", "pods", "list"),  # the gang's status: are its pods on nodes?
    ("authentication.k8s.io", "tokenreviews", "create"),  # KAI_FN_AUDIENCE set (knative/base sets it)
    ("coordination.k8s.io", "leases", "patch"),  # the resync's heartbeat, its one Lease (a Role, resourceNames)
}
HEARTBEAT_LEASE = "kai-fn-resync"
# create, get; patch: the gang's marks (kai-fn/bound, kai-fn/timed-out); list: the resync's released gangs
KAI_PODGROUPS = {("scheduling.run.ai", "podgroups", v) for v in ("create", "get", "patch", "list")} | {
    ("scheduling.run.ai", "queues", "list"),  # the queue pre-check
    ("", "pods", "create"),  # placeholders holding MPI's launcher's place in its nodes' gang (kai_fn/core/reserve.py)
    ("", "pods", "delete"),  # ... deleted once JobSet made the launcher, or the JobSet stopped
    ("", "pods", "get"),  # ... and a pod of a placeholder's name read before it is taken as kai_fn's (core/adopt.py)
    ("kai.scheduler", "topologies", "get"),  # the levels a placement names (kai_fn/core/segments.py)
    ("scheduling.k8s.io", "priorityclasses", "list"),  # does a class named exist? (kai_fn/plan_inputs.py)
}
SP_PODGROUPS = {("scheduling.x-k8s.io", "podgroups", v) for v in ("create", "get", "patch", "list")}
# Granted, never called: the marks policy (knative/components/marks-policy) asks the authorizer whether the writer
# may `write` `marks.kai-fn.io`, a name no API serves.
ADMISSION_CHECKED = {("kai-fn.io", "marks", "write")}
FUNCTION_TRIPLES = {
    BASE: COMMON_TRIPLES | KAI_PODGROUPS | ADMISSION_CHECKED,
    BROKER: COMMON_TRIPLES | KAI_PODGROUPS | ADMISSION_CHECKED,
    SCHEDULER_PLUGINS: COMMON_TRIPLES | SP_PODGROUPS | ADMISSION_CHECKED,
}
WATCH = ("get", "list", "watch")
# The sources' account watches TrainJobs, the held JobSets and kai_fn's PodGroups of the flavor.
SOURCE_TRIPLES = {
    variant: {("trainer.kubeflow.org", "trainjobs", v) for v in WATCH}
    | {("jobset.x-k8s.io", "jobsets", v) for v in WATCH}
    | {("scheduling.x-k8s.io" if variant == SCHEDULER_PLUGINS else "scheduling.run.ai", "podgroups", v) for v in WATCH}
    for variant in VARIANTS
}

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


MONITORING = "components/servicemonitor"


@cache
def with_monitoring(variant: str) -> str:
    """A kustomization of the operator's own, as README.md's Operate says: ``variant`` and the monitoring component
    (metrics Service, ServiceMonitor, alerts) beside it; its path, for :func:`render`."""
    return with_components(variant, MONITORING)


@cache
def with_components(variant: str, *components: str) -> str:
    """A kustomization of the operator's own: ``variant`` and ``components`` (paths under knative/) beside it; its
    path, for :func:`render`."""
    where = Path(tempfile.mkdtemp(prefix="kai-fn-kustomization-"))
    atexit.register(shutil.rmtree, where, True)
    (where / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(KNATIVE / variant, where)],
        "components": [os.path.relpath(KNATIVE / c, where) for c in components]}))
    return str(where)


def render(variant: str) -> list[dict[str, Any]]:
    """Fresh objects of one kustomization, a path under knative/ or absolute (callers may mutate them)."""
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


def bound_triples(objs: list[dict[str, Any]], sa: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) granted to ServiceAccount ``kai-fn/<sa>`` by ClusterRoleBindings and RoleBindings
    (a rule narrowed by ``resourceNames`` counts: :func:`named_grants` says to which names)."""
    return set(_grants(objs, sa))


def named_grants(objs: list[dict[str, Any]], sa: str) -> dict[tuple[str, str, str], tuple[str, tuple[str, ...]]]:
    """The grants narrowed by ``resourceNames``: (apiGroup, resource, verb) -> (the Role's namespace, the names)."""
    return {triple: scope for triple, scope in _grants(objs, sa).items() if scope[1]}


def _grants(objs: list[dict[str, Any]], sa: str) -> dict[tuple[str, str, str], tuple[str, tuple[str, ...]]]:
    cluster_roles = {r["metadata"]["name"]: r for r in by_kind(objs, "ClusterRole")}
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in by_kind(objs, "Role")}
    grants: dict[tuple[str, str, str], tuple[str, tuple[str, ...]]] = {}
    for binding in by_kind(objs, "ClusterRoleBinding") + by_kind(objs, "RoleBinding"):
        subjects = binding.get("subjects", [])
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa and s["namespace"] == NAMESPACE for s in subjects):
            continue
        where = binding["metadata"].get("namespace", "")
        if binding["roleRef"]["kind"] == "Role":
            role = roles[(where, binding["roleRef"]["name"])]  # KeyError: binding to a missing role
        else:
            role = cluster_roles[binding["roleRef"]["name"]]
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule
            names = tuple(rule.get("resourceNames", ()))
            assert not names or role["kind"] == "Role", "a ClusterRole narrowed by name: grant it in a Role instead"
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert (group, resource, verb) not in grants or not names, "granted twice, once by name"
                        grants[(group, resource, verb)] = (where, names)
    return grants


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

