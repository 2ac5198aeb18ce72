"""Knative's own ApiServerSource adapter, run out of cluster for one ApiServerSource manifest of knative/base.

In a cluster, Eventing's controller runs ``apiserver_receive_adapter`` as a Deployment; :class:`RealApiServerSource`
plays that controller (``pkg/reconciler/apiserversource``): it reads the manifest as the controller does, gives the
adapter the identity of ``spec.serviceAccountName`` (and, with ``sink.audience``, what it needs to request OIDC
tokens itself), and redeploys it when the set of matching namespaces changes, the new one listing before the old
one stops. :func:`source_spec`, :func:`source_config` and :func:`adapter_env` are the controller's pure part.
"""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Self

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_fn.local import k8s
from kai_fn.local.process import REPO, Started, built, end, free_port

log = logging.getLogger(__name__)
BINARY = "apiserver_receive_adapter"
OIDC_SUFFIX = "-oidc-sources.knative.dev-apiserversource"  # auth.GetOIDCServiceAccountNameForResource
_POPULATED = re.compile(r'"Caches populated".*reflector="([^"]+)"')
_STARTED = "Starting in resilient mode"


# -- what Eventing's controller computes from the manifest (pure) ------------------------------------------------

def guess_resource(kind: str) -> str:
    """apimachinery's meta.UnsafeGuessKindToResource, as the controller turns ``kind`` into the watched resource."""
    plural = kind.lower()
    if plural.endswith("s"):
        return plural + "es"
    if plural.endswith("y"):
        return plural[:-1] + "ies"
    return plural + "s"


def selector_string(selector: dict[str, Any] | None) -> str:
    """metav1.LabelSelectorAsSelector(...).String(): requirements sorted by key, values sorted."""
    if not selector:
        return ""
    reqs = [(k, f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin"}
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], sorted(expr.get("values") or [])
        text = {"Exists": key, "DoesNotExist": f"!{key}"}.get(op) or f"{key} {ops[op]} ({','.join(values)})"
        reqs.append((key, text))
    return ",".join(text for _, text in sorted(reqs, key=lambda r: r[0]))


def child_name(parent: str, suffix: str) -> str:
    """kmeta.ChildName for the names used here, which all fit in 63 characters (no hashing needed)."""
    name = parent + suffix
    if len(name) > 63:
        raise ValueError(f"{name!r} is longer than 63 characters: Knative would hash it")
    return name


@dataclass(frozen=True)
class SourceSpec:
    """One ApiServerSource, as its controller reads it."""

    name: str
    namespace: str
    mode: str
    service_account: str
    resources: tuple[dict[str, Any], ...]  # apiserver.ResourceWatch JSON: {"gvr": {...}, "selector"?: str}
    namespace_selector: dict[str, Any] | None
    owner: dict[str, Any] | None = None
    filters: tuple[dict[str, Any], ...] = ()
    audience: str | None = None

    @property
    def all_namespaces(self) -> bool:
        """An empty selector ({}) watches every namespace; none at all, only the source's own."""
        sel = self.namespace_selector
        return sel is not None and not sel.get("matchLabels") and not sel.get("matchExpressions")

    @property
    def oidc_service_account(self) -> str:
        return child_name(self.name, OIDC_SUFFIX).lower()


def source_spec(manifest: dict[str, Any], namespace: str = "kai-fn") -> SourceSpec:
    spec = manifest["spec"]
    resources = []
    for r in spec["resources"]:
        group, _, version = r["apiVersion"].rpartition("/")
        watch_: dict[str, Any] = {"gvr": {"Group": group, "Version": version, "Resource": guess_resource(r["kind"])}}
        if r.get("selector") is not None:
            watch_["selector"] = selector_string(r["selector"])
        resources.append(watch_)
    return SourceSpec(
        name=manifest["metadata"]["name"], namespace=manifest["metadata"].get("namespace") or namespace,
        mode=spec.get("mode") or "Reference", service_account=spec.get("serviceAccountName") or "default",
        resources=tuple(resources), namespace_selector=spec.get("namespaceSelector"),
        owner=spec.get("owner"), filters=tuple(spec.get("filters") or ()),
        audience=(spec.get("sink") or {}).get("audience"))


def narrowed(spec: SourceSpec, labels: dict[str, str]) -> SourceSpec:
    """The same source watching only the namespaces that also carry ``labels``: a test's own, on a shared testbed
    where other tests' labelled namespaces come and go (each change would redeploy the adapter)."""
    selector = dict(spec.namespace_selector or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), **labels}
    return replace(spec, namespace_selector=selector)


def load(path: Path, namespace: str = "kai-fn") -> SourceSpec:
    return source_spec(yaml.safe_load(path.read_text()), namespace)


def source_config(spec: SourceSpec, namespaces: list[str]) -> dict[str, Any]:
    """K_SOURCE_CONFIG: pkg/adapter/apiserver.Config as resources.makeEnv fills it."""
    config: dict[str, Any] = {"namespaces": sorted(namespaces), "allNamespaces": spec.all_namespaces,
                              "resources": list(spec.resources), "mode": spec.mode}
    if spec.owner:
        config["owner"] = spec.owner
    if spec.filters:
        config["filters"] = list(spec.filters)
    return config


def adapter_env(spec: SourceSpec, *, sink: str, kubeconfig: Path, namespaces: list[str], profiling_port: int,
                oidc: bool) -> dict[str, str]:
    """The Deployment's env (resources.makeEnv), plus what running outside a pod needs: KUBECONFIG, the pprof port
    (PROFILING_PORT; upstream binds ``:8008`` otherwise), klog at 2 for the reflectors' "Caches populated"."""
    env = {"K_SINK": sink, "K_SOURCE_CONFIG": json.dumps(source_config(spec, namespaces)),
           "SYSTEM_NAMESPACE": "knative-eventing", "NAMESPACE": spec.namespace, "NAME": spec.name,
           "K_COMPONENT": "apiserversource", "METRICS_DOMAIN": "knative.dev/eventing",
           "K_LOGGING_CONFIG": "{}", "K_OBSERVABILITY_CONFIG": "{}", "K_KLOG_VERBOSITY": "2",
           "KUBECONFIG": str(kubeconfig), "PROFILING_PORT": str(profiling_port)}
    if oidc and spec.audience:
        env |= {"K_AUDIENCE": spec.audience, "K_OIDC_SERVICE_ACCOUNT": spec.oidc_service_account}
    return env


def reflectors(spec: SourceSpec, namespaces: list[str]) -> set[str]:
    """The names of the reflectors the adapter starts (adapter.buildReflectorName), one per resource and namespace."""
    names = set()
    for r in spec.resources:
        g = r["gvr"]
        gvr = f"{g['Group']}/{g['Version']}, Resource={g['Resource']}" if g["Group"] else \
            f"/{g['Version']}, Resource={g['Resource']}"
        names |= {gvr} if spec.all_namespaces else {f"{gvr}/{ns}" for ns in namespaces}
    return names


# -- the binary, one process ---------------------------------------------------------------------------------------

def eventing_dir() -> Path:
    return built("eventing")


def binary() -> Path:
    return eventing_dir() / BINARY


class AdapterProcess:
    """One adapter process; its stdout and stderr go line by line to ``log``, tagged, and tell when it is ready:
    ``marker`` logged and every reflector in ``expected`` listed ("Caches populated"), from which point no change is
    missed."""

    def __init__(self, exe: Path, env: dict[str, str], expected: set[str], *, log_to: IO[str], tag: str,
                 args: tuple[str, ...] = (), marker: str = _STARTED) -> None:
        self.exe, self.env, self.expected, self.log_to, self.tag = exe, env, expected, log_to, tag
        self.args, self.marker = args, marker
        self.populated: set[str] = set()
        self.started = threading.Event()
        self.ready = threading.Event()
        self.timed_lines: list[tuple[float, str]] = []  # (time.monotonic(), line), the last 2000
        self.proc: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None

    def start(self, timeout: float = 60.0) -> Self:
        self.proc = subprocess.Popen([str(self.exe), *self.args], env={"PATH": os.environ.get("PATH", ""), **self.env},
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.reader = threading.Thread(target=self._read, name=f"adapter-log-{self.tag}", daemon=True)
        self.reader.start()
        if not self.ready.wait(timeout):
            self.stop()
            last = "".join(line for _, line in self.timed_lines[-15:])
            raise RuntimeError(f"adapter {self.tag} not ready ({self.marker!r}, to list: "
                               f"{sorted(self.expected - self.populated)}) within {timeout:.0f}s; last lines:\n{last}")
        return self

    def _read(self) -> None:
        assert self.proc and self.proc.stdout
        for line in self.proc.stdout:
            self.timed_lines.append((time.monotonic(), line))
            del self.timed_lines[:-2000]
            self.log_to.write(f"[{self.tag}] {line}")
            self.log_to.flush()
            if self.marker in line:
                self.started.set()
            if m := _POPULATED.search(line):
                self.populated.add(m.group(1))
            if self.started.is_set() and self.expected <= self.populated:
                self.ready.set()
        self.ready.set()  # exited: start() then reports it

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (the adapter's signal context ends its watches), SIGKILL after ``timeout``."""
        if self.running:
            assert self.proc
            self.proc.terminate()
            end(self.proc, timeout)
        self._drained()

    def kill(self) -> None:
        end(self.proc)
        self._drained()

    def _drained(self) -> None:
        """Its last lines are in the log before the log may close."""
        if self.reader and self.reader is not threading.current_thread():
            self.reader.join(5)


# -- the controller's part: identity, OIDC, namespaces, redeploys ------------------------------------------------

def ensure(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except ApiException as e:
        if e.status != 409:
            raise


@dataclass
class RealApiServerSource(Started):
    """Knative's adapter for one ApiServerSource manifest, as a context manager; ``oidc`` sends tokens for the
    manifest's ``sink.audience`` (as with ``authentication-oidc`` on). ``log_path`` gets every process's lines."""

    api: client.ApiClient
    spec: SourceSpec
    sink: str
    log_path: Path
    oidc: bool = True
    exe: Path | None = None
    namespaces: list[str] = field(default_factory=list)  # what the running adapter watches
    generation: int = 0

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.current: AdapterProcess | None = None
        self.stopping = threading.Event()
        self.changed = threading.Condition()
        self.deploying = threading.Lock()  # the namespace watcher and restart() both deploy
        self._tmp = tempfile.TemporaryDirectory(prefix=f"adapter-{self.spec.name}-")
        self.kubeconfig = Path(self._tmp.name) / "kubeconfig"
        self._log: IO[str] | None = None
        self._watcher = threading.Thread(target=self._watch_namespaces, name=f"ns-{self.spec.name}", daemon=True)

    # identity ----------------------------------------------------------------------------------------------------
    def _identity(self) -> None:
        """The adapter authenticates as spec.serviceAccountName; with OIDC it may request tokens of its OIDC
        ServiceAccount (the Role and RoleBinding of resources.MakeOIDCRole/MakeOIDCRoleBinding)."""
        ns, sa = self.spec.namespace, self.spec.service_account
        meta = client.V1ObjectMeta
        ensure(self.core.create_namespace, client.V1Namespace(metadata=meta(name=ns)))
        ensure(self.core.create_namespaced_service_account, ns, client.V1ServiceAccount(metadata=meta(name=sa)))
        token = k8s.token(self.core.create_namespaced_service_account_token(sa, ns, client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=6 * 3600))))
        host, ca = self.api.configuration.host, self.api.configuration.ssl_ca_cert
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "adapter",
            "clusters": [{"name": "c", "cluster": {"server": host, "certificate-authority": ca}}],
            "users": [{"name": sa, "user": {"token": token}}],
            "contexts": [{"name": "adapter", "context": {"cluster": "c", "user": sa}}]}))
        if not (self.oidc and self.spec.audience):
            return
        oidc_sa, role = self.spec.oidc_service_account, child_name(self.spec.name, "-create-oidc-token")
        rbac = client.RbacAuthorizationV1Api(self.api)
        ensure(self.core.create_namespaced_service_account, ns, client.V1ServiceAccount(
            metadata=meta(name=oidc_sa, labels={"eventing.knative.dev/oidc": "enabled"})))
        ensure(rbac.create_namespaced_role, ns, client.V1Role(
            metadata=meta(name=role), rules=[client.V1PolicyRule(
                api_groups=[""], resources=["serviceaccounts/token"], resource_names=[oidc_sa], verbs=["create"])]))
        ensure(rbac.create_namespaced_role_binding, ns, client.V1RoleBinding(
            metadata=meta(name=role), role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role",
                                                                name=role),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=sa, namespace=ns)]))

    @property
    def sender(self) -> str:
        """Who the function sees: the OIDC ServiceAccount's username."""
        return f"system:serviceaccount:{self.spec.namespace}:{self.spec.oidc_service_account}"

    # namespaces --------------------------------------------------------------------------------------------------
    def matching(self) -> list[str]:
        if self.spec.all_namespaces:
            return []
        if self.spec.namespace_selector is None:
            return [self.spec.namespace]
        listed = self.core.list_namespace(label_selector=selector_string(self.spec.namespace_selector))
        return sorted(k8s.name(n) for n in listed.items)

    def _deploy(self, namespaces: list[str]) -> None:
        """Starts an adapter for ``namespaces``; the previous one stops once this one has listed."""
        with self.deploying:
            self._deploy_locked(namespaces)

    def _deploy_locked(self, namespaces: list[str]) -> None:
        assert self.exe and self._log
        self.generation += 1
        env = adapter_env(self.spec, sink=self.sink, kubeconfig=self.kubeconfig, namespaces=namespaces,
                          profiling_port=free_port(""), oidc=self.oidc)
        new = AdapterProcess(self.exe, env, reflectors(self.spec, namespaces), log_to=self._log,
                             tag=f"{self.spec.name}#{self.generation}").start()
        old, self.current = self.current, new
        with self.changed:
            self.namespaces = namespaces
            self.changed.notify_all()
        if old:
            old.stop()

    def _watch_namespaces(self) -> None:
        while not self.stopping.is_set():
            try:
                for _ in k8s.Stream(self.core.list_namespace, timeout_seconds=5,
                                    label_selector=selector_string(self.spec.namespace_selector)):
                    self._reconcile()
                    if self.stopping.is_set():
                        break
                self._reconcile()
            except Exception as error:  # the API server restarting: try again, as the controller's informer does
                log.warning("RealApiServerSource %s: namespace watch: %s", self.spec.name, error)
                self.stopping.wait(1)

    def _reconcile(self) -> None:
        """Redeploys for the namespaces matching now, read under the lock: a run of namespace changes while an
        adapter starts (a test's namespaces going away one by one) ends in one redeploy, not one each."""
        with self.deploying:
            found = self.matching()
            if found != self.namespaces and not self.stopping.is_set():
                self._deploy_locked(found)

    def wait_watching(self, namespace: str, timeout: float = 180.0) -> None:
        """Until the running adapter has listed ``namespace`` (its changes from then on are delivered)."""
        if self.spec.all_namespaces:
            return
        with self.changed:
            if not self.changed.wait_for(lambda: namespace in self.namespaces, timeout):
                raise TimeoutError(f"{self.spec.name}: namespace {namespace} not watched within {timeout:.0f}s")

    # lifecycle ---------------------------------------------------------------------------------------------------
    def start(self) -> Self:
        self.exe = self.exe or binary()
        self._identity()
        self._log = self.log_path.open("a")
        self._deploy(self.matching())
        if self.namespace_selector_dynamic:
            self._watcher.start()
        return self

    @property
    def namespace_selector_dynamic(self) -> bool:
        return self.spec.namespace_selector is not None and not self.spec.all_namespaces

    def restart(self) -> None:
        """A new adapter process for the same namespaces (a rollout: the old one stops once the new one has listed;
        a pod that dies first is :meth:`down`)."""
        self._deploy(self.matching())

    @contextmanager
    def down(self) -> Iterator[None]:
        """The adapter's pod dead for the block, a new one started at its end. A namespace change meanwhile waits for
        the new one: the namespace watcher's redeploy would start an adapter too soon."""
        with self.deploying:
            if self.current:
                self.current.kill()
            yield
            self._deploy_locked(self.matching())

    def stop(self) -> None:
        self.stopping.set()
        if self._watcher.is_alive():
            self._watcher.join(10)
        if self.current:
            self.current.stop()
        if self._log:
            self._log.close()
        self._tmp.cleanup()


def manifests(directory: Path = REPO / "knative" / "base") -> Iterator[Path]:
    """The ApiServerSource manifests of knative/base, one adapter each."""
    return iter(sorted(directory.glob("apiserversource*.yaml")))
