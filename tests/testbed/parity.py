"""Two backends with one face, so one scenario table runs against the emulator tier and the real testbed: seed
objects, run the function with given settings, read what is stored, and reduce it to what must agree.

On the testbed the function is a local process holding only its ServiceAccount's token, bound to the ClusterRoles
the manifests render (knative/base, or the scheduler-plugins overlay for that flavor), so the real RBAC authorizer
and the real CRD schemas judge every call.
"""
from __future__ import annotations

import copy
import json
import re
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from kai_fn.core import keys
from kai_fn.local.emulator import Emulator
from kai_fn.local.process import FunctionProcess
from tests.conftest import Functions
from tests.manifests import BASE, SCHEDULER_PLUGINS, render
from tests.testbed.conftest import LiveCluster
from tests.testbed.kai_fn_install import ENABLED, apply, token_kubeconfig

TRAINER = "trainer.kubeflow.org/v1alpha1"
JOBSET = "jobset.x-k8s.io/v1alpha2"
KAI_PG = "scheduling.run.ai/v2alpha2"
SP_PG = "scheduling.x-k8s.io/v1alpha1"
QUEUE = "scheduling.run.ai/v2"
PLURALS = {"TrainJob": "trainjobs", "JobSet": "jobsets", "ClusterTrainingRuntime": "clustertrainingruntimes",
           "Queue": "queues", "PodGroup": "podgroups", "Event": "events"}
CLUSTER_SCOPED = {"ClusterTrainingRuntime", "Queue"}
_FUNCTION_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


class EmulatorBackend:
    name = "emulator"

    def __init__(self, api: Emulator, functions: Functions) -> None:
        self.api, self.functions = api, functions

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        namespace = obj["metadata"].get("namespace")
        if namespace and self.api.get("v1", "Namespace", None, namespace) is None:
            self.api.opt_in(namespace)  # kai_fn acts only where a namespace opted in, as the live backend's did
        return self.api.put(copy.deepcopy(obj))

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.api.get(api_version, kind, namespace, name)

    def list(self, api_version: str, kind: str, namespace: str) -> list[dict[str, Any]]:
        return self.api.list(api_version, kind, namespace)

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        self.api.delete(api_version, kind, namespace, name)

    def function_url(self, **settings: str) -> str:
        return self.functions(**settings).url

    def cleanup(self, namespace: str, tag: str) -> None:
        """The ``api`` fixture wipes the emulator."""


class LiveBackend:
    name = "testbed"

    def __init__(self, testbed: LiveCluster, stack: ExitStack, running: dict[Any, FunctionProcess]) -> None:
        self.testbed, self.stack, self.running = testbed, stack, running
        self.objs = client.CustomObjectsApi(testbed.api)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        group, version = obj["apiVersion"].split("/")
        plural = PLURALS[obj["kind"]]
        if obj["kind"] in CLUSTER_SCOPED:
            return self.objs.create_cluster_custom_object(group, version, plural, obj)
        ns = obj["metadata"]["namespace"]
        self.testbed.ensure_namespace(ns, ENABLED)
        return self.objs.create_namespaced_custom_object(group, version, ns, plural, obj)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        group, version = api_version.split("/")
        try:
            if kind in CLUSTER_SCOPED:
                return self.objs.get_cluster_custom_object(group, version, PLURALS[kind], name)
            return self.objs.get_namespaced_custom_object(group, version, namespace, PLURALS[kind], name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str) -> list[dict[str, Any]]:
        if api_version == "v1" and kind == "Event":
            raw = client.CoreV1Api(self.testbed.api).list_namespaced_event(namespace)
            return [self.testbed.api.sanitize_for_serialization(e) for e in raw.items]
        group, version = api_version.split("/")
        return self.objs.list_namespaced_custom_object(group, version, namespace, PLURALS[kind])["items"]

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        group, version = api_version.split("/")
        body = client.V1DeleteOptions(propagation_policy="Background")
        try:
            if kind in CLUSTER_SCOPED:
                self.objs.delete_cluster_custom_object(group, version, PLURALS[kind], name, body=body)
            else:
                self.objs.delete_namespaced_custom_object(group, version, namespace, PLURALS[kind], name, body=body)
        except ApiException as e:
            if e.status != 404:  # the garbage collector may have been first (an owned JobSet)
                raise

    def function_url(self, **settings: str) -> str:
        """A function process per setting set, kept for the module; its roles applied fresh for this scenario's
        flavor (the overlay's kai-fn-podgroups ClusterRole replaces the base one of the same name)."""
        variant = SCHEDULER_PLUGINS if settings.get("KAI_PODGROUP_FLAVOR") == "scheduler-plugins" else BASE
        apply(self.testbed, [o for o in render(variant) if o["kind"] in _FUNCTION_KINDS])
        self.variant = variant
        key = tuple(sorted(settings.items()))
        if key not in self.running:
            tmp = Path(self.stack.enter_context(tempfile.TemporaryDirectory()))
            kubeconfig = token_kubeconfig(self.testbed, tmp)
            self.running[key] = self.stack.enter_context(FunctionProcess(
                {"KUBECONFIG": str(kubeconfig), "KAI_FN_RUNTIME_CACHE_SECONDS": "0", "KAI_FN_BACKGROUND_WORKERS": "0",
                 "KAI_FN_NAMESPACE_CACHE_SECONDS": "0", **settings}))  # each scenario's namespace is new
        return self.running[key].url

    def cleanup(self, namespace: str, tag: str) -> None:
        if getattr(self, "variant", BASE) != BASE:  # leave the shared testbed with the base roles
            apply(self.testbed, [o for o in render(BASE) if o["kind"] in _FUNCTION_KINDS])
        for api_version, kind, name in ((TRAINER, "ClusterTrainingRuntime", f"torch-kai-{tag}"),
                                        (QUEUE, "Queue", f"q-{tag}")):
            self.delete(api_version, kind, None, name)  # ignores 404 only: a leak is reported here, not later
        try:
            client.CoreV1Api(self.testbed.api).delete_namespace(namespace)
        except ApiException as e:
            if e.status != 404:
                raise



def _meta_without_server_fields(meta: dict[str, Any]) -> dict[str, Any]:
    return {"labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {},
            "ownerReferences": [{k: v for k, v in r.items() if k != "uid"} for r in meta.get("ownerReferences") or []]}


def stored(backend: Any, namespace: str, name: str) -> dict[str, Any]:
    """What must agree across backends: TrainJob suspend and kai-fn annotations, JobSet annotations and pod-template
    labels/annotations per replicatedJob, every PodGroup (either flavor) without server-owned fields, and the
    reasons, types and messages of kai-fn's Events."""
    tj = backend.get(TRAINER, "TrainJob", namespace, name)
    js = backend.get(JOBSET, "JobSet", namespace, name)
    pgs = backend.list(KAI_PG, "PodGroup", namespace) + backend.list(SP_PG, "PodGroup", namespace)
    events = [e for e in backend.list("v1", "Event", namespace) if e.get("reportingComponent") == keys.MANAGED_BY]
    return {
        "trainjob": None if tj is None else {
            "suspend": tj["spec"].get("suspend"),
            "annotations": {k: v for k, v in (tj["metadata"].get("annotations") or {}).items()
                            if k.startswith("kai-fn/")}},
        "jobset": None if js is None else {
            "suspend": js["spec"].get("suspend"),
            "annotations": js["metadata"].get("annotations") or {},
            "labels": {k: v for k, v in (js["metadata"].get("labels") or {}).items() if k.startswith("kai-fn/")},
            "pods": {rj["name"]: {"labels": (rj["template"]["spec"]["template"].get("metadata") or {}).get(
                "labels") or {}, "annotations": (rj["template"]["spec"]["template"].get("metadata") or {}).get(
                "annotations") or {}} for rj in js["spec"]["replicatedJobs"]}},
        "podgroups": sorted(({"apiVersion": p["apiVersion"], "name": p["metadata"]["name"],
                              **_meta_without_server_fields(p["metadata"]), "spec": p["spec"]} for p in pgs),
                             key=lambda p: p["name"]),
        "events": sorted((e["reason"], e["type"], e["message"]) for e in events),
    }


def normalized(state: dict[str, Any], tag: str, uid: str | None) -> dict[str, Any]:
    """The same text with this run's tag, TrainJob uid and timestamps replaced by placeholders."""
    text = json.dumps(state, sort_keys=True).replace(tag, "<tag>")
    if uid:
        text = text.replace(uid, "<uid>")
    return json.loads(_TIME.sub("<time>", text))


def versions(backend: Any, namespace: str, name: str) -> dict[str, Any]:
    """resourceVersions of everything the function might write: equal before and after means no write."""
    tj = backend.get(TRAINER, "TrainJob", namespace, name)
    js = backend.get(JOBSET, "JobSet", namespace, name)
    # The JobSet's generation, not its resourceVersion: JobSet's controller writes its status all along on the testbed.
    return {"trainjob": tj and tj["metadata"]["resourceVersion"], "jobset": js and js["metadata"].get("generation"),
            "podgroups": sorted(p["metadata"]["resourceVersion"] for p in
                                backend.list(KAI_PG, "PodGroup", namespace) + backend.list(SP_PG, "PodGroup",
                                                                                            namespace)),
            "events": sorted(e["metadata"]["resourceVersion"] for e in backend.list("v1", "Event", namespace)
                             if e.get("reportingComponent") == keys.MANAGED_BY)}
