"""Cluster access: typed calls on the process's one API client (:mod:`kai_fn.function.client`), every call bounded
by a timeout and counted per event, and the process's caches (runtimes, Queues) and memory (:mod:`recent`)."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import urllib3
from kubernetes.client.api.custom_objects_api import CustomObjectsApi
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from kai_fn.core import keys, turns
from kai_fn.core.queue_check import QueueTree
from kai_fn.core.runtime import RuntimeTarget
from kai_fn.function.client import (  # noqa: F401 - the errors callers catch, where they get them
    Gone, GuardFailed, NoClusterConfig, NotServed, Stale, Transient, api_client, request_shape,
)
from kai_fn.function import metrics
from kai_fn.function.recent import Recent
from kai_fn.function.settings import Settings

T = TypeVar("T")
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"


@dataclass
class Cluster:
    """Typed calls on one shared ApiClient, the process's caches and memory; :meth:`session` counts the calls one
    event makes."""

    client: ApiClient
    timeout: float
    runtime_ttl: float
    _runtimes: dict[RuntimeTarget, tuple[float, dict[str, Any]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _fetching: dict[RuntimeTarget | str, threading.Lock] = field(default_factory=dict)
    _queues: tuple[float, QueueTree] | None = None
    _cursors: dict[str, str] = field(default_factory=dict)  # the resync's turns (kai_fn/core/turns.py)
    recent: Recent = field(default_factory=Recent)  # what this process did lately (kai_fn.function.recent)

    @classmethod
    def from_settings(cls, settings: Settings, kubeconfig: str | None = None, context: str | None = None) -> Cluster:
        return cls(api_client(kubeconfig, context), settings.api_timeout_seconds, settings.runtime_cache_seconds)

    def session(self) -> Session:
        return Session(self)

    def cached_runtime(self, target: RuntimeTarget) -> dict[str, Any] | None:
        with self._lock:
            hit = self._runtimes.get(target)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        return None

    def cached_queues(self) -> QueueTree | None:
        with self._lock:
            hit = self._queues
        return hit[1] if hit and hit[0] > time.monotonic() else None

    def remember_queues(self, tree: QueueTree) -> None:
        if self.runtime_ttl > 0:
            with self._lock:
                self._queues = (time.monotonic() + self.runtime_ttl, tree)

    def take_turn(self, name: str, found: list[T], limit: int, key: Callable[[T], str] = turns.order) -> list[T]:
        """The resync's next ``limit`` of ``found`` for the list ``name``, after the ones the last run took."""
        with self._lock:
            batch = turns.turn(found, limit, self._cursors.get(name), key)
            if batch:
                self._cursors[name] = key(batch[-1])
        return batch

    def fetch_lock(self, target: RuntimeTarget | str) -> threading.Lock:
        """One fetch per runtime at a time: when an entry expires, the events in flight wait for one GET."""
        with self._lock:
            return self._fetching.setdefault(target, threading.Lock())

    def remember_runtime(self, target: RuntimeTarget, runtime: dict[str, Any]) -> None:
        if self.runtime_ttl > 0:
            with self._lock:
                self._runtimes[target] = (time.monotonic() + self.runtime_ttl, runtime)


def _event_lost(namespace: str, body: dict[str, Any], why: str) -> None:
    """An Event that could not be written is logged and counted: ``status`` tells a blocked TrainJob from a held one
    by its Warnings, so one lost to RBAC must show somewhere."""
    reason = str(body.get("reason", "?"))
    metrics.EVENTS_NOT_WRITTEN.labels(reason if reason.isalnum() and len(reason) <= 40 else "other").inc()
    logging.getLogger("kai_fn").warning("event not written", extra={"fields": {
        "namespace": namespace, "name": (body.get("involvedObject") or {}).get("name"), "event_reason": reason,
        "reason": why}})


@dataclass
class Session:
    cluster: Cluster
    calls: int = 0

    @property
    def _custom(self) -> CustomObjectsApi:
        return CustomObjectsApi(self.cluster.client)

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        self.calls += 1
        try:
            return fn(*args, _request_timeout=self.cluster.timeout, **kwargs)
        except ApiException as error:
            if error.status in (404, 409, 422):
                raise
            raise Transient(f"API {error.status} {error.reason or ''}".strip()) from None
        except (urllib3.exceptions.HTTPError, TimeoutError, ConnectionError, OSError) as error:
            raise Transient(f"API unreachable or too slow: {type(error).__name__}") from None

    def _get(self, fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any] | None:
        try:
            return self._call(fn, *args)
        except ApiException as error:
            if error.status == 404:
                return None
            raise Transient(f"API {error.status} on get") from None

    def trainjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(self._custom.get_namespaced_custom_object,
                         keys.TRAINER_GROUP, keys.TRAINER_VERSION, namespace, "trainjobs", name)

    def runtime(self, target: RuntimeTarget) -> dict[str, Any] | None:
        """A runtime, from the cache while it is fresh; a missing one is never cached."""
        if (hit := self.cluster.cached_runtime(target)) is not None:
            return hit
        if self.cluster.runtime_ttl <= 0:
            return self._fetch_runtime(target)
        with self.cluster.fetch_lock(target):
            if (hit := self.cluster.cached_runtime(target)) is not None:
                return hit
            return self._fetch_runtime(target)

    def _fetch_runtime(self, target: RuntimeTarget) -> dict[str, Any] | None:
        if target.namespace:
            found = self._get(self._custom.get_namespaced_custom_object, keys.TRAINER_GROUP, keys.TRAINER_VERSION,
                              target.namespace, "trainingruntimes", target.name)
        else:
            found = self._get(self._custom.get_cluster_custom_object, keys.TRAINER_GROUP, keys.TRAINER_VERSION,
                              "clustertrainingruntimes", target.name)
        if found is not None:
            self.cluster.remember_runtime(target, found)
        return found

    def queues(self, fresh: bool = False) -> tuple[QueueTree, bool]:
        """All KAI Queues (one LIST gives the queue, its ancestors and whether it is a leaf), from the cache while
        it is fresh (``KAI_FN_RUNTIME_CACHE_SECONDS``); the flag says whether the cache answered."""
        if not fresh and (hit := self.cluster.cached_queues()) is not None:
            return hit, True
        with self.cluster.fetch_lock("queues"):
            if not fresh and (hit := self.cluster.cached_queues()) is not None:
                return hit, True
            group, version = keys.KAI_QUEUE_API.split("/")
            tree = QueueTree.of(self._list(self._custom.list_cluster_custom_object, group, version, "queues"))
            self.cluster.remember_queues(tree)
            return tree, False

    def podgroups(self, api_version: str = keys.KAI_PODGROUP_API, namespace: str | None = None,
                  selector: str = f"{keys.MANAGED_BY_LABEL}={keys.MANAGED_BY}") -> list[dict[str, Any]]:
        """PodGroups kai_fn made (KAI's unless told), in every namespace unless told."""
        group, version = api_version.split("/")
        if namespace is None:
            return self._list(self._custom.list_cluster_custom_object, group, version, "podgroups",
                              label_selector=selector)
        return self._list(self._custom.list_namespaced_custom_object, group, version, namespace, "podgroups",
                          label_selector=selector)

    def _list(self, fn: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        try:
            found = self._call(fn, *args, **kwargs)
        except ApiException as error:
            if error.status == 404:
                raise NotServed(f"{'/'.join(str(a) for a in args[:3])} is not served (404 on list)") from None
            raise Transient(f"API {error.status} on list") from None
        return list((found or {}).get("items") or [])

    def jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        group, version = keys.JOBSET_API.split("/")
        return self._get(self._custom.get_namespaced_custom_object, group, version, namespace, "jobsets", name)

    def topology(self, name: str) -> dict[str, Any] | None:
        """KAI's Topology (cluster-scoped), read to check the levels a gang names; None when it does not exist."""
        group, version = keys.KAI_TOPOLOGY_API.split("/")
        return self._get(self._custom.get_cluster_custom_object, group, version, "topologies", name)

    def create_podgroup(self, body: dict[str, Any]) -> bool:
        """True when created; False when one of that name exists already (kept untouched)."""
        group, version = body["apiVersion"].split("/")
        try:
            self._call(self._custom.create_namespaced_custom_object, group, version,
                       body["metadata"]["namespace"], "podgroups", body, field_manager=keys.FIELD_MANAGER)
        except ApiException as error:
            if error.status == 409:
                return False
            if error.status == 404:
                raise NotServed(f"{body['apiVersion']} podgroups is not served (404 on create)") from None
            raise Transient(f"API {error.status} on create podgroup") from None
        return True

    def patch_jobset(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        group, version = keys.JOBSET_API.split("/")
        try:
            self._call(self._custom.patch_namespaced_custom_object, group, version, namespace, "jobsets", name, ops,
                       field_manager=keys.FIELD_MANAGER, _content_type=JSON_PATCH)
        except ApiException as error:
            if error.status == 422:
                raise GuardFailed(str(error.body)[:200]) from None
            if error.status == 404:
                raise Gone(f"JobSet {namespace}/{name}") from None
            raise Transient(f"API {error.status} on patch jobset") from None

    def list_jobsets(self, namespace: str | None = None, selector: str | None = None) -> list[dict[str, Any]]:
        group, version = keys.JOBSET_API.split("/")
        extra = {"label_selector": selector} if selector else {}
        if namespace is None:
            return self._list(self._custom.list_cluster_custom_object, group, version, "jobsets", **extra)
        return self._list(self._custom.list_namespaced_custom_object, group, version, namespace, "jobsets", **extra)

    def patch_podgroup(self, api_version: str, namespace: str, name: str, merge: dict[str, Any]) -> None:
        """A JSON merge patch of one of kai_fn's PodGroups (the gang's marks)."""
        group, version = api_version.split("/")
        self._merge(group, version, namespace, "podgroups", "PodGroup", name, merge)

    def patch_trainjob(self, namespace: str, name: str, merge: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch, answered with the TrainJob as written."""
        written = self._merge(keys.TRAINER_GROUP, keys.TRAINER_VERSION, namespace, "trainjobs", "TrainJob", name, merge)
        return written if isinstance(written, dict) else {}

    def _merge(self, group: str, version: str, namespace: str, plural: str, kind: str, name: str,
               merge: dict[str, Any]) -> Any:
        """One that names ``metadata.resourceVersion`` raises :class:`Stale` if the object changed since; one of an
        object deleted meanwhile :class:`Gone`."""
        try:
            return self._call(self._custom.patch_namespaced_custom_object, group, version, namespace, plural, name,
                              merge, field_manager=keys.FIELD_MANAGER, _content_type=MERGE_PATCH)
        except ApiException as error:
            if error.status == 404:
                raise Gone(f"{kind} {namespace}/{name}") from None
            if error.status == 409:
                raise Stale(f"{kind} {namespace}/{name}") from None
            raise Transient(f"API {error.status} on patch {plural[:-1]}") from None

    def _post(self, path: str, body: dict[str, Any], _request_timeout: float, **path_params: str) -> Any:
        """POST a core kind through the ApiClient: CoreV1Api (or AuthenticationV1Api) would cost a 1.7 s import
        for one call."""
        client = self.cluster.client
        request = client.param_serialize(
            "POST", path, path_params=path_params,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=body, auth_settings=["BearerToken"],
        )
        response = client.call_api(*request, _request_timeout=_request_timeout)
        response.read()
        return client.response_deserialize(response, {"200": "object", "201": "object"}).data

    def _request(self, method: str, path: str, _request_timeout: float, *, body: Any = None,
                 query: list[tuple[str, str]] | None = None, content_type: str = "application/json",
                 **path_params: str) -> Any:
        """Any call on a built-in kind through the ApiClient, like :meth:`_post`."""
        client = self.cluster.client
        headers = {"Accept": "application/json"} | ({"Content-Type": content_type} if body is not None else {})
        request = client.param_serialize(method, path, path_params=path_params, query_params=query or [],
                                         header_params=headers, body=body, auth_settings=["BearerToken"])
        response = client.call_api(*request, _request_timeout=_request_timeout)
        response.read()
        return client.response_deserialize(response, {"200": "object", "201": "object"}).data

    def request(self, method: str, path: str, *, body: Any = None, query: list[tuple[str, str]] | None = None,
                content_type: str = "application/json", **path_params: str) -> Any:
        """One metered, counted call on a built-in kind (Leases, Events, reviews); 404, 409 and 422 raise
        ApiException, anything else that fails :class:`Transient`."""
        return self._call(self._request, method, path, body=body, query=query, content_type=content_type,
                          **path_params)

    def review_token(self, token: str, audience: str) -> dict[str, Any]:
        """A TokenReview's ``status``; Transient when the API cannot answer (the sender should retry)."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": [audience]}}
        try:
            review = self._call(self._post, "/apis/authentication.k8s.io/v1/tokenreviews", body)
        except ApiException as error:
            raise Transient(f"API {error.status} on create tokenreview") from None
        status = review.get("status") if isinstance(review, dict) else None
        return status if isinstance(status, dict) else {}

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call(self._request, "GET", "/api/v1/namespaces/{namespace}/pods/{name}",
                              namespace=namespace, name=name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise Transient(f"API {error.status} on get pod") from None

    def podgroup(self, api_version: str, namespace: str, name: str) -> dict[str, Any] | None:
        group, version = api_version.split("/")
        return self._get(self._custom.get_namespaced_custom_object, group, version, namespace, "podgroups", name)

    def _list_pods(self, namespace: str, selector: str, _request_timeout: float) -> dict[str, Any]:
        """GET /api/v1/.../pods through the ApiClient, like :meth:`_post` (no CoreV1Api import)."""
        client = self.cluster.client
        request = client.param_serialize(
            "GET", "/api/v1/namespaces/{namespace}/pods", path_params={"namespace": namespace},
            query_params=[("labelSelector", selector)], header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = client.call_api(*request, _request_timeout=_request_timeout)
        response.read()
        return client.response_deserialize(response, {"200": "object"}).data

    def jobset_pods(self, namespace: str, jobset: str) -> list[dict[str, Any]]:
        """The pods of a JobSet (of a TrainJob: same name), by the label JobSet puts on them."""
        try:
            found = self._call(self._list_pods, namespace, f"{keys.JOBSET_NAME_LABEL}={jobset}")
        except ApiException as error:
            raise Transient(f"API {error.status} on list pods") from None
        return list(found.get("items") or [])

    def placeholders(self, namespace: str, trainjob_uid: str) -> list[dict[str, Any]]:
        """The placeholder pods kai_fn made for a TrainJob (kai_fn/core/reserve.py), by their labels."""
        try:
            found = self._call(self._list_pods, namespace,
                               f"{keys.TRAINJOB_UID_LABEL}={trainjob_uid},{keys.PLACEHOLDER_LABEL}")
        except ApiException as error:
            raise Transient(f"API {error.status} on list pods") from None
        return list(found.get("items") or [])

    def create_pod(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The pod as written; None when one of that name exists already (409; kept untouched). :class:`Gone` when
        its namespace is being deleted (403: nothing is made there any more)."""
        try:
            return self._call(self._post, "/api/v1/namespaces/{namespace}/pods", body,
                              namespace=body["metadata"]["namespace"])
        except ApiException as error:
            if error.status == 409:
                return None
            if error.status == 403 and "being terminated" in str(error.body):
                raise Gone(f"namespace {body['metadata']['namespace']} is being deleted") from None
            raise Transient(f"API {error.status} on create pod") from None

    def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """False when it is gone already (404), or is another pod of that name now (``uid`` precondition: 409)."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                **({"preconditions": {"uid": uid}} if uid else {})}
        try:
            self._call(self._request, "DELETE", "/api/v1/namespaces/{namespace}/pods/{name}", body=body,
                       namespace=namespace, name=name)
        except ApiException as error:
            if error.status in (404, 409):
                return False
            raise Transient(f"API {error.status} on delete pod") from None
        return True

    def list_trainjobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        if namespace is None:
            return self._list(self._custom.list_cluster_custom_object, keys.TRAINER_GROUP, keys.TRAINER_VERSION,
                              "trainjobs")
        return self._list(self._custom.list_namespaced_custom_object, keys.TRAINER_GROUP, keys.TRAINER_VERSION,
                          namespace, "trainjobs")

    def create_event(self, namespace: str, body: dict[str, Any]) -> bool:
        """True when the Event is there (written now, or already: 409 on its content-derived name). Best effort:
        an Event that cannot be written never fails the work it reports."""
        try:
            self._call(self._post, "/api/v1/namespaces/{namespace}/events", body, namespace=namespace)
            return True
        except ApiException as error:
            if error.status == 409:
                return True
            why = f"API {error.status}"
        except Transient as error:
            why = str(error)
        _event_lost(namespace, body, why)
        return False
