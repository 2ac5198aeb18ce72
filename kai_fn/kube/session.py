"""Typed calls on one API server, every one through one request path (:meth:`ApiSession.request`): bounded by a
timeout, counted per session, and its refusals raised as the table of :mod:`kai_fn.kube.errors` says.

Each typed call then says what a refusal means for it (a GET's 404 is None, a patch's is :class:`Gone`, a create's
``AlreadyExists`` is "there already"); any other refusal is :class:`Transient`, which a later delivery or the
resync may get past. Built-in and custom kinds alike go through the ApiClient's raw call: CoreV1Api and
CustomObjectsApi would cost seconds of import for a few paths.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from kai_fn.core import keys
from kai_fn.core.queue_check import QueueTree
from kai_fn.core.runtime import RuntimeTarget
from kai_fn.kube import listing
from kai_fn.kube.client import Observer, api_client, read_body
from kai_fn.kube.errors import (
    AlreadyExists, ApiError, Conflict, Gone, Invalid, NotFound, NotServed, Stale, Terminating, Transient,
    classify, unreachable,
)
from kai_fn.settings import Settings

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
log = logging.getLogger("kai_fn")


def path(api_version: str, plural: str, namespace: str | None = None, name: str | None = None) -> str:
    """The URL template of a kind, ``/api/v1/...`` for the core group, ``/apis/GROUP/VERSION/...`` otherwise."""
    root = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    return root + ("/namespaces/{namespace}" if namespace else "") + f"/{plural}" + ("/{name}" if name else "")


def _where(namespace: str | None, name: str | None) -> dict[str, str]:
    return {k: v for k, v in (("namespace", namespace), ("name", name)) if v}


@dataclass
class ApiServer:
    """One API server: the shared client, the timeout of each call, and who counts (nothing, for the commands)."""

    client: ApiClient
    timeout: float
    observer: Observer | None = None
    # What a LIST keeps of one object (kai_fn/kube/listing.py), and who hears of each left out.
    max_object_bytes: int = listing.MAX_OBJECT_BYTES
    on_oversized: Callable[[listing.Oversized], None] | None = None

    @classmethod
    def from_settings(cls, settings: Settings, kubeconfig: str | None = None,
                      context: str | None = None) -> ApiServer:
        return cls(api_client(kubeconfig, context), settings.api_timeout_seconds)

    def session(self) -> ApiSession:
        return ApiSession(self)


@dataclass
class ApiSession:
    """The calls one piece of work makes (one event, one command) on an :class:`ApiServer`, counted in
    :attr:`calls`."""

    server: ApiServer
    calls: int = 0

    def request(self, method: str, url: str, *, body: Any = None, query: list[tuple[str, str]] | None = None,
                content_type: str = JSON, **path_params: str) -> Any:
        """The one request path: the decoded answer, or the table's exception (:func:`errors.classify`)."""
        text = self._send(method, url, body=body, query=query, content_type=content_type, **path_params)
        try:
            return json.loads(text) if text else None
        except ValueError:
            return text

    def _send(self, method: str, url: str, *, body: Any = None, query: list[tuple[str, str]] | None = None,
              content_type: str = JSON, **path_params: str) -> str:
        """The answer's text, undecoded (a LIST is decoded one object at a time: :mod:`kai_fn.kube.listing`)."""
        self.calls += 1
        client = self.server.client
        headers = {"Accept": JSON} | ({"Content-Type": content_type} if body is not None else {})
        try:
            request = client.param_serialize(method, url, path_params=path_params, query_params=query or [],
                                             header_params=headers, body=body, auth_settings=["BearerToken"])
            response = client.call_api(*request, _request_timeout=self.server.timeout)
            read_body(response)
            raw = client.response_deserialize(response, {"200": "bytes", "201": "bytes"}).data
            return raw.decode() if isinstance(raw, bytes) else ""
        except ApiException as error:
            raise classify(error) from None
        except (urllib3.exceptions.HTTPError, TimeoutError, ConnectionError, OSError) as error:
            raise unreachable(error) from None
        except UnicodeDecodeError:
            raise Transient(f"API answered {method} {url} with text that is not UTF-8") from None

    def _call(self, what: str, method: str, url: str, *kept: type[ApiError], **kwargs: Any) -> Any:
        """:meth:`request`, where a refusal not ``kept`` (nor Transient already) becomes :class:`Transient`."""
        try:
            return self.request(method, url, **kwargs)
        except ApiError as error:
            if isinstance(error, (Transient, *kept)):
                raise
            raise Transient(f"API {error.status} on {what}") from None

    def _get(self, api_version: str, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            found = self._call("get", "GET", path(api_version, plural, namespace, name), NotFound,
                               **_where(namespace, name))
        except NotFound:
            return None
        return found if isinstance(found, dict) else None

    def _list(self, api_version: str, plural: str, namespace: str | None = None,
              selector: str | None = None, fields: str | None = None) -> list[dict[str, Any]]:
        """Every object of the kind the selectors choose, in pages of :data:`listing.PAGE_SIZE`; one over the
        server's ``max_object_bytes`` is left out, logged and handed to its ``on_oversized`` hook."""
        query = [(k, v) for k, v in (("labelSelector", selector), ("fieldSelector", fields)) if v]
        items: list[dict[str, Any]] = []
        more: str | None = None
        while True:
            page_query = [*query, ("limit", str(listing.PAGE_SIZE)), *([("continue", more)] if more else [])]
            try:
                text = self._send("GET", path(api_version, plural, namespace), query=page_query,
                                  **_where(namespace, None))
                page = listing.read_page(text, plural, self.server.max_object_bytes)
            except NotFound:
                raise NotServed(f"{api_version} {plural} is not served (404 on list)") from None
            except ApiError as error:
                if isinstance(error, Transient):
                    raise
                raise Transient(f"API {error.status} on list") from None
            except ValueError as error:  # listing.NotAList, or JSON that does not parse
                raise Transient(f"API answered a list of {plural} that is not one: {error}") from None
            items += page.items
            for skipped in page.oversized:
                self._oversized(skipped)
            if not (more := page.more):
                return items

    def _oversized(self, skipped: listing.Oversized) -> None:
        log.warning("object too large, left out", extra={"fields": {
            "resource": skipped.resource, "namespace": skipped.namespace, "name": skipped.name,
            "bytes": skipped.size, "limit": self.server.max_object_bytes}})
        if self.server.on_oversized is not None:
            self.server.on_oversized(skipped)

    def _merge(self, api_version: str, plural: str, kind: str, namespace: str, name: str,
               merge: dict[str, Any]) -> Any:
        """A JSON merge patch; one that names ``metadata.resourceVersion`` raises :class:`Stale` if the object
        changed since, one of an object deleted meanwhile :class:`Gone`."""
        try:
            return self._call(f"patch {plural[:-1]}", "PATCH", path(api_version, plural, namespace, name), NotFound,
                              Conflict, body=merge, content_type=MERGE_PATCH, query=[("fieldManager", keys.FIELD_MANAGER)],
                              namespace=namespace, name=name)
        except NotFound:
            raise Gone(f"{kind} {namespace}/{name}") from None
        except Conflict:
            raise Stale(f"{kind} {namespace}/{name}") from None

    # -- reads -------------------------------------------------------------------------------------------------

    def trainjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(keys.TRAINER_API, "trainjobs", namespace, name)

    def list_trainjobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return self._list(keys.TRAINER_API, "trainjobs", namespace)

    def jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(keys.JOBSET_API, "jobsets", namespace, name)

    def list_jobsets(self, namespace: str | None = None, selector: str | None = None) -> list[dict[str, Any]]:
        return self._list(keys.JOBSET_API, "jobsets", namespace, selector)

    def podgroup(self, api_version: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(api_version, "podgroups", namespace, name)

    def podgroups(self, api_version: str = keys.KAI_PODGROUP_API, namespace: str | None = None,
                  selector: str = f"{keys.MANAGED_BY_LABEL}={keys.MANAGED_BY}") -> list[dict[str, Any]]:
        """PodGroups kai_fn made (KAI's unless told), in every namespace unless told."""
        return self._list(api_version, "podgroups", namespace, selector)

    def runtime(self, target: RuntimeTarget) -> dict[str, Any] | None:
        """A TrainingRuntime (namespaced) or ClusterTrainingRuntime; None when it does not exist."""
        plural = "trainingruntimes" if target.namespace else "clustertrainingruntimes"
        return self._get(keys.TRAINER_API, plural, target.namespace, target.name)

    def queues(self, fresh: bool = False) -> tuple[QueueTree, bool]:
        """All KAI Queues (one LIST gives the queue, its ancestors and whether it is a leaf); the flag says
        whether a cache answered (never, here)."""
        return QueueTree.of(self._list(keys.KAI_QUEUE_API, "queues")), False

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A ConfigMap (KAI's defaults, ``KAI_DEFAULTS_CONFIGMAP``); None when it does not exist."""
        return self._get("v1", "configmaps", namespace, name)

    def priority_classes(self) -> list[dict[str, Any]]:
        """Every PriorityClass (cluster-scoped), read for the names a gang's priority may take."""
        return self._list("scheduling.k8s.io/v1", "priorityclasses")

    def topology(self, name: str) -> dict[str, Any] | None:
        """KAI's Topology (cluster-scoped), read to check the levels a gang names; None when it does not exist."""
        return self._get(keys.KAI_TOPOLOGY_API, "topologies", None, name)

    def namespaces(self, selector: str) -> list[dict[str, Any]]:
        """Namespaces by label: the ones that opted in (kai_fn/function/optin.py)."""
        return self._list("v1", "namespaces", None, selector)

    def namespace(self, name: str) -> dict[str, Any] | None:
        """One Namespace (the commands ask whether it opted in before they write there); None when it does not exist."""
        return self._get("v1", "namespaces", None, name)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get("v1", "pods", namespace, name)

    def pods(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        """Pods with the labels of ``selector``, in the namespace or all."""
        return self._list("v1", "pods", namespace, selector)

    def jobset_pods(self, namespace: str, jobset: str) -> list[dict[str, Any]]:
        """The pods of a JobSet (of a TrainJob: same name), by the label JobSet puts on them."""
        return self.pods(namespace, f"{keys.JOBSET_NAME_LABEL}={jobset}")

    def placeholders(self, namespace: str, trainjob_uid: str) -> list[dict[str, Any]]:
        """The placeholder pods kai_fn made for a TrainJob (kai_fn/core/reserve.py), by their labels."""
        return self.pods(namespace, f"{keys.TRAINJOB_UID_LABEL}={trainjob_uid},{keys.PLACEHOLDER_LABEL}")

    def self_review(self) -> dict[str, Any]:
        """Who the caller is, as the API server authenticated it: a SelfSubjectReview's ``status.userInfo``
        (Kubernetes 1.28+); Transient when it cannot be told."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        review = self._call("create selfsubjectreview", "POST", path("authentication.k8s.io/v1", "selfsubjectreviews"),
                            body=body)
        user = ((review if isinstance(review, dict) else {}).get("status") or {}).get("userInfo")
        return user if isinstance(user, dict) else {}

    def review_token(self, token: str, audience: str) -> dict[str, Any]:
        """A TokenReview's ``status``; Transient when the API cannot answer (the sender should retry)."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": [audience]}}
        review = self._call("create tokenreview", "POST", path("authentication.k8s.io/v1", "tokenreviews"),
                            body=body)
        status = review.get("status") if isinstance(review, dict) else None
        return status if isinstance(status, dict) else {}

    # -- writes ------------------------------------------------------------------------------------------------

    def create_podgroup(self, body: dict[str, Any]) -> bool:
        """True when created; False when one of that name exists already (kept untouched)."""
        namespace = body["metadata"]["namespace"]
        try:
            self._call("create podgroup", "POST", path(body["apiVersion"], "podgroups", namespace), AlreadyExists,
                       NotFound, body=body, query=[("fieldManager", keys.FIELD_MANAGER)], namespace=namespace)
        except AlreadyExists:
            return False
        except NotFound:
            raise NotServed(f"{body['apiVersion']} podgroups is not served (404 on create)") from None
        return True

    def patch_jobset(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        """A JSON Patch, its ``test`` ops the guard: :class:`GuardFailed` when one fails, :class:`Invalid` when the
        API server refuses the JobSet it would make (its schema, a policy), :class:`Gone` when the JobSet is gone."""
        try:
            self._call("patch jobset", "PATCH", path(keys.JOBSET_API, "jobsets", namespace, name), Invalid, NotFound,
                       body=ops, content_type=JSON_PATCH, query=[("fieldManager", keys.FIELD_MANAGER)],
                       namespace=namespace, name=name)
        except NotFound:
            raise Gone(f"JobSet {namespace}/{name}") from None

    def patch_podgroup(self, api_version: str, namespace: str, name: str, merge: dict[str, Any]) -> None:
        """A JSON merge patch of one of kai_fn's PodGroups (the gang's marks)."""
        self._merge(api_version, "podgroups", "PodGroup", namespace, name, merge)

    def patch_trainjob(self, namespace: str, name: str, merge: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch, answered with the TrainJob as written."""
        written = self._merge(keys.TRAINER_API, "trainjobs", "TrainJob", namespace, name, merge)
        return written if isinstance(written, dict) else {}

    def create_pod(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The pod as written; None when one of that name exists already (kept untouched). :class:`Gone` when its
        namespace is being deleted (nothing is made there any more)."""
        namespace = body["metadata"]["namespace"]
        try:
            written = self._call("create pod", "POST", path("v1", "pods", namespace), AlreadyExists, body=body,
                                 namespace=namespace)
        except AlreadyExists:
            return None
        except Terminating:
            raise Gone(f"namespace {namespace} is being deleted") from None
        return written if isinstance(written, dict) else {}

    def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """False when it is gone already (404), or is another pod of that name now (``uid`` precondition: 409)."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                **({"preconditions": {"uid": uid}} if uid else {})}
        try:
            self._call("delete pod", "DELETE", path("v1", "pods", namespace, name), NotFound, Conflict, body=body,
                       namespace=namespace, name=name)
        except (NotFound, Conflict):
            return False
        return True

    def create_event(self, namespace: str, body: dict[str, Any]) -> bool:
        """True when the Event is there (written now, or already: its name derives from its content). Best effort:
        an Event that cannot be written never fails the work it reports; it is logged and counted."""
        try:
            self.request("POST", path("v1", "events", namespace), body=body, namespace=namespace)
            return True
        except AlreadyExists:
            return True
        except ApiError as error:
            self._not_written(namespace, body, str(error))
        return False

    def _not_written(self, namespace: str, body: dict[str, Any], why: str) -> None:
        """``status`` tells a blocked TrainJob from a held one by its Warnings: one lost (to RBAC, say) must show."""
        reason = str(body.get("reason", "?"))
        if self.server.observer is not None:
            self.server.observer.event_not_written(reason)
        log.warning("event not written", extra={"fields": {
            "namespace": namespace, "name": (body.get("involvedObject") or {}).get("name"), "event_reason": reason,
            "reason": why}})
