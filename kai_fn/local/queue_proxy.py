"""Knative Serving's queue-proxy in front of the function, as a Knative Service's pod runs it, out of cluster.

The binary is ``cmd/queue`` of knative.dev/serving (``testbed/build.sh serving``, its fixed ports made settable). It
proxies to the function, holding back what exceeds ``containerConcurrency`` (503 beyond ten times as many waiting),
cutting requests at ``timeoutSeconds`` and answering readiness with the Service's ``readinessProbe``. :func:`queue_env`
is what Serving's reconciler computes for knative/base's Service (``pkg/reconciler/revision/resources/queue.go``);
:class:`QueueProxy` is one process with its log; :func:`scale_down` removes a pod as Knative does.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Self

from kai_fn.local.process import FunctionProcess, Output, built, end, free_port, listens

BINARY = "queue"
REVISION = "kai-fn-00001"
# What the kubelet sends to queue-proxy's readiness probe (resources.makeQueueContainer's queueProxyReadinessProbe).
PROBE_HEADERS = {"K-Network-Probe": "queue", "User-Agent": "kube-probe/1.36"}
_REQUEST_LINE = re.compile(r'^\{"httpRequest":')


def serving_dir() -> Path:
    return built("serving")


@dataclass(frozen=True)
class ServiceSettings:
    """What the rendered Knative Service says of the data plane."""

    name: str
    container_concurrency: int
    timeout_seconds: int
    readiness_probe: dict[str, Any] | None


def service_settings(objs: list[dict[str, Any]]) -> ServiceSettings:
    """From the rendered manifests: the Service's ``containerConcurrency`` (0, Knative's default: unlimited),
    ``timeoutSeconds`` (300, config-defaults' revision-timeout-seconds), and its container's ``readinessProbe``."""
    service = next(o for o in objs if o["kind"] == "Service")
    spec = service["spec"]["template"]["spec"]
    return ServiceSettings(name=service["metadata"]["name"], container_concurrency=int(spec.get("containerConcurrency")
                                                                                       or 0),
                           timeout_seconds=int(spec.get("timeoutSeconds") or 300),
                           readiness_probe=spec["containers"][0].get("readinessProbe"))


def readiness_probe(probe: dict[str, Any] | None, user_port: int) -> str:
    """SERVING_READINESS_PROBE: the user container's probe as Serving's webhook defaults it (successThreshold 1; a
    TCP check when none is given; with periodSeconds, failureThreshold 3 and timeoutSeconds 1) and the reconciler
    points it at the user port on 127.0.0.1 (applyReadinessProbeDefaults), JSON as Go encodes a corev1.Probe."""
    p = json.loads(json.dumps(probe or {}))
    if not any(k in p for k in ("httpGet", "tcpSocket", "exec", "grpc")):
        p["tcpSocket"] = {"port": 0}
    if not p.get("successThreshold"):
        p["successThreshold"] = 1
    if p.get("periodSeconds"):
        p["failureThreshold"] = p.get("failureThreshold") or 3
        p["timeoutSeconds"] = p.get("timeoutSeconds") or 1
    if "httpGet" in p:
        p["httpGet"] = {**p["httpGet"], "port": p["httpGet"].get("port") or user_port, "host": "127.0.0.1",
                        "scheme": p["httpGet"].get("scheme") or "HTTP"}
    elif "tcpSocket" in p or "exec" in p:
        p.pop("exec", None)
        p["tcpSocket"] = {"host": "127.0.0.1", "port": (p.get("tcpSocket") or {}).get("port") or user_port}
    if p.get("periodSeconds") and p.get("timeoutSeconds", 0) < 1:
        p["timeoutSeconds"] = 1
    return json.dumps(p, separators=(",", ":"))


def queue_env(settings: ServiceSettings, *, user_port: int, serving_port: int, admin_port: int, metrics_port: int,
              request_metrics_port: int, pod: str, namespace: str = "kai-fn",
              revision: str = REVISION) -> dict[str, str]:
    """The queue-proxy container's env as makeQueueContainer writes it (Serving's defaults for what the Service does
    not set: no response-start or idle timeout, HTTP/2 auto-detection, full duplex and multi-container probes off, no
    TLS settings), plus the two ports the patch makes settable. OBSERVABILITY_CONFIG is config-observability with
    request metrics in Prometheus format and request logs on."""
    observability = {"tracing": {}, "metrics": {}, "runtime": {},
                     "requestMetrics": {"protocol": "prometheus", "endpoint": f"127.0.0.1:{request_metrics_port}"},
                     "enableRequestLog": True}
    return {
        "SERVING_NAMESPACE": namespace, "SERVING_SERVICE": settings.name, "SERVING_CONFIGURATION": settings.name,
        "SERVING_REVISION": revision, "QUEUE_SERVING_PORT": str(serving_port), "QUEUE_SERVING_TLS_PORT": "8112",
        "CONTAINER_CONCURRENCY": str(settings.container_concurrency),
        "REVISION_TIMEOUT_SECONDS": str(settings.timeout_seconds),
        "REVISION_RESPONSE_START_TIMEOUT_SECONDS": "0", "REVISION_IDLE_TIMEOUT_SECONDS": "0",
        "SERVING_POD": pod, "SERVING_POD_IP": "127.0.0.1", "SERVING_LOGGING_CONFIG": "", "SERVING_LOGGING_LEVEL": "",
        "USER_PORT": str(user_port), "SYSTEM_NAMESPACE": "knative-serving",
        "SERVING_READINESS_PROBE": readiness_probe(settings.readiness_probe, user_port), "HOST_IP": "127.0.0.1",
        "ENABLE_HTTP2_AUTO_DETECTION": "false", "ENABLE_HTTP_FULL_DUPLEX": "false", "ROOT_CA": "",
        "QUEUE_PROXY_TLS_MIN_VERSION": "", "QUEUE_PROXY_TLS_MAX_VERSION": "", "QUEUE_PROXY_TLS_CIPHER_SUITES": "",
        "QUEUE_PROXY_TLS_CURVE_PREFERENCES": "", "ENABLE_MULTI_CONTAINER_PROBES": "false",
        "OBSERVABILITY_CONFIG": json.dumps(observability),
        # testbed/serving/queue-ports.patch: upstream's fixed :8022 and :9090
        "QUEUE_ADMIN_PORT": str(admin_port), "QUEUE_METRICS_PORT": str(metrics_port),
    }


class QueueProxy:
    """One queue-proxy in front of the function listening on ``user_port``; ``url`` is what the sources deliver to.
    ``port``: its serving port (a free one unless given: a replacement pod takes its predecessor's)."""

    def __init__(self, settings: ServiceSettings, user_port: int, *, log: IO[bytes] | int | None = subprocess.DEVNULL,
                 port: int | None = None, pod: str = f"{REVISION}-deployment-0", exe: Path | None = None) -> None:
        self.settings, self.user_port, self.log, self.exe, self.pod = settings, user_port, log, exe, pod
        self.fixed_port = port
        self._choose_ports()
        self.output = Output(log)
        self.proc: subprocess.Popen[bytes] | None = None

    def _choose_ports(self) -> None:
        self.port, self.admin_port, self.metrics_port = self.fixed_port or free_port(""), free_port(""), free_port("")
        self.request_metrics_port = free_port("")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return queue_env(self.settings, user_port=self.user_port, serving_port=self.port, admin_port=self.admin_port,
                         metrics_port=self.metrics_port, request_metrics_port=self.request_metrics_port, pod=self.pod)

    def start(self, ready_timeout: float = 60.0) -> Self:
        """Starts it and waits until the kubelet would see it ready: its readiness probe (a GET on the serving port
        with ``K-Network-Probe: queue``, which probes the function with the Service's readinessProbe) answers 200.
        Ports another process took between :func:`free_port` and the bind are given up for new ones."""
        self.exe = self.exe or serving_dir() / BINARY
        for _ in range(3):
            if self._started(ready_timeout):
                return self
            self._choose_ports()
        raise RuntimeError("queue-proxy's ports were taken by other processes three times")

    def _started(self, ready_timeout: float) -> bool:
        """True once ready and listening on all its ports; False when another process had one of them. On the
        request metrics' port that does not stop it: knative.dev/pkg's Prometheus exporter binds on a goroutine of
        its own and only prints the error."""
        self.proc = subprocess.Popen([str(self.exe)], env={"PATH": os.environ.get("PATH", ""), **self.env},
                                     stdout=self.output.restart(), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if self.output.address_in_use():
                    return False
                raise RuntimeError(f"queue-proxy exited with {self.proc.returncode} before it was ready"
                                   + self.output.quoted())
            if self.ready():
                if listens(self.proc, {self.port, self.admin_port, self.metrics_port, self.request_metrics_port}):
                    return True
                if self.output.address_in_use():
                    self.kill()
                    return False
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"queue-proxy on {self.url} not ready within {ready_timeout:.0f}s")

    def ready(self) -> bool:
        """The kubelet's readiness probe of the queue-proxy container (503 while it drains)."""
        try:
            request = urllib.request.Request(self.url, headers=PROBE_HEADERS)
            with urllib.request.urlopen(request, timeout=2) as response:
                ok: bool = response.status == 200
                return ok
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def wait_for_drain(self, timeout: float | None = None) -> None:
        """The user container's preStop hook: GET ``/wait-for-drain`` on the admin port, which returns once
        queue-proxy has drained (no request for 30 s after its SIGTERM)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/wait-for-drain", timeout=timeout) as r:
            r.read()

    def request_metrics(self) -> dict[str, float]:
        """Its Prometheus request metrics (OpenTelemetry's names), summed over labels: ``<name>`` or
        ``<name>{code}`` for series with an HTTP status code label."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.request_metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name_labels, _, value = line.rpartition(" ")
            name, _, labels = name_labels.partition("{")
            code = re.search(r'http_response_status_code="(\d+)"', labels)
            key = f"{name}{{{code.group(1)}}}" if code else name
            out[key] = out.get(key, 0.0) + float(value)
        return out

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM: it starts draining (returns at once)."""
        if self.running:
            assert self.proc
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM and wait for it to exit (its drain takes 30 s after the last request), SIGKILL after ``timeout``."""
        self.terminate()
        end(self.proc, timeout)
        self.output.close()

    def kill(self) -> None:
        end(self.proc)
        self.output.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        # The chain's end, not a scale-down: nobody waits out the 30 s drain.
        self.kill()


def request_lines(log_text: str) -> list[dict[str, Any]]:
    """queue-proxy's request log lines (upstream's default template), parsed: ``httpRequest.status`` etc."""
    out = []
    for line in log_text.splitlines():
        line = line.split("] ", 1)[-1] if line.startswith("[") else line
        if _REQUEST_LINE.match(line):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


@dataclass
class ScaleDown:
    """What :func:`scale_down` saw, in seconds since it began."""

    drained_at: float = 0.0        # the preStop hook returned: queue-proxy quiet for 30 s
    function_stopped_at: float = 0.0
    function_exit: int | None = None
    queue_proxy_exit: int | None = None
    replacement_at: float = 0.0    # the new pod's queue-proxy serves the sink


def scale_down(chain: Any, *, grace_seconds: float | None = None) -> ScaleDown:
    """The chain's pod scaled down as Knative does it, replaced by a new one serving the same sink.

    The new pod's function starts first (a rollout's new pod is ready before the old goes). Then the old pod is
    deleted: its queue-proxy gets SIGTERM and drains while the preStop hook of the function's container waits on
    ``/wait-for-drain``; once it returns, the function gets SIGTERM, answers the requests in hand and drains its work
    queue (kai_fn.function.serve: 5 + 20 s, under the pod's terminationGracePeriodSeconds = ``timeoutSeconds``); the
    old queue-proxy exits once its requests in flight are done, and the new pod's queue-proxy takes the sink's port.
    Deliveries in that gap are refused, and the adapters' tries cover it (3.1 s). ``chain.function`` and
    ``chain.queue_proxy`` are the new pod's afterwards."""
    old_fn, old_qp = chain.function, chain.queue_proxy
    if old_qp is None:
        raise RuntimeError("the chain runs without queue-proxy (KAI_FN_CHAIN_QUEUE_PROXY=0)")
    grace = grace_seconds if grace_seconds is not None else old_qp.settings.timeout_seconds
    began, seen = time.monotonic(), ScaleDown()
    new_fn = FunctionProcess(old_fn.env, log=old_fn.log).start()
    hook = threading.Thread(target=old_qp.wait_for_drain, kwargs={"timeout": grace}, daemon=True)
    old_qp.terminate()
    hook.start()
    hook.join(grace)
    seen.drained_at = time.monotonic() - began
    assert old_fn.proc is not None
    old_fn.proc.send_signal(signal.SIGTERM)
    try:
        seen.function_exit = old_fn.proc.wait(max(1.0, grace - seen.drained_at))
    except subprocess.TimeoutExpired:
        old_fn.kill()
        seen.function_exit = -9
    seen.function_stopped_at = time.monotonic() - began
    assert old_qp.proc is not None
    try:
        seen.queue_proxy_exit = old_qp.proc.wait(max(1.0, grace - seen.function_stopped_at))
    except subprocess.TimeoutExpired:
        old_qp.kill()
        seen.queue_proxy_exit = -9
    new_qp = QueueProxy(old_qp.settings, new_fn.port, log=old_qp.log, port=old_qp.port,
                        pod=f"{REVISION}-deployment-{int(time.time()) % 100000}", exe=old_qp.exe).start()
    seen.replacement_at = time.monotonic() - began
    chain.function, chain.queue_proxy = new_fn, new_qp
    return seen
