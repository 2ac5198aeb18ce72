"""kai_fn on the chain testbed (``./run.sh cluster up --chain``), as a cluster would run it, for the tests and demo.

:func:`running` applies what a cluster without Knative can hold of the flavor's manifests (identity, RBAC, Lease,
admission policies) and the samples/chain runtimes, runs the function with its ServiceAccount's token and the
Service's settings behind Knative's queue-proxy, and feeds it from Knative's own adapters (the stand-ins of
:mod:`kai_fn.local.source` serve only the tiers without Knative). All of it stops on exit, the policies removed: the
testbed may be shared with tiers that do not expect them. ``python -m kai_fn.local.chain serve`` runs it until SIGTERM.
"""
from __future__ import annotations

import argparse
import copy
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_fn.core import keys
from kai_fn.local import k8s
from kai_fn.local.adapter import RealApiServerSource, source_spec
from kai_fn.local.ping import RealPingSource
from kai_fn.local.process import REPO, FunctionProcess
from kai_fn.local.queue_proxy import QueueProxy, service_settings
from kai_fn.local.spread import Spreader

MANIFESTS = {"kai": REPO / "knative" / "base", "scheduler-plugins": REPO / "knative" / "overlays" / "scheduler-plugins"}
SCHEDULERS = {"kai": "kai-scheduler", "scheduler-plugins": "scheduler-plugins-scheduler"}
PODGROUP_APIS = {"kai": ("scheduling.run.ai", "v2alpha2"), "scheduler-plugins": ("scheduling.x-k8s.io", "v1alpha1")}
SAMPLES = REPO / "samples" / "chain"
NAMESPACE = "kai-fn"
FUNCTION_SA = "kai-fn"
ENABLED = {"kai-fn.io/enabled": "true"}
POOL_LABEL = "kai-fn.testbed/pool"
POLICY = keys.NAMING_POLICY_NAME  # knative/components/admission-policy
SEGMENT_POLICY = keys.SEGMENT_POLICY_NAME  # knative/components/segment-policy
TRAINER = ("trainer.kubeflow.org", "v1alpha1")
RUNTIMES = ("clustertrainingruntime-chain.yaml", "clustertrainingruntime-chain-staged.yaml")
_FUNCTION_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Lease"}
# The hold (a MutatingAdmissionPolicy) and kai_fn's marks kept its own (a ValidatingAdmissionPolicy).
_POLICY_KINDS = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy",
                 "ValidatingAdmissionPolicyBinding"}
MARKS_POLICY = "kai-fn-own-marks"
QUEUE_PROXY = os.environ.get("KAI_FN_CHAIN_QUEUE_PROXY", "1") != "0"  # Knative Serving's queue-proxy in front


def _bin_env(kubeconfig: Path) -> dict[str, str]:
    """What `cluster up` built, from bin.env next to its kubeconfig."""
    return dict(line.split("=", 1) for line in (kubeconfig.parent / "bin.env").read_text().split())


def kubectl_of(kubeconfig: Path) -> Path:
    return Path(_bin_env(kubeconfig)["kubectl"])


def sample(name: str) -> dict[str, Any]:
    return k8s.obj(yaml.safe_load((SAMPLES / name).read_text()))


def for_scheduler(runtime: dict[str, Any], scheduler: str) -> dict[str, Any]:
    """The runtime with every pod template sent to ``scheduler`` (the samples name KAI's)."""
    rt = copy.deepcopy(runtime)
    for rj in rt["spec"]["template"]["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["spec"]["schedulerName"] = scheduler
    return rt


@dataclass
class Testbed:
    """The chain testbed as its admin: the client, kubectl, and what scenarios make on it; ``flavor`` is the
    PodGroup flavor of the kai_fn that runs on it, which decides where sample runtimes send their pods."""

    kubeconfig: Path
    api: client.ApiClient
    kubectl_path: Path
    flavor: str = field(default="kai", kw_only=True)

    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig), *args],
                              input=stdin, capture_output=True, text=True, check=check)

    def apply(self, objs: list[dict[str, Any]]) -> None:
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=kai-fn-chain", "-f", "-",
                     stdin=yaml.safe_dump_all(objs))

    def namespace(self, prefix: str, *, enabled: bool = True) -> str:
        """A fresh namespace, labelled for kai_fn (sources and admission policy) unless ``enabled`` is False."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        client.CoreV1Api(self.api).create_namespace(client.V1Namespace(
            metadata=client.V1ObjectMeta(name=name, labels=ENABLED if enabled else None)))
        return name

    def runtime(self, namespace: str, *, staged: bool = False, pool: str | None = None,
                scheduler: str | None = None, name: str = "chain") -> dict[str, Any]:
        """A namespaced TrainingRuntime copied from samples/chain: its pods kept on the simnodes pool ``pool``
        (``kai-fn.testbed/pool``) and sent to the flavor's scheduler, or to ``scheduler``."""
        rt = for_scheduler(sample(RUNTIMES[1] if staged else RUNTIMES[0]), scheduler or SCHEDULERS[self.flavor])
        rt["kind"], rt["metadata"] = "TrainingRuntime", {**rt["metadata"], "name": name, "namespace": namespace}
        for rj in rt["spec"]["template"]["spec"]["replicatedJobs"]:
            if pool:
                rj["template"]["spec"]["template"]["spec"]["nodeSelector"] = {POOL_LABEL: pool}
        return k8s.obj(client.CustomObjectsApi(self.api).create_namespaced_custom_object(
            *TRAINER, namespace, "trainingruntimes", rt))

    def nodes(self, spec: str, pool: str = "gpu-node") -> None:
        """simnodes: nodes ``<pool>-0..N-1`` of ``NxG`` exist (existing ones kept), labelled ``kai-fn.testbed/pool``."""
        simnodes = Path(_bin_env(self.kubeconfig)["kwok"]) / "simnodes"
        subprocess.run([str(simnodes), "-kubeconfig", str(self.kubeconfig), "-prefix", f"{pool}-", spec],
                       check=True, capture_output=True, text=True)

    def delete_nodes(self, pool: str, deadline_s: float = 30.0) -> None:
        """The pool's pods first, then its nodes: kwok ends a deleted pod only while its node exists (no kubelet, no
        pod garbage collector here), so a pod left on a deleted node stays, and keeps its namespace Terminating."""
        core = client.CoreV1Api(self.api)
        nodes = [k8s.name(n) for n in core.list_node(label_selector=f"{POOL_LABEL}={pool}").items]

        def on_pool() -> list[client.V1Pod]:
            return [p for node in nodes
                    for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items]

        for pod in on_pool():
            try:
                core.delete_namespaced_pod(k8s.name(pod), k8s.meta(pod).namespace or "", grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise
        end = time.monotonic() + deadline_s
        while on_pool() and time.monotonic() < end:
            time.sleep(0.5)
        self.kubectl("delete", "nodes", "-l", f"{POOL_LABEL}={pool}", "--ignore-not-found", "--wait=false", check=False)

    def clear(self, namespaces: list[str], pool: str, deadline_s: float = 180.0) -> None:
        """A benchmark's namespaces deleted, then its pool (its pods first: :meth:`delete_nodes`)."""
        core = client.CoreV1Api(self.api)
        for ns in namespaces:
            core.delete_namespace(ns)
        self.delete_nodes(pool, deadline_s)

    def trainjob(self, namespace: str, name: str, runtime: str = "chain", *, kind: str = "TrainingRuntime",
                 num_nodes: int = 4, labels: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None,
                 node_annotations: dict[str, str] | None = None) -> dict[str, Any]:
        """Submits a TrainJob plainly (no suspend); in a labelled namespace the admission policy names its JobSet's
        gang. ``labels``: e.g. ``kai.scheduler/queue``, ``priorityClassName``, ``kai.scheduler/preemptibility``.
        ``node_annotations``: on the trainer's (``node``) pod template, by a runtimePatch, which Trainer copies onto
        the JobSet (segments are asked there). Trainer's webhook checks the runtime in its informer's cache, which
        may not hold a runtime made a moment ago yet: that refusal is retried for a few seconds, as a user would
        submit again."""
        job = copy.deepcopy(sample("trainjob-chain.yaml"))
        job["metadata"] = {"name": name, "namespace": namespace, "labels": labels or {},
                           "annotations": annotations or {}}
        job["spec"]["runtimeRef"] = {"name": runtime, "kind": kind, "apiGroup": TRAINER[0]}
        job["spec"]["trainer"]["numNodes"] = num_nodes
        if node_annotations:
            job["spec"]["runtimePatches"] = [{"manager": "kai-fn.testbed/segments", "trainingRuntimeSpec": {
                "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
                    "metadata": {"annotations": dict(node_annotations)}}}}}]}}}}]
        deadline = time.monotonic() + 10
        while True:
            try:
                return k8s.obj(client.CustomObjectsApi(self.api).create_namespaced_custom_object(
                    *TRAINER, namespace, "trainjobs", job))
            except ApiException as e:
                if e.status != 403 or "must be created before the TrainJob" not in str(e.body) \
                        or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


Source = RealApiServerSource | RealPingSource  # what feeds the function events: Knative's own adapters


@dataclass
class Chain(Testbed):
    """The running chain: the testbed, the function process (``function.url``), and the sources feeding it."""

    function: FunctionProcess
    sources: list[Source] = field(default_factory=list)
    log_dir: Path | None = None
    queue_proxy: QueueProxy | None = None  # in front of the function: the sources' sink (kai_fn/local/queue_proxy.py)
    # More replicas (``running(replicas=N)``): each a function and its queue-proxy, the spreader in front of them all.
    replicas: list[tuple[FunctionProcess, QueueProxy | None]] = field(default_factory=list)
    spreader: Spreader | None = None

    @property
    def sink(self) -> str:
        if self.spreader:
            return self.spreader.url
        return self.queue_proxy.url if self.queue_proxy else self.function.url

    def namespace(self, prefix: str, *, enabled: bool = True) -> str:
        """As the testbed's; with Knative's adapters, once they watch it: a newly labelled namespace redeploys them
        (as in a cluster), and a TrainJob made before that sends no add (only the resync would find it)."""
        name = super().namespace(prefix, enabled=enabled)
        for source in self.sources:
            if enabled and isinstance(source, RealApiServerSource):
                source.wait_watching(name)
        return name


def _token(core: client.CoreV1Api, namespace: str, name: str, audiences: list[str], seconds: int) -> str:
    _ignore_conflict(lambda: core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))))
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=audiences, expiration_seconds=seconds))
    return k8s.token(core.create_namespaced_service_account_token(name, namespace, request))


def _ignore_conflict(create: Callable[[], Any]) -> None:
    try:
        create()
    except ApiException as e:
        if e.status != 409:
            raise


def probe_jobset(scheduler: str, owner_uid: str | None = None) -> dict[str, Any]:
    """A JobSet as Trainer makes one for a TrainJob (a controller ownerReference) whose pods ask for ``scheduler``."""
    pod = {"spec": {"schedulerName": scheduler, "restartPolicy": "Never",
                    "containers": [{"name": "node", "image": "busybox"}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {
        "name": "probe", "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                              "name": "probe", "uid": owner_uid or str(uuid.uuid4()),
                                              "controller": True}]},
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}]}}


def wait_for_policy(api: client.ApiClient, namespace: str, scheduler: str, timeout: float = 120,
                    acting: bool = True) -> None:
    """The API server loads a policy asynchronously; a dry-run create of a JobSet a TrainJob controls, in a labelled
    namespace, tells when it acts (503 meanwhile, right after the CRDs are installed). ``acting=False``: until a
    deleted one no longer acts (it is unloaded asynchronously too)."""
    objs = client.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    while True:
        try:
            made = k8s.obj(objs.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets",
                                                                probe_jobset(scheduler), dry_run="All"))
        except ApiException as e:
            if e.status != 503:
                raise
            made = {"metadata": {}}
        if ((made["metadata"].get("labels") or {}).get(keys.NAMED_LABEL) == "true") is acting:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the admission policy {POLICY} did not {'take' if acting else 'lose'} effect "
                               f"within {timeout:.0f}s")
        time.sleep(0.5)


def probe_segment_pod(completion_index: int = 5, job_index: int | None = None) -> dict[str, Any]:
    """A pod as the Job controller makes one of a segmented trainer (segments of 4, 3 pods per Job)."""
    labels = {keys.SEGMENT_SIZE_LABEL: "4", keys.JOB_COMPLETION_INDEX_LABEL: str(completion_index)}
    if job_index is not None:
        labels[keys.JOBSET_JOB_INDEX_LABEL] = str(job_index)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "probe", "labels": labels,
        "annotations": {keys.SEGMENT_PARENT_ANNOTATION: "node", keys.SEGMENT_JOB_PODS_ANNOTATION: "3"}},
        "spec": {"containers": [{"name": "node", "image": "busybox"}]}}


def wait_for_segment_policy(api: client.ApiClient, namespace: str, timeout: float = 120, acting: bool = True) -> None:
    """As :func:`wait_for_policy`, for the segment pods' policy: a dry-run pod comes back in its SubGroup."""
    deadline = time.monotonic() + timeout
    while True:
        made = client.CoreV1Api(api).create_namespaced_pod(
            namespace, probe_segment_pod(), dry_run="All")  # type: ignore[arg-type]  # a dict body is sent as it is
        if ((k8s.meta(made).labels or {}).get(keys.KAI_SUBGROUP_LABEL) == "node-1") is acting:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the admission policy {SEGMENT_POLICY} did not {'take' if acting else 'lose'} effect "
                               f"within {timeout:.0f}s")
        time.sleep(0.5)


def _wait_for_policy(chain: Testbed, scheduler: str) -> None:
    ns = chain.namespace("kai-fn-probe")
    try:
        wait_for_policy(chain.api, ns, scheduler)
        wait_for_segment_policy(chain.api, ns)
    finally:
        client.CoreV1Api(chain.api).delete_namespace(ns)


def knative_event_sources(api: client.ApiClient, objs: list[dict[str, Any]], sink: str, logs: Path, oidc: bool,
                          ping_seconds: float) -> list[RealApiServerSource | RealPingSource]:
    """Knative's own adapters for the sources the rendered manifests declare, as context managers, not started:
    one per ApiServerSource, and mtping for the PingSource (``@every <ping_seconds>s``)."""
    sources: list[RealApiServerSource | RealPingSource] = [
        RealApiServerSource(api, source_spec(o), sink, logs / f"adapter-{o['metadata']['name']}.log", oidc=oidc)
        for o in objs if o["kind"] == "ApiServerSource"]
    sources.append(RealPingSource(api, next(o for o in objs if o["kind"] == "PingSource"), sink, logs / "mtping.log",
                                  oidc=oidc, schedule=f"@every {ping_seconds:g}s"))
    return sources


def _service_env(objs: list[dict[str, Any]]) -> dict[str, str]:
    """The function's settings as the rendered Knative Service gives them."""
    service = next(o for o in objs if o["kind"] == "Service")
    return {e["name"]: str(e["value"]) for e in service["spec"]["template"]["spec"]["containers"][0].get("env", [])
            if "value" in e}


@contextmanager
def running(kubeconfig: str | Path, *, flavor: str = "kai", audience: str | None = "kai-fn",
            ping_seconds: float = 30.0, policy: bool = True, log_dir: str | Path | None = None,
            settings: dict[str, str] | None = None, token_seconds: int = 6 * 3600,
            production: bool = False,
            queue_proxy: bool = QUEUE_PROXY, replicas: int = 1,
            sources: Collection[str] | None = None) -> Iterator[Chain]:
    """The chain around a running ``cluster up --chain`` testbed (see the module docstring).

    ``flavor``: ``kai`` or ``scheduler-plugins`` (Coscheduling). ``audience``: None delivers without tokens.
    ``log_dir``: where ``function.log`` and the adapters' logs go (default: next to the kubeconfig). ``settings``:
    more variables over the Service's; runtimes are not cached unless ``production`` (scenarios use them at once).
    ``ping_seconds``: the resync PingSource runs ``@every <ping_seconds>s``.
    ``queue_proxy``: deliver through Knative Serving's queue-proxy (``KAI_FN_CHAIN_QUEUE_PROXY=0``: straight to the
    function). ``replicas``: as many functions, each with its queue-proxy, behind a round-robin spreader.
    ``sources``: the ApiServerSources to run, by name (default: every one the manifests declare; the PingSource
    always runs), so that a benchmark can weigh what the others' deliveries cost.
    """
    kubeconfig = Path(kubeconfig)
    logs = Path(log_dir) if log_dir else kubeconfig.parent
    api = k8s.new_client(str(kubeconfig))
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        stack.callback(api.close)
        kubectl = kubectl_of(kubeconfig)
        objs = _render(kubectl, flavor)
        _install(stack, Testbed(kubeconfig, api, kubectl, flavor=flavor), objs, policy=policy)
        env = _function_env(api, objs, Path(tmp) / "kubeconfig", flavor=flavor, audience=audience,
                            production=production, token_seconds=token_seconds)
        env |= settings or {}
        function = stack.enter_context(FunctionProcess(env, log=stack.enter_context(
            (logs / "function.log").open("ab"))))
        chain = Chain(kubeconfig, api, kubectl, function, log_dir=logs, flavor=flavor)
        _front(stack, chain, objs, env, queue_proxy=queue_proxy, replicas=replicas)
        kept = [o for o in objs if o["kind"] != "ApiServerSource" or sources is None
                or o["metadata"]["name"] in sources]
        feeds = knative_event_sources(api, kept, chain.sink, logs, audience is not None, ping_seconds)
        for source in feeds:
            stack.enter_context(source)  # each source's __enter__ starts it and returns it
        chain.sources = feeds
        yield chain


@contextmanager
def admission_only(kubeconfig: str | Path, *, flavor: str = "kai") -> Iterator[Testbed]:
    """The admission policies alone, waited on until they act: no function, no sources, so a JobSet is named at its
    create and nothing makes its PodGroups (its pods wait unbound). ``python -m bench chain``'s ``named-only`` path:
    what naming costs at the JobSet's create, apart from the function's reads. Removed when the block ends."""
    kubeconfig = Path(kubeconfig)
    api = k8s.new_client(str(kubeconfig))
    with ExitStack() as stack:
        stack.callback(api.close)
        testbed = Testbed(kubeconfig, api, kubectl_of(kubeconfig), flavor=flavor)
        _install(stack, testbed, _render(testbed.kubectl_path, flavor), policy=True)
        yield testbed


def _render(kubectl: Path, flavor: str) -> list[dict[str, Any]]:
    """The flavor's manifests as ``kubectl kustomize`` renders them."""
    rendered = yaml.safe_load_all(subprocess.run([str(kubectl), "kustomize", str(MANIFESTS[flavor])],
                                                 capture_output=True, text=True, check=True).stdout)
    return [o for o in rendered if o]


def _install(stack: ExitStack, testbed: Testbed, objs: list[dict[str, Any]], *, policy: bool) -> None:
    """The function's identity and the sample runtimes applied; with ``policy``, the admission policies too, waited
    on until they act, and removed when ``stack`` closes (the testbed may be shared with tiers that do not expect
    them)."""
    scheduler = SCHEDULERS[testbed.flavor]
    testbed.apply([o for o in objs if o["kind"] in _FUNCTION_KINDS]
                  + [for_scheduler(sample(r), scheduler) for r in RUNTIMES])
    if not policy:
        return
    stack.callback(_remove_policies, testbed)
    testbed.apply([o for o in objs if o["kind"] in _POLICY_KINDS])
    _wait_for_policy(testbed, scheduler)


def _remove_policies(testbed: Testbed) -> None:
    for plural, name in (("mutatingadmissionpolicybindings", POLICY), ("mutatingadmissionpolicies", POLICY),
                         ("mutatingadmissionpolicybindings", SEGMENT_POLICY),
                         ("mutatingadmissionpolicies", SEGMENT_POLICY),
                         ("validatingadmissionpolicybindings", MARKS_POLICY),
                         ("validatingadmissionpolicies", MARKS_POLICY)):
        testbed.kubectl("delete", f"{plural}.admissionregistration.k8s.io", name, "--ignore-not-found", check=False)


def _function_env(api: client.ApiClient, objs: list[dict[str, Any]], kubeconfig: Path, *, flavor: str,
                  audience: str | None, production: bool, token_seconds: int) -> dict[str, str]:
    """The function's environment: the Service's settings and a kubeconfig at ``kubeconfig`` with its
    ServiceAccount's token (Knative's adapters make their own OIDC tokens)."""
    core = client.CoreV1Api(api)
    admin = api.configuration
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kai-fn",
        "clusters": [{"name": "testbed", "cluster": {"server": admin.host,
                                                     "certificate-authority": admin.ssl_ca_cert}}],
        "users": [{"name": "kai-fn", "user": {"token": _token(core, NAMESPACE, FUNCTION_SA, [], token_seconds)}}],
        "contexts": [{"name": "kai-fn", "context": {"cluster": "testbed", "user": "kai-fn"}}],
    }))
    env = {**_service_env(objs), "KUBECONFIG": str(kubeconfig), "KAI_PODGROUP_FLAVOR": flavor}
    if not production:  # the scenarios make runtimes and opt namespaces in while the function runs
        env |= {"KAI_FN_RUNTIME_CACHE_SECONDS": "0", "KAI_FN_NAMESPACE_CACHE_SECONDS": "0"}
    env |= {"KAI_FN_AUDIENCE": audience or "", "KAI_FN_SENDERS": ""}  # knative/base's senders, or none at all
    return env


def _front(stack: ExitStack, chain: Chain, objs: list[dict[str, Any]], env: dict[str, str], *, queue_proxy: bool,
           replicas: int) -> None:
    """What stands between the sources and the function: its queue-proxy, and with more replicas, each one's
    function and queue-proxy behind a spreader."""
    logs = chain.log_dir or chain.kubeconfig.parent

    def log(name: str) -> IO[bytes]:
        return stack.enter_context((logs / name).open("ab"))

    if queue_proxy:
        chain.queue_proxy = stack.enter_context(QueueProxy(service_settings(objs), chain.function.port,
                                                           log=log("queue-proxy.log")))
        stack.callback(lambda: [p.kill() for p in (chain.queue_proxy, chain.function) if p])  # a scale-down's
    for n in range(1, replicas):
        more = stack.enter_context(FunctionProcess(env, log=log(f"function-{n}.log")))
        proxy = stack.enter_context(QueueProxy(service_settings(objs), more.port, log=log(f"queue-proxy-{n}.log"))
                                    ) if queue_proxy else None
        chain.replicas.append((more, proxy))
    if chain.replicas:
        front = [chain.queue_proxy.url if chain.queue_proxy else chain.function.url] + [
            proxy.url if proxy else more.url for more, proxy in chain.replicas]
        chain.spreader = stack.enter_context(Spreader(front))


def serve(argv: list[str] | None = None) -> int:
    """``python -m kai_fn.local.chain serve --kubeconfig PATH``: :func:`running` until SIGTERM or SIGINT, or until
    the function exits (then 1, so whoever runs it sees it down and starts it again). Once the function answers and
    its sources run, ``--ready-file`` gets ``url <function URL>`` and ``function <pid>``."""
    parser = argparse.ArgumentParser(prog="python -m kai_fn.local.chain serve", description=serve.__doc__)
    parser.add_argument("--kubeconfig", required=True, type=Path, help="the testbed's admin kubeconfig")
    parser.add_argument("--flavor", choices=sorted(MANIFESTS), default="kai")
    parser.add_argument("--log-dir", type=Path, help="where function.log goes (default: next to the kubeconfig)")
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--ping-seconds", type=float, default=60.0,
                        help="the PingSource's period (knative/base: every minute)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a setting of the function")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    settings = dict(kv.split("=", 1) for kv in args.set)
    try:
        with running(args.kubeconfig, flavor=args.flavor, ping_seconds=args.ping_seconds, log_dir=args.log_dir,
                     settings=settings) as chain:
            assert chain.function.proc is not None
            if args.ready_file:
                partial = args.ready_file.with_suffix(".partial")
                partial.write_text(f"url {chain.function.url}\nfunction {chain.function.proc.pid}\n"
                                   f"sink {chain.sink}\n")
                os.replace(partial, args.ready_file)
            logging.info("kai_fn (%s flavor) serving at %s; sources: %s", args.flavor, chain.function.url,
                         ", ".join(type(s).__name__ for s in chain.sources))
            while (code := chain.function.proc.poll()) is None:
                time.sleep(1)
            logging.error("the function exited (%s): stopping its sources", code)
            return 1
    finally:
        if args.ready_file:
            args.ready_file.unlink(missing_ok=True)
        logging.info("kai_fn stopped")


if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"]:
        sys.exit("usage: python -m kai_fn.local.chain serve --kubeconfig PATH [--flavor kai|scheduler-plugins] ...")
    sys.exit(serve(sys.argv[2:]))
