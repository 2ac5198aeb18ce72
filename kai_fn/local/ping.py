"""Knative's own PingSource adapter (``mtping`` of knative.dev/eventing), run out of cluster for knative/base's
PingSource.

mtping serves each PingSource that Eventing's controller has marked Ready with a sink in its status.
:class:`RealPingSource` plays that controller for one manifest: it creates the PingSource, writes that status (with
OIDC's ``auth.serviceAccountName``), and runs mtping as its own ServiceAccount with the ConfigMaps it requires,
without leader election. ``schedule`` may replace the manifest's (mtping accepts ``@every 10s``; the webhook would
allow minutes only).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Self

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_fn.local import k8s
from kai_fn.local.adapter import AdapterProcess, child_name, ensure, eventing_dir
from kai_fn.local.process import Started, free_port

SYSTEM_NAMESPACE = "knative-eventing"
ACCOUNT = "pingsource-mt-adapter"
CLUSTER_ROLE = "knative-eventing-pingsource-mt-adapter"
OIDC_SUFFIX = "-oidc-sources.knative.dev-pingsource"
SOURCES = ("sources.knative.dev", "v1", "pingsources")
_SYNCED = "Synchronizing schedule"  # mtping's Update: the source's cron entry exists


def status(manifest: dict[str, Any], sink: str, generation: int, *, oidc: bool) -> dict[str, Any]:
    """What Eventing's PingSource controller writes once the source is deployed (pure)."""
    conditions = ["Ready", "SinkProvided", "Deployed", "OIDCIdentityCreated"]
    out: dict[str, Any] = {
        "observedGeneration": generation, "sinkUri": sink,
        "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                       for t in conditions]}
    audience = (manifest["spec"].get("sink") or {}).get("audience")
    if oidc and audience:
        out |= {"sinkAudience": audience,
                "auth": {"serviceAccountName": child_name(manifest["metadata"]["name"], OIDC_SUFFIX).lower()}}
    return out


@dataclass
class RealPingSource(Started):
    api: client.ApiClient
    manifest: dict[str, Any]  # knative/base's PingSource, rendered (metadata.namespace set)
    sink: str
    log_path: Path
    oidc: bool = True
    schedule: str | None = None

    def __post_init__(self) -> None:
        self.core, self.rbac = client.CoreV1Api(self.api), client.RbacAuthorizationV1Api(self.api)
        self.objects = client.CustomObjectsApi(self.api)
        self.name = self.manifest["metadata"]["name"]
        self.namespace = self.manifest["metadata"].get("namespace") or "kai-fn"
        self.process: AdapterProcess | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="mtping-")
        self._log: IO[str] | None = None

    @property
    def sender(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{child_name(self.name, OIDC_SUFFIX).lower()}"

    def _identity(self, role: dict[str, Any]) -> Path:
        meta = client.V1ObjectMeta
        for ns in (SYSTEM_NAMESPACE, self.namespace):
            ensure(self.core.create_namespace, client.V1Namespace(metadata=meta(name=ns)))
        for cm in ("config-logging", "config-observability"):
            ensure(self.core.create_namespaced_config_map, SYSTEM_NAMESPACE, client.V1ConfigMap(metadata=meta(name=cm)))
        ensure(self.core.create_namespaced_service_account, SYSTEM_NAMESPACE,
                client.V1ServiceAccount(metadata=meta(name=ACCOUNT)))
        ensure(self.rbac.create_cluster_role, role)
        ensure(self.rbac.create_cluster_role_binding, client.V1ClusterRoleBinding(
            metadata=meta(name=CLUSTER_ROLE), role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=CLUSTER_ROLE),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=ACCOUNT, namespace=SYSTEM_NAMESPACE)]))
        if self.oidc:
            ensure(self.core.create_namespaced_service_account, self.namespace, client.V1ServiceAccount(
                metadata=meta(name=child_name(self.name, OIDC_SUFFIX).lower())))
        token = k8s.token(self.core.create_namespaced_service_account_token(ACCOUNT, SYSTEM_NAMESPACE,
                                                                            client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=6 * 3600))))
        path = Path(self._tmp.name) / "kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "mtping",
            "clusters": [{"name": "c", "cluster": {"server": self.api.configuration.host,
                                                   "certificate-authority": self.api.configuration.ssl_ca_cert}}],
            "users": [{"name": ACCOUNT, "user": {"token": token}}],
            "contexts": [{"name": "mtping", "context": {"cluster": "c", "user": ACCOUNT}}]}))
        return path

    def _source(self) -> None:
        """The PingSource as the manifest has it (``schedule`` replaced if given), Ready with our sink."""
        body = {k: v for k, v in self.manifest.items() if k in ("apiVersion", "kind", "metadata", "spec")}
        body = {**body, "metadata": {**body["metadata"], "namespace": self.namespace}}
        if self.schedule:
            body["spec"] = {**body["spec"], "schedule": self.schedule}
        self._delete()
        made = k8s.obj(self.objects.create_namespaced_custom_object(*SOURCES[:2], self.namespace, SOURCES[2], body))
        self.objects.patch_namespaced_custom_object_status(
            *SOURCES[:2], self.namespace, SOURCES[2], self.name,
            {"status": status(self.manifest, self.sink, made["metadata"]["generation"], oidc=self.oidc)})

    def _delete(self) -> None:
        try:
            self.objects.delete_namespaced_custom_object(*SOURCES[:2], self.namespace, SOURCES[2], self.name)
        except ApiException as e:
            if e.status != 404:
                raise

    def start(self, timeout: float = 60.0) -> Self:
        where = eventing_dir()
        role = yaml.safe_load((where / "manifests" / "pingsource-mt-adapter-clusterrole.yaml").read_text())
        kubeconfig = self._identity(role)
        self._source()
        # K_NO_SHUTDOWN_AFTER=59: SIGTERM is not held until the next minute.
        env = {"KUBECONFIG": str(kubeconfig), "SYSTEM_NAMESPACE": SYSTEM_NAMESPACE, "NAMESPACE": SYSTEM_NAMESPACE,
               "K_OBSERVABILITY_CONFIG": "{}", "K_NO_SHUTDOWN_AFTER": "59", "K_SINK_TIMEOUT": "-1",
               "POD_NAME": "mtping-0", "PROFILING_PORT": str(free_port(""))}
        self._log = self.log_path.open("a")
        self.process = AdapterProcess(where / "mtping", env, set(), log_to=self._log, tag=self.name,
                                      args=("-disable-ha",), marker=_SYNCED).start(timeout)
        return self

    def stop(self) -> None:
        if self.process:
            self.process.stop()
        try:
            self._delete()
        except Exception:  # the API server may be gone already (end of a run)
            pass
        if self._log:
            self._log.close()
        self._tmp.cleanup()

