"""Event delivery for a testbed without Knative: an ApiServerSource stand-in and a PingSource.

:class:`ApiServerSource` watches one resource and posts each change as Knative's adapter does, byte for byte
(tests/testbed/test_adapter_parity.py): binary mode, Go's header case, the adapter's types, extensions and headers.
Like the adapter it watches only namespaces its ``namespaceSelector`` matches, sends no add for what exists when it
starts, and delivers with a direct sink's retries (:class:`kai_fn.local.delivery.Adapter`), in order per namespace;
with a token provider it sends ``Authorization: Bearer``. Unlike it, it reads a namespace's labels when it first sees
an object there, so it also sees a TrainJob made right after its namespace was labelled, which the adapter misses.
:class:`PingSource` sends ``dev.knative.sources.ping`` with ``{"resync": true}`` every ``period`` seconds.
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Self

from cloudevents.conversion import to_binary
from cloudevents.http import CloudEvent
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_fn.local import k8s
from kai_fn.local.delivery import Adapter, Delivery
from kai_fn.commands.invoke import Sample

log = logging.getLogger(__name__)
ENABLED = "kai-fn.io/enabled=true"
ACTIONS = {"ADDED": "add", "MODIFIED": "update", "DELETED": "delete"}
PING_SOURCE = "/apis/v1/namespaces/kai-fn/pingsources/kai-fn-resync"
PING_DATA = b'{"resync": true}'  # spec.data of knative/base/pingsource.yaml


@dataclass(frozen=True)
class Resource:
    """What one ``spec.resources`` entry of an ApiServerSource names."""

    group: str
    version: str
    kind: str
    plural: str
    selector: str | None = None  # label selector on the objects

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


TRAINJOBS = Resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs")
# The JobSets the admission policy named (knative/base/apiserversource-jobsets.yaml)
NAMED_JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", "kai-fn/named=true")
PODGROUPS = {  # kai_fn's own PodGroups, by its managed-by label (knative/base/apiserversource-podgroups.yaml)
    "kai": Resource("scheduling.run.ai", "v2alpha2", "PodGroup", "podgroups", "app.kubernetes.io/managed-by=kai-fn"),
    "scheduler-plugins": Resource("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups",
                                  "app.kubernetes.io/managed-by=kai-fn"),
}


def go_case(headers: dict[str, str]) -> dict[str, str]:
    """The adapter is written in Go: ``Ce-Specversion``, not ``ce-specversion``."""
    return {"-".join(part.capitalize() for part in k.split("-")): v for k, v in headers.items()}


_GO_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def go_json(data: Any, *, struct: bool = False) -> bytes:
    """encoding/json's Marshal, as sdk-go writes the data: compact, UTF-8, ``<``, ``>``, ``&``, U+2028 and U+2029
    escaped (they can only occur inside strings), and a map's keys sorted; ``struct``: a Go struct's fields, in the
    order given."""
    text = json.dumps(data, sort_keys=not struct, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in _GO_ESCAPES:
        text = text.replace(char, escaped)
    return text.encode()


def go_time(when: datetime | None = None) -> str:
    """Go's time.RFC3339Nano in UTC (sdk-go's WithTimeNow): trailing zeros of the fraction dropped, ``Z``."""
    when = (when or datetime.now(UTC)).astimezone(UTC)
    fraction = f"{when.microsecond:06d}".rstrip("0")
    return when.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def sample_of(event: CloudEvent, *, struct: bool = False) -> Sample:
    headers, _ = to_binary(event)
    return Sample(event["type"], "", go_case(dict(headers)), go_json(event.get_data(), struct=struct))


def apiserver_event(resource: Resource, obj: dict[str, Any], action: str, source: str,
                    mode: Literal["Resource", "Reference"] = "Resource") -> Sample:
    """Reference mode's data is a corev1.ObjectReference: its fields in struct order, empty ones left out. The
    subject is the adapter's createSelfLink: always ``/apis/<apiVersion>/namespaces/<ns>/...``, core kinds and
    cluster-scoped objects (``namespaces//``) included."""
    meta = obj["metadata"]
    ns, name = meta.get("namespace", ""), meta["name"]
    ref = {"kind": resource.kind, "namespace": ns, "name": name, "apiVersion": resource.api_version}
    data = obj if mode == "Resource" else {k: v for k, v in ref.items() if v}
    kind = "resource" if mode == "Resource" else "ref"
    return sample_of(CloudEvent({
        "id": str(uuid.uuid4()), "type": f"dev.knative.apiserver.{kind}.{action}", "source": source,
        "time": go_time(), "datacontenttype": "application/json",
        "subject": f"/apis/{resource.api_version}/namespaces/{ns}/{resource.plural}/{name}",
        "kind": resource.kind, "apiversion": resource.api_version, "name": name, "namespace": ns,
    }, data), struct=mode == "Reference")


def ping_event(data: bytes = PING_DATA) -> Sample:
    """mtping sends the PingSource's ``spec.data`` as it is written (knative/base/pingsource.yaml), not re-encoded."""
    headers, _ = to_binary(CloudEvent({"id": str(uuid.uuid4()), "type": "dev.knative.sources.ping",
                                       "source": PING_SOURCE, "time": go_time(),
                                       "datacontenttype": "application/json"}, None))
    return Sample("dev.knative.sources.ping", "", go_case(dict(headers)), data)


class _Sender:
    """A background thread that delivers through an :class:`Adapter`; ``stop()`` ends it between events."""

    def __init__(self, sink: str, token: Callable[[], str] | None, adapter: Adapter | None,
                 namespace: str = "kai-fn") -> None:
        self.namespace = namespace  # the source's own: the adapter's client sends it as Kn-Namespace
        self.stopping = threading.Event()
        self.adapter = adapter or Adapter(sink, stop=self.stopping)
        self.token = token
        self.deliveries: list[Delivery] = []
        self.thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)

    def deliver(self, sample: Sample) -> Delivery:
        headers = {**sample.headers, "Kn-Namespace": self.namespace}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token()}"
        sample = Sample(sample.name, sample.description, headers, sample.body)
        delivery = self.adapter.send(sample)
        self.deliveries.append(delivery)
        if not delivery.acked:
            log.warning("%s: %s not delivered after %d tries: %s", type(self).__name__, sample.name,
                        len(delivery.tries), delivery.statuses)
        return delivery

    def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        self.thread.join(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ApiServerSource(_Sender):
    """One watch; each namespace's events go to a delivery thread of that namespace, in order, so one namespace's
    slow or retried event holds up only that namespace, as the adapter's watch per namespace does."""

    def __init__(self, api: client.ApiClient, resource: Resource, sink: str, *,
                 mode: Literal["Resource", "Reference"] = "Resource", namespace_selector: str = ENABLED,
                 token: Callable[[], str] | None = None, adapter: Adapter | None = None) -> None:
        super().__init__(sink, token, adapter)
        self.queues: dict[str, queue.Queue[Sample]] = {}
        self.workers: list[threading.Thread] = []
        self.api, self.resource, self.mode = api, resource, mode
        self.objects, self.core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        key, _, value = namespace_selector.partition("=")
        self.selector = (key, value)
        self.enabled: set[str] = set()
        self.source = api.configuration.host
        self.thread.name = f"ApiServerSource-{resource.plural}"

    def watches(self, namespace: str) -> bool:
        """The namespaceSelector, read on first sight of a namespace (positives are kept)."""
        if namespace in self.enabled:
            return True
        try:
            labels = k8s.meta(self.core.read_namespace(namespace)).labels or {}
        except ApiException:
            return False
        if labels.get(self.selector[0]) == self.selector[1]:
            self.enabled.add(namespace)
            return True
        return False

    def _list(self) -> str:
        listed = self.objects.list_cluster_custom_object(self.resource.group, self.resource.version,
                                                         self.resource.plural, label_selector=self.resource.selector)
        return str(k8s.obj(listed)["metadata"]["resourceVersion"])

    def start(self) -> Self:
        """Lists before returning, so every change made after ``start()`` is delivered."""
        self.version: str | None = self._list()
        return super().start()

    def _run(self) -> None:
        version = self.version
        while not self.stopping.is_set():
            try:
                version = version or self._list()  # no add for what exists already
                stream = k8s.Stream(self.objects.list_cluster_custom_object, self.resource.group,
                                    self.resource.version, self.resource.plural,
                                    label_selector=self.resource.selector, resource_version=version,
                                    allow_watch_bookmarks=True, timeout_seconds=5)
                for change in stream:
                    obj = change["object"]
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if change["type"] == "ERROR":
                        version = None  # 410 Gone: list again, as a reflector does (and miss what happened)
                        break
                    action = ACTIONS.get(change["type"])
                    ns = obj["metadata"].get("namespace", "")
                    if action and self.watches(ns):
                        self._queue(ns).put(apiserver_event(self.resource, obj, action, self.source, self.mode))
                    if self.stopping.is_set():
                        stream.stop()
                        break
            except ApiException as error:
                if error.status == 410:
                    version = None
                else:
                    log.warning("ApiServerSource %s: watch failed: %s", self.resource.plural, error.reason)
                    self.stopping.wait(1)
            except Exception as error:  # the API server restarting: reconnect, as the adapter's informer does
                log.warning("ApiServerSource %s: watch broke: %s", self.resource.plural, error)
                self.stopping.wait(1)


    def _queue(self, namespace: str) -> queue.Queue[Sample]:
        if namespace not in self.queues:
            self.queues[namespace] = queue.Queue()
            worker = threading.Thread(target=self._deliver_from, args=(self.queues[namespace],), daemon=True,
                                      name=f"{self.thread.name}-{namespace}")
            self.workers.append(worker)
            worker.start()
        return self.queues[namespace]

    def _deliver_from(self, events: queue.Queue[Sample]) -> None:
        while not self.stopping.is_set():
            try:
                self.deliver(events.get(timeout=0.2))
            except queue.Empty:
                continue

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)
        for worker in self.workers:
            worker.join(timeout)


class PingSource(_Sender):
    def __init__(self, sink: str, period: float, *, token: Callable[[], str] | None = None,
                 adapter: Adapter | None = None) -> None:
        super().__init__(sink, token, adapter)
        self.period = period

    def _run(self) -> None:
        while not self.stopping.wait(self.period):
            self.deliver(ping_event())
