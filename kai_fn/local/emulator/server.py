"""An in-process Kubernetes API server for the tests, the benchmarks and ``python -m kai_fn demo``.

It is ``kmock.KubernetesEmulator`` serving real HTTP on 127.0.0.1 from its own event loop in a
background thread, so the synchronous official ``kubernetes`` client talks to it as to a cluster.
kmock stores objects and serves discovery; the subclass here adds what a real API server (and the
JobSet admission webhook) enforces and kmock does not, so code a cluster would refuse fails here too:
Content-Type/body agreement of PATCH, 409 on stale resourceVersions, server-owned metadata,
status subresources, metadata validation, optional CRD schema validation, JobSet immutability.

Limits, on purpose: no watch, no server-side apply, no CRD defaulting or pruning of unknown
fields, no JobSet defaulting webhook, and the garbage collector runs only when asked.
"""
from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import datetime
import json
import logging
import random
import re
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, Self

import aiohttp.web
import attrs
import jsonpatch
import jsonpointer
import kmock
import kubernetes.client

__all__ = ["Call", "Emulator", "Fault", "KINDS", "KindInfo", "Validator"]

log = logging.getLogger(__name__)

Validator = Callable[[dict[str, Any]], list[str]]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
WRITE_VERBS = frozenset({"create", "patch", "update", "delete", "deletecollection"})


@dataclasses.dataclass(frozen=True)
class KindInfo:
    """What the API server knows about a resource; ``status`` is whether it has a status subresource."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    status: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def custom(self) -> bool:
        """Custom resources take no strategic merge patch and need resourceVersion on update."""
        return bool(self.group)

    @property
    def resource(self) -> str:
        """The qualified resource as it appears in API server messages (``podgroups.scheduling.run.ai``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


def _kinds(*infos: KindInfo) -> Mapping[tuple[str, str], KindInfo]:
    return MappingProxyType({(i.api_version, i.kind): i for i in infos})


# Scope and status subresources as declared by the upstream CRDs in ../shared/crds.
KINDS: Mapping[tuple[str, str], KindInfo] = _kinds(
    KindInfo("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs", True, status=True),
    KindInfo("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime", "trainingruntimes", True),
    KindInfo("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes", False),
    KindInfo("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", True, status=True),
    KindInfo("scheduling.run.ai", "v2alpha2", "PodGroup", "podgroups", True, status=True),
    KindInfo("scheduling.run.ai", "v2", "Queue", "queues", False, status=True),
    KindInfo("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups", True, status=True),
    KindInfo("kai.scheduler", "v1alpha1", "Topology", "topologies", False),
    KindInfo("", "v1", "Event", "events", True),
    KindInfo("", "v1", "Namespace", "namespaces", False, status=True),
)
_BY_RESOURCE: Mapping[tuple[str, str, str], KindInfo] = MappingProxyType(
    {(i.group, i.version, i.plural): i for i in KINDS.values()}
)


@dataclasses.dataclass(frozen=True)
class Fault:
    """An injected failure. ``after`` loses the response of a request that was applied."""

    status: int | None = None
    hang: float = 0.0
    after: bool = False
    retry_after: int | None = None


@dataclasses.dataclass(frozen=True)
class Call:
    """One HTTP request as the server saw it; ``status`` is filled in once the response is known."""

    method: str
    path: str
    query: dict[str, str]
    verb: str
    group: str
    version: str
    resource: str
    namespace: str | None
    name: str | None
    content_type: str | None
    body: Any
    status: int | None = None
    fault: Fault | None = None
    subresource: str | None = None


class ApiError(Exception):
    """A refusal, rendered as the ``kind: Status`` body the API server sends."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else _REASONS.get(code, "")
        self.details = details

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            out["details"] = self.details
        return out


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
_FAULT_MESSAGES = {
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected fault",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted, but may still be processing the request",
}


def _not_found(info: KindInfo, name: str) -> ApiError:
    return ApiError(404, f'{info.resource} "{name}" not found',
                    details={"name": name, "group": info.group, "kind": info.plural})


def _invalid(info: KindInfo, name: str, problems: list[str]) -> ApiError:
    """422 in the API server's own shape: ``Kind.group "name" is invalid: [field: message, ...]``."""
    listed = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
    causes = []
    for problem in problems:
        field, _, message = problem.partition(": ")
        causes.append({"reason": "FieldValueInvalid", "message": message or problem, "field": field})
    return ApiError(422, f'{info.qualified_kind} "{name}" is invalid: {listed}',
                    details={"name": name, "group": info.group, "kind": info.kind, "causes": causes})


def _conflict(info: KindInfo, name: str) -> ApiError:
    return ApiError(409, f'Operation cannot be fulfilled on {info.resource} "{name}": the object has been '
                         "modified; please apply your changes to the latest version and try again",
                    details={"name": name, "group": info.group, "kind": info.plural})


def _unsupported_media(info: KindInfo, content_type: str | None) -> ApiError:
    accepted = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH] if info.custom else [
        JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, APPLY_PATCH]
    return ApiError(415, f"the body of the request was in an unknown format - accepted media types include: "
                         f"{', '.join(accepted)} (got {content_type!r})")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- validation helpers --------------------------------------------------------------------------

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _name_problems(name: str, label: bool) -> list[str]:
    if label:
        if len(name) > 63 or not _DNS_LABEL.fullmatch(name):
            return [f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower case '
                    "alphanumeric characters or '-', and must start and end with an alphanumeric character"]
    elif len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        return [f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"]
    return []


def _qualified_name_problems(field: str, key: str) -> list[str]:
    prefix, slash, name = key.rpartition("/")
    if not slash:
        prefix, name = "", key
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return [f'{field}: Invalid value: "{key}": prefix part must be a lowercase RFC 1123 subdomain']
    if not name or len(name) > 63 or not _QUALIFIED.fullmatch(name):
        return [f'{field}: Invalid value: "{key}": name part must consist of alphanumeric characters, \'-\', \'_\' '
                "or '.', must start and end with an alphanumeric character, and be at most 63 characters"]
    return []


def _string_map_problems(field: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, dict):
        return [f"{field}: Invalid value: {json.dumps(value)}: must be a map of strings"]
    return [f"{field}.{k}: Invalid value: {json.dumps(v)}: must be a string"
            for k, v in value.items() if not isinstance(v, str)]


def _metadata_problems(obj: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
    """ObjectMeta validation every API server applies, whatever the kind (apimachinery ValidateObjectMeta)."""
    meta = obj.get("metadata") or {}
    labels, annotations = meta.get("labels"), meta.get("annotations")
    problems = _string_map_problems("metadata.labels", labels) + _string_map_problems("metadata.annotations", annotations)
    if problems:
        return problems
    for key, value in (labels or {}).items():
        problems += _qualified_name_problems("metadata.labels", key)
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            problems.append(f'metadata.labels: Invalid value: "{value}": a valid label must be an empty string or '
                            "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                            "alphanumeric character (at most 63 characters)")
    for key in annotations or {}:
        problems += _qualified_name_problems("metadata.annotations", key)
    if annotations and sum(len(k) + len(v) for k, v in annotations.items()) > 256 * 1024:
        problems.append("metadata.annotations: Too long: must have at most 262144 bytes")
    controllers = 0
    refs = meta.get("ownerReferences") or []
    if not isinstance(refs, list):
        return problems + ["metadata.ownerReferences: Invalid value: must be a list"]
    for ref in refs:
        if not isinstance(ref, dict):
            problems.append("metadata.ownerReferences: Invalid value: must be an object")
            continue
        for key, what in (("apiVersion", "version"), ("kind", "kind"), ("name", "name"), ("uid", "uid")):
            if not ref.get(key):
                problems.append(f'metadata.ownerReferences.{key}: Invalid value: "": {what} must not be empty')
        controllers += ref.get("controller") is True
    if controllers > 1:
        problems.append("metadata.ownerReferences: Invalid value: Only one reference can have Controller set to true")
    finalizers = meta.get("finalizers") or []
    for finalizer in finalizers:
        problems += _qualified_name_problems("metadata.finalizers", str(finalizer))
    if old is not None and (old.get("metadata") or {}).get("deletionTimestamp"):
        added = set(finalizers) - set(old["metadata"].get("finalizers") or [])
        if added:
            problems.append(f"metadata.finalizers: Forbidden: no new finalizers can be added if the object is being "
                            f"deleted, found new finalizers {sorted(added)!r}")
    return problems


def _event_problems(obj: dict[str, Any]) -> list[str]:
    """core/v1 Event legacy validation: the involved object must live in the event's namespace."""
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    involved = (obj.get("involvedObject") or {}).get("namespace") or ""
    if (involved and involved != namespace) or (not involved and namespace not in ("", "default")):
        return [f'involvedObject.namespace: Invalid value: "{involved}": does not match event.namespace']
    return []


def _normalise(value: Any) -> Any:
    """Go's semantic equality after decoding into typed structs: null, {} and [] equal absence."""
    if isinstance(value, dict):
        out = {k: _normalise(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


_POD_MUTABLE_WHEN_SUSPENDED = (("metadata", "labels"), ("metadata", "annotations"), ("spec", "nodeSelector"),
                               ("spec", "tolerations"), ("spec", "schedulingGates"))


def _jobset_problems(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go ValidateUpdate."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    old_jobs = copy.deepcopy(old_spec.get("replicatedJobs") or [])
    munged = copy.deepcopy(new_spec.get("replicatedJobs") or [])
    problems = []
    if (old_spec.get("suspend") is True or new_spec.get("suspend") is True) and len(munged) == len(old_jobs):
        for old_job, new_job in zip(old_jobs, munged):
            old_pod = ((old_job.get("template") or {}).get("spec") or {}).get("template") or {}
            new_pod = new_job.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
            for part, field in _POD_MUTABLE_WHEN_SUSPENDED:
                source = old_pod.get(part) or {}
                target = new_pod.setdefault(part, {})
                if field in source:
                    target[field] = copy.deepcopy(source[field])
                else:
                    target.pop(field, None)
    if _normalise(munged) != _normalise(old_jobs):
        problems.append("spec.replicatedJobs: Invalid value: \"array\": field is immutable")
    if new_spec.get("managedBy") != old_spec.get("managedBy"):
        problems.append(f"spec.managedBy: Invalid value: {json.dumps(new_spec.get('managedBy'))}: field is immutable")
    return problems


def _strict_equal(a: Any, b: Any) -> bool:
    """JSON equality: Python's ``True == 1`` and ``1 == 1.0`` must not satisfy a JSON Patch ``test``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_strict_equal(x, y) for x, y in zip(a, b))
    return a == b


class _TestOperation(jsonpatch.TestOperation):
    def apply(self, obj: Any) -> Any:
        try:
            subobj, part = self.pointer.to_last(obj)
            value = subobj if part is None else self.pointer.walk(subobj, part)
        except jsonpointer.JsonPointerException as exc:
            raise jsonpatch.JsonPatchTestFailed(str(exc)) from exc
        if not _strict_equal(value, self.operation["value"]):
            raise jsonpatch.JsonPatchTestFailed(
                f"testing value {self.location} failed: {json.dumps(value)} is not {json.dumps(self.operation['value'])}")
        return obj


class _JsonPatch(jsonpatch.JsonPatch):
    operations = MappingProxyType({**jsonpatch.JsonPatch.operations, "test": _TestOperation})


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _selector(expr: str, what: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """Parse a label or field selector into (key, op, values) terms; 400 on nonsense."""
    terms: list[tuple[str, str, tuple[str, ...]]] = []
    for raw in re.split(r",(?![^()]*\))", expr):
        term = raw.strip()
        if not term:
            continue
        if m := re.fullmatch(r"([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)", term):
            terms.append((m[1], m[2], tuple(v.strip() for v in m[3].split(",") if v.strip())))
        elif m := re.fullmatch(r"!\s*([^\s!=(),]+)", term):
            terms.append((m[1], "!", ()))
        elif m := re.fullmatch(r"([^\s!=(),]+)\s*(!=|==|=)\s*([^\s!=(),]*)", term):
            terms.append((m[1], "!=" if m[2] == "!=" else "=", (m[3],)))
        elif re.fullmatch(r"[^\s!=(),]+", term):
            terms.append((term, "exists", ()))
        else:
            raise ApiError(400, f"unable to parse requirement: invalid {what} selector term {term!r}")
    return terms


def _matches(terms: list[tuple[str, str, tuple[str, ...]]], lookup: Callable[[str], str | None]) -> bool:
    for key, op, values in terms:
        value = lookup(key)
        ok = {
            "=": value == values[0] if values else False,
            "!=": value != values[0] if values else True,
            "in": value in values,
            "notin": value not in values,
            "exists": value is not None,
            "!": value is None,
        }[op]
        if not ok:
            return False
    return True


def _dotted(obj: dict[str, Any], path: str) -> str | None:
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return None if isinstance(value, (dict, list)) else str(value)


# --- routing -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Route:
    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None


def _route(path: str) -> _Route | None:
    """Parse a resource URL; None for discovery and non-API paths, which kmock serves.

    kmock's own parser fails on ``/api/v1/namespaces`` and reads ``/api/v1/namespaces/x`` as a namespace
    scope without a resource, so Namespace objects would be unreachable through it.
    """
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = None
    namespace_subresource = group == "" and len(rest) == 3 and rest[2] in ("status", "finalize")
    if rest[0] == "namespaces" and len(rest) >= 3 and not namespace_subresource:
        namespace, rest = rest[1], rest[2:]
    return _Route(group, version, rest[0], namespace, rest[1] if len(rest) > 1 else None,
                  "/".join(rest[2:]) or None)


def _verb(method: str, route: _Route | None, query: Mapping[str, str]) -> str:
    if method == "GET":
        if query.get("watch") in ("true", "1"):
            return "watch"
        return "list" if route is not None and route.name is None else "get"
    if method == "DELETE" and route is not None and route.name is None:
        return "deletecollection"
    return {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(method, method.lower())


# --- the server ----------------------------------------------------------------------------------

_Key = tuple[kmock.resource, str | None, str]


@attrs.define(kw_only=True, eq=False)
class _Server(kmock.KubernetesEmulator):
    """kmock's emulator with the API server's admission rules on every resource URL.

    Objects live in kmock's ``objects`` (so their history is kept), guarded by a thread lock because the
    harness reads and seeds them from other threads while the loop thread serves requests. Handlers never
    await while holding it, which serialises writes the way etcd's compare-and-swap does.
    """

    validate: Validator | None = None
    faults: Callable[[Call], Fault | None] | None = None
    require_namespaces: bool = False
    stopping: asyncio.Event | None = None
    state_lock: threading.RLock = attrs.field(factory=threading.RLock, init=False)
    _revision: int = attrs.field(default=0, init=False)
    _calls: list[Call] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for info in KINDS.values():
            self.resources[kmock.resource(info.group, info.version, info.plural)] = kmock.ResourceInfo(
                kind=info.kind, singular=info.kind.lower(), namespaced=info.namespaced,
                verbs={"create", "delete", "get", "list", "patch", "update"},
                subresources={"status"} if info.status else set())

    def _get_resources(self) -> list[kmock.resource]:
        with self.state_lock:
            return super()._get_resources()

    # -- state, shared with Emulator's direct access ---------------------------------------------

    def next_revision(self) -> str:
        self._revision += 1
        return str(self._revision)

    def note_revision(self, rv: Any) -> None:
        """Keep the counter ahead of resourceVersions seeded by hand."""
        if isinstance(rv, str) and rv.isdigit():
            self._revision = max(self._revision, int(rv))

    @staticmethod
    def key(info: KindInfo, namespace: str | None, name: str) -> _Key:
        return kmock.resource(info.group, info.version, info.plural), namespace if info.namespaced else None, name

    def current(self, info: KindInfo, namespace: str | None, name: str) -> dict[str, Any] | None:
        key = self.key(info, namespace, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return self.objects[key].raw

    def store(self, info: KindInfo, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        key = self.key(info, meta.get("namespace"), meta["name"])
        if key in self.objects:
            self.objects[key].history.append(obj)
        else:
            self.objects[key] = obj

    def remove(self, info: KindInfo, namespace: str | None, name: str) -> None:
        key = self.key(info, namespace, name)
        if key in self.objects and not self.objects[key].deleted:
            self.objects[key].delete()
            if info.kind == "Namespace" and not info.group:
                for (resource, ns, child), obj in list(self.objects.items()):
                    if ns == name and not obj.deleted:
                        obj.delete()

    def live(self) -> Iterator[tuple[KindInfo, dict[str, Any]]]:
        for (resource, _, _), obj in self.objects.items():
            if not obj.deleted:
                yield _BY_RESOURCE[resource.group, resource.version, resource.plural], obj.raw

    def calls(self) -> list[Call]:
        with self.state_lock:
            return list(self._calls)

    def reset_calls(self) -> None:
        with self.state_lock:
            self._calls.clear()

    def _log(self, call: Call, previous: Call | None = None) -> Call:
        """Append ``call``, or replace ``previous`` with it (by identity: reset_calls may run meanwhile)."""
        with self.state_lock:
            if previous is None:
                self._calls.append(call)
            else:
                for i in range(len(self._calls) - 1, -1, -1):
                    if self._calls[i] is previous:
                        self._calls[i] = call
                        break
        return call

    # -- HTTP --------------------------------------------------------------------------------------

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        payload = await raw.read()
        query = dict(raw.query)
        route = _route(raw.path)
        content_type = raw.headers.get("Content-Type")
        media = content_type.split(";")[0].strip().lower() if content_type else None
        try:
            body = json.loads(payload) if payload else None
        except ValueError:
            body = None
        call = Call(
            method=raw.method, path=raw.path, query=query, verb=_verb(raw.method, route, query),
            group=route.group if route else "", version=route.version if route else "",
            resource=route.plural if route else "", namespace=route.namespace if route else None,
            name=route.name if route else None, content_type=media, body=body,
            subresource=route.subresource if route else None,
        )
        logged = self._log(call)
        fault: Fault | None = None
        try:
            fault = self.faults(call) if self.faults is not None else None
            if fault is not None:
                call = dataclasses.replace(call, fault=fault)
                logged = self._log(call, logged)
                if fault.hang > 0:
                    await self._hang(fault.hang)
            if fault is not None and fault.status is not None and not fault.after:
                response: aiohttp.web.StreamResponse = self._fault_response(fault)
            else:
                if route is None:
                    response = await super().__call__(raw)
                else:
                    try:
                        status, result = self._serve(route, call, payload, media)
                        response = aiohttp.web.json_response(result, status=status)
                    except ApiError as exc:
                        response = aiohttp.web.json_response(exc.body(), status=exc.code)
                if fault is not None and fault.status is not None:
                    response = self._fault_response(fault)
        except Exception as exc:
            log.exception("emulator failed on %s %s", raw.method, raw.path)
            response = aiohttp.web.json_response(ApiError(500, f"emulator error: {exc!r}").body(), status=500)
        if fault is not None and fault.retry_after is not None:
            response.headers["Retry-After"] = str(fault.retry_after)
        self._log(dataclasses.replace(call, status=response.status), logged)
        return response

    async def _hang(self, seconds: float) -> None:
        """Sleep, but end at once when the server stops so shutdown never waits on a hung request."""
        if self.stopping is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    @staticmethod
    def _fault_response(fault: Fault) -> aiohttp.web.Response:
        assert fault.status is not None
        details = {"retryAfterSeconds": fault.retry_after} if fault.retry_after is not None else None
        message = _FAULT_MESSAGES.get(fault.status, f"injected fault: HTTP {fault.status}")
        return aiohttp.web.json_response(ApiError(fault.status, message, details=details).body(), status=fault.status)

    def _serve(self, route: _Route, call: Call, payload: bytes, media: str | None) -> tuple[int, Any]:
        info = _BY_RESOURCE.get((route.group, route.version, route.plural))
        if info is None:
            raise ApiError(404, "the server could not find the requested resource")
        if route.namespace is not None and not info.namespaced:
            raise ApiError(404, "the server could not find the requested resource")
        if route.subresource not in (None, "status") or (route.subresource == "status" and not info.status):
            raise ApiError(404, "the server could not find the requested resource")
        body: Any = None
        if call.method in ("POST", "PUT", "PATCH") or (call.method == "DELETE" and payload):
            if media == APPLY_PATCH:
                raise ApiError(415, "server-side apply (application/apply-patch+yaml) is not emulated")
            try:
                body = json.loads(payload) if payload else None
            except ValueError as exc:
                raise ApiError(400, f"error decoding request body: {exc}") from exc
        dry_run = "dryRun" in call.query
        verb = call.verb
        if verb == "watch":
            raise ApiError(405, "watch is not emulated")
        if verb == "list":
            return 200, self._list(info, route.namespace, call.query)
        if info.namespaced and route.namespace is None:
            raise ApiError(405, "the server does not allow this method on the requested resource")
        if call.method in ("POST", "PUT") and media not in (None, "application/json"):
            raise ApiError(415, "the body of the request was in an unknown format - accepted media types include: "
                                f"application/json, application/yaml, application/vnd.kubernetes.protobuf (got {media!r})")
        if verb == "create" and route.name is None and route.subresource is None:
            return 201, self._create(info, route.namespace, body, dry_run)
        if route.name is None or verb == "create":
            raise ApiError(405, "the server does not allow this method on the requested resource")
        if verb == "get":
            with self.state_lock:
                obj = self.current(info, route.namespace, route.name)
                if obj is None:
                    raise _not_found(info, route.name)
                return 200, copy.deepcopy(obj)
        if verb == "patch":
            return 200, self._update(info, route, dry_run, lambda old: self._patched(info, old, body, media), put=False)
        if verb == "update":
            if not isinstance(body, dict):
                raise ApiError(400, "the body of an update must be an object")
            return 200, self._update(info, route, dry_run, lambda old: copy.deepcopy(body), put=True)
        if verb == "delete":
            return 200, self._delete(info, route.namespace, route.name, body, dry_run)
        raise ApiError(405, "the server does not allow this method on the requested resource")

    # -- verbs -------------------------------------------------------------------------------------

    def _list(self, info: KindInfo, namespace: str | None, query: Mapping[str, str]) -> dict[str, Any]:
        labels = _selector(query.get("labelSelector", ""), "label")
        fields = _selector(query.get("fieldSelector", ""), "field")
        for key, _, _ in fields:
            if info.custom and key not in ("metadata.name", "metadata.namespace"):
                raise ApiError(400, f'field label not supported: {key}')
        with self.state_lock:
            items = [
                copy.deepcopy(obj) for found, obj in self.live()
                if found is info and (namespace is None or obj["metadata"].get("namespace") == namespace)
                and _matches(labels, lambda k, o=obj: (o["metadata"].get("labels") or {}).get(k))
                and _matches(fields, lambda k, o=obj: _dotted(o, k))
            ]
            revision = str(self._revision)
        items.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
        return {"apiVersion": info.api_version, "kind": f"{info.kind}List",
                "metadata": {"resourceVersion": revision}, "items": items}

    def _create(self, info: KindInfo, namespace: str | None, body: Any, dry_run: bool) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "the body of a create must be an object")
        obj = copy.deepcopy(body)
        self._check_type(info, obj)
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if info.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on "
                                    "the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise _invalid(info, "", ["metadata.name: Required value: name or generateName is required"])
            meta["name"] = meta["generateName"] + "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
        name = meta["name"]
        if meta.get("resourceVersion"):
            raise ApiError(500, "resourceVersion should not be set on objects to be created")
        problems = _name_problems(name, label=info.kind == "Namespace" and not info.group)
        problems += _metadata_problems(obj, None)
        if info.kind == "Event" and not info.group:
            problems += _event_problems(obj)
        if problems:
            raise _invalid(info, name, problems)
        for server_owned in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                             "generation", "managedFields", "selfLink"):
            meta.pop(server_owned, None)
        if info.status:
            obj.pop("status", None)
        if info.kind == "Namespace" and not info.group:
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        if info.custom:
            meta["generation"] = 1
        self._check_schema(info, obj, None)
        with self.state_lock:
            if self.current(info, namespace, name) is not None:
                raise ApiError(409, f'{info.resource} "{name}" already exists', reason="AlreadyExists",
                               details={"name": name, "group": info.group, "kind": info.plural})
            if self.require_namespaces and info.namespaced and self.current(
                    KINDS["v1", "Namespace"], None, namespace or "") is None:
                raise _not_found(KINDS["v1", "Namespace"], namespace or "")
            if dry_run:
                return obj
            meta["resourceVersion"] = self.next_revision()
            self.store(info, obj)
            return copy.deepcopy(obj)

    def _patched(self, info: KindInfo, old: dict[str, Any], body: Any, media: str | None) -> dict[str, Any]:
        """Apply a PATCH body the way the API server decodes it: by Content-Type, never by shape."""
        if media == JSON_PATCH:
            if not isinstance(body, list):
                raise ApiError(400, f"json: cannot unmarshal {type(body).__name__ if body is not None else 'null'} "
                                    "into Go value of type jsonpatch.Patch")
            if not all(isinstance(op, dict) for op in body):
                raise ApiError(400, "json: cannot unmarshal into Go value of type jsonpatch.Operation")
            try:
                return _JsonPatch(body).apply(copy.deepcopy(old))
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, KeyError, TypeError) as exc:
                raise ApiError(422, f"the server rejected our request due to an error in our request: {exc}") from exc
        if media == MERGE_PATCH or (media == STRATEGIC_PATCH and not info.custom):
            if not isinstance(body, dict):
                raise ApiError(422, f'"" is invalid: patch: Invalid value: {json.dumps(json.dumps(body))}: couldn\'t '
                                    "get version/kind; json parse error: json: cannot unmarshal "
                                    f"{'array' if isinstance(body, list) else 'value'} into Go value of type struct "
                                    '{ APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string '
                                    '"json:\\"kind,omitempty\\"" }')
            return _merge(copy.deepcopy(old), body)
        raise _unsupported_media(info, media)

    def _update(self, info: KindInfo, route: _Route, dry_run: bool,
                compute: Callable[[dict[str, Any]], Any], put: bool) -> dict[str, Any]:
        """PATCH and PUT: what rest.BeforeUpdate, the CR strategy and admission do to the candidate."""
        assert route.name is not None
        name, namespace = route.name, route.namespace
        with self.state_lock:
            old = self.current(info, namespace, name)
            if old is None:
                raise _not_found(info, name)
            new = compute(old)
            if not isinstance(new, dict):
                raise ApiError(422, f'{info.qualified_kind} "{name}" is invalid: the result must be an object')
            if put:
                self._check_type(info, new)
            elif new.get("apiVersion") != old.get("apiVersion") or new.get("kind") != old.get("kind"):
                raise ApiError(400, "apiVersion and kind cannot be changed by a patch")
            meta = new.get("metadata")
            if not isinstance(meta, dict):
                if put and meta is None:
                    meta = new["metadata"] = {}
                else:
                    raise ApiError(400, "metadata must be an object")
            old_meta = old["metadata"]
            if meta.get("name", name if put else None) != name:
                raise ApiError(400, f"the name of the object ({meta.get('name')}) does not match the name on the "
                                    f"URL ({name})")
            meta["name"] = name
            if info.namespaced:
                if meta.get("namespace", namespace if put else None) != namespace:
                    raise ApiError(400, "the namespace of the provided object does not match the namespace sent "
                                        "on the request")
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            rv = meta.get("resourceVersion")
            if put and info.custom and not rv:
                raise _invalid(info, name, ["metadata.resourceVersion: Invalid value: 0x0: must be specified for an "
                                            "update"])
            if rv and rv != old_meta.get("resourceVersion"):
                raise _conflict(info, name)
            if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
                raise _invalid(info, name, [f'metadata.uid: Invalid value: "{meta["uid"]}": field is immutable'])
            for server_owned in ("uid", "creationTimestamp", "generation", "deletionTimestamp",
                                 "deletionGracePeriodSeconds", "resourceVersion"):
                if server_owned in old_meta:
                    meta[server_owned] = old_meta[server_owned]
                else:
                    meta.pop(server_owned, None)
            if route.subresource == "status":
                status = new.get("status")
                new = copy.deepcopy(old)
                if status is None:
                    new.pop("status", None)
                else:
                    new["status"] = status
            elif info.status:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            problems = _metadata_problems(new, old)
            if info.kind == "Event" and not info.group:
                problems += _event_problems(new)
            if problems:
                raise _invalid(info, name, problems)
            if info.custom and _spec_of(new, info) != _spec_of(old, info):
                new["metadata"]["generation"] = int(old_meta.get("generation") or 0) + 1
            self._check_schema(info, new, old)
            if (info.group, info.kind) == ("jobset.x-k8s.io", "JobSet") and route.subresource is None:
                problems = _jobset_problems(old, new)
                if problems:
                    raise ApiError(403, 'admission webhook "vjobset.kb.io" denied the request: ' + ", ".join(problems))
            if new == old or dry_run:
                return copy.deepcopy(new)
            new["metadata"]["resourceVersion"] = self.next_revision()
            self.store(info, new)
            if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
                self.remove(info, namespace, name)
            return copy.deepcopy(new)

    def _delete(self, info: KindInfo, namespace: str | None, name: str, options: Any, dry_run: bool) -> dict[str, Any]:
        preconditions = (options or {}).get("preconditions") or {} if isinstance(options, dict) else {}
        with self.state_lock:
            old = self.current(info, namespace, name)
            if old is None:
                raise _not_found(info, name)
            meta = old["metadata"]
            for field in ("uid", "resourceVersion"):
                if preconditions.get(field) and preconditions[field] != meta.get(field):
                    raise ApiError(409, f"Precondition failed: {field} in precondition: {preconditions[field]}, "
                                        f"{field} in object meta: {meta.get(field)}", reason="Conflict")
            if dry_run:
                return copy.deepcopy(old)
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return copy.deepcopy(old)
                new = copy.deepcopy(old)
                new["metadata"]["deletionTimestamp"] = _now()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["resourceVersion"] = self.next_revision()
                self.store(info, new)
                return copy.deepcopy(new)
            self.next_revision()
            self.remove(info, namespace, name)
            return copy.deepcopy(old)

    # -- admission helpers -------------------------------------------------------------------------

    @staticmethod
    def _check_type(info: KindInfo, obj: dict[str, Any]) -> None:
        if info.custom and (not obj.get("apiVersion") or not obj.get("kind")):
            raise ApiError(400, f"Object 'Kind' is missing in '{json.dumps(obj)[:200]}'")
        obj.setdefault("apiVersion", info.api_version)
        obj.setdefault("kind", info.kind)
        if obj["apiVersion"] != info.api_version:
            raise ApiError(400, f"the API version in the data ({obj['apiVersion']}) does not match the expected API "
                                f"version ({info.api_version})")
        if obj["kind"] != info.kind:
            raise ApiError(400, f"the kind in the data ({obj['kind']}) does not match the expected kind ({info.kind})")

    def _check_schema(self, info: KindInfo, new: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Run the validate hook, ratcheting like Kubernetes >= 1.30: problems the stored object already had pass."""
        if self.validate is None:
            return
        problems = self.validate(copy.deepcopy(new))
        if problems and old is not None:
            known = set(self.validate(copy.deepcopy(old)))
            problems = [p for p in problems if p not in known]
        if problems:
            raise _invalid(info, new["metadata"].get("name", ""), list(problems))


def _spec_of(obj: dict[str, Any], info: KindInfo) -> dict[str, Any]:
    """What generation tracks: everything but metadata (and status, when it is a subresource)."""
    return {k: v for k, v in obj.items() if k != "metadata" and not (info.status and k == "status")}


# --- the public harness --------------------------------------------------------------------------

class Emulator:
    """Start with ``with Emulator() as api:``; talk to ``api.url`` or ``api.kubeconfig`` over real HTTP.

    ``validate(obj) -> problems`` sees every object a create, patch or update is about to store;
    ``require_namespaces`` makes creates in a namespace that was never created answer 404, as a cluster does.
    """

    def __init__(self, validate: Validator | None = None, *, require_namespaces: bool = False) -> None:
        self._server = _Server(validate=validate, require_namespaces=require_namespaces)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._port: int | None = None
        self._tmp: Path | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError("the emulator is already started")
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="kai-fn-emulator", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the emulator did not start within 10 s")
        if self._error is not None:
            raise RuntimeError("the emulator failed to start") from self._error
        self._tmp = Path(tempfile.mkdtemp(prefix="kai-fn-emulator-"))
        (self._tmp / "kubeconfig").write_text(json.dumps({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "emulator", "user": {}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "emulator"}}],
            "current-context": "emulator",
        }))
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._server.stopping is not None:
            self._loop.call_soon_threadsafe(self._server.stopping.set)
        self._thread.join(10)
        self._thread = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server.stopping = asyncio.Event()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        async with self._server:
            # kmock.Server is not used: it swaps aiohttp's resolver class-wide (two emulators in one
            # process must then stop in LIFO order) and cancels handlers when the client goes away,
            # which would turn a slow-but-applied write into one that never happened.
            web = aiohttp.web.Server(self._server, handler_cancellation=False, access_log=None)
            runner = aiohttp.web.ServerRunner(web, shutdown_timeout=1.0)
            await runner.setup()
            await aiohttp.web.SockSite(runner, sock).start()
            self._ready.set()
            try:
                await self._server.stopping.wait()
            finally:
                await runner.cleanup()

    # -- connection --------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("the emulator is not started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def kubeconfig(self) -> str:
        if self._tmp is None:
            raise RuntimeError("the emulator is not started")
        return str(self._tmp / "kubeconfig")

    def client(self) -> kubernetes.client.ApiClient:
        config = kubernetes.client.Configuration()
        config.host = self.url
        return kubernetes.client.ApiClient(config)

    @property
    def kmock(self) -> kmock.KubernetesEmulator:
        """The underlying kmock handler, for its DSL on non-resource paths and its raw request log."""
        return self._server

    # -- faults and the call log -------------------------------------------------------------------

    @property
    def faults(self) -> Callable[[Call], Fault | None] | None:
        return self._server.faults

    @faults.setter
    def faults(self, value: Callable[[Call], Fault | None] | None) -> None:
        self._server.faults = value

    @property
    def calls(self) -> list[Call]:
        return self._server.calls()

    def writes(self) -> list[Call]:
        return [c for c in self._server.calls() if c.verb in WRITE_VERBS]

    def reset_calls(self) -> None:
        self._server.reset_calls()

    # -- direct state access (no Call recorded, no admission) --------------------------------------

    @staticmethod
    def _info(api_version: str, kind: str) -> KindInfo:
        try:
            return KINDS[api_version, kind]
        except KeyError:
            raise KeyError(f"the emulator does not serve {api_version} {kind}") from None

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Seed or replace an object as if it had always been there, filling server-owned metadata."""
        info = self._info(obj.get("apiVersion", ""), obj.get("kind", ""))
        stored = copy.deepcopy(obj)
        meta = stored.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("put() needs metadata.name")
        if info.namespaced and not meta.get("namespace"):
            raise ValueError(f"put() needs metadata.namespace for the namespaced {info.kind}")
        if not info.namespaced:
            meta.pop("namespace", None)
        with self._server.state_lock:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            if info.custom:
                meta.setdefault("generation", 1)
            if meta.get("resourceVersion"):
                self._server.note_revision(meta["resourceVersion"])
            else:
                meta["resourceVersion"] = self._server.next_revision()
            self._server.store(info, stored)
            return copy.deepcopy(stored)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        info = self._info(api_version, kind)
        with self._server.state_lock:
            obj = self._server.current(info, namespace, name)
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        info = self._info(api_version, kind)
        with self._server.state_lock:
            return [copy.deepcopy(obj) for found, obj in self._server.live()
                    if found is info and (namespace is None or obj["metadata"].get("namespace") == namespace)]

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        info = self._info(api_version, kind)
        with self._server.state_lock:
            self._server.remove(info, namespace, name)

    def history(self, api_version: str, kind: str, namespace: str | None, name: str) -> list[dict[str, Any] | None]:
        """Every stored version of an object, oldest first; None marks a deletion."""
        info = self._info(api_version, kind)
        key = _Server.key(info, namespace, name)
        with self._server.state_lock:
            if key not in self._server.objects:
                return []
            return [None if v is None else copy.deepcopy(v.raw) for v in self._server.objects[key].history]

    def collect_garbage(self) -> list[tuple[str, str, str | None, str]]:
        """Do once what the cluster's garbage collector does: delete objects whose owners are all gone.

        An owner counts as present only if an object of its kind and name exists with the referenced uid,
        in the dependent's namespace (or cluster-wide for cluster-scoped owners). Returns what was deleted.
        """
        deleted: list[tuple[str, str, str | None, str]] = []
        with self._server.state_lock:
            while True:
                present = {(i.api_version, i.kind, o["metadata"].get("namespace"), o["metadata"]["name"],
                            o["metadata"].get("uid")) for i, o in self._server.live()}
                doomed = []
                for info, obj in self._server.live():
                    refs = obj["metadata"].get("ownerReferences") or []
                    namespace = obj["metadata"].get("namespace")

                    def exists(ref: dict[str, Any]) -> bool:
                        owner = KINDS.get((ref.get("apiVersion", ""), ref.get("kind", "")))
                        if owner is None or (owner.namespaced and namespace is None):
                            return True  # unresolvable references keep the dependent, as in the real collector
                        scope = namespace if owner.namespaced else None
                        return (owner.api_version, owner.kind, scope, ref.get("name"), ref.get("uid")) in present

                    if refs and not any(exists(ref) for ref in refs):
                        doomed.append((info, namespace, obj["metadata"]["name"]))
                if not doomed:
                    return deleted
                for info, namespace, name in doomed:
                    self._server.remove(info, namespace, name)
                    deleted.append((info.api_version, info.kind, namespace, name))
