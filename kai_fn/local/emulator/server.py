"""kmock's emulator with the API server's rules: the objects, their revisions, and every resource URL over HTTP.

kmock stores objects and serves discovery; the subclass here routes each resource request to a verb, applies
admission (admission.py) and patches (patches.py), and records each call with its injected fault (faults.py).
"""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import json
import logging
import random
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import aiohttp.web
import attrs
import kmock

from kai_fn.local.emulator.admission import (
    check_schema, check_type, event_problems, jobset_problems, metadata_problems, name_problems, spec_of,
)
from kai_fn.local.emulator import naming
from kai_fn.local.emulator.errors import ApiError, conflict, invalid, not_found
from kai_fn.local.emulator.faults import Call, Fault, fault_response, hang
from kai_fn.local.emulator.kinds import APPLY_PATCH, BY_RESOURCE, KINDS, KindInfo, Validator
from kai_fn.local.emulator.paging import key_of, page
from kai_fn.local.emulator.patches import patched
from kai_fn.local.emulator.routing import Route, dotted, matches, parse_route, selector, verb_of
from kai_fn.local.emulator.tokens import Tokens

log = logging.getLogger(__name__)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_Key = tuple[kmock.resource, str | None, str]


def _bearer(header: str | None) -> str | None:
    scheme, _, token = (header or "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


@attrs.define(kw_only=True, eq=False)
class Server(kmock.KubernetesEmulator):
    """kmock's emulator with the API server's admission rules on every resource URL.

    Objects live in kmock's ``objects`` (so their history is kept), guarded by a thread lock because the
    harness reads and seeds them from other threads while the loop thread serves requests. Handlers never
    await while holding it, which serialises writes the way etcd's compare-and-swap does.
    """

    validate: Validator | None = None
    tokens: Tokens = attrs.field(factory=Tokens)
    faults: Callable[[Call], Fault | None] | None = None
    require_namespaces: bool = False
    name_gangs: bool = False  # run the gang-naming admission policy's twin (kai_fn/local/emulator/naming.py)
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
                for (_, ns, _), obj in list(self.objects.items()):
                    if ns == name and not obj.deleted:
                        obj.delete()

    def live(self) -> Iterator[tuple[KindInfo, dict[str, Any]]]:
        for (resource, _, _), obj in self.objects.items():
            if not obj.deleted:
                # every key is made by key() from a KindInfo's three names, none of them None
                yield BY_RESOURCE[resource.group or "", resource.version or "", resource.plural or ""], obj.raw

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
        route = parse_route(raw.path)
        content_type = raw.headers.get("Content-Type")
        media = content_type.split(";")[0].strip().lower() if content_type else None
        try:
            body = json.loads(payload) if payload else None
        except ValueError:
            body = None
        call = Call(
            method=raw.method, path=raw.path, query=query, verb=verb_of(raw.method, route, query),
            group=route.group if route else "", version=route.version if route else "",
            resource=route.plural if route else "", namespace=route.namespace if route else None,
            name=route.name if route else None, content_type=media, body=body,
            subresource=route.subresource if route else None, bearer=_bearer(raw.headers.get("Authorization")),
        )
        logged = self._log(call)
        fault: Fault | None = None
        try:
            fault = self.faults(call) if self.faults is not None else None
            if fault is not None:
                call = dataclasses.replace(call, fault=fault)
                logged = self._log(call, logged)
                if fault.hang > 0:
                    await hang(fault.hang, self.stopping)
                if fault.until is not None:
                    await asyncio.get_running_loop().run_in_executor(None, fault.until.wait, 60)
            if fault is not None and fault.status is not None and not fault.after:
                response: aiohttp.web.StreamResponse = fault_response(fault)
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
                    response = fault_response(fault)
        except Exception as exc:
            log.exception("emulator failed on %s %s", raw.method, raw.path)
            response = aiohttp.web.json_response(ApiError(500, f"emulator error: {exc!r}").body(), status=500)
        if fault is not None and fault.retry_after is not None:
            response.headers["Retry-After"] = str(fault.retry_after)
        self._log(dataclasses.replace(call, status=response.status), logged)
        return response

    def _serve(self, route: Route, call: Call, payload: bytes, media: str | None) -> tuple[int, Any]:
        """One resource request: the reviews, then the verb on the kind's objects, refused as the API server would."""
        if call.method == "POST" and (route.group, route.version, route.namespace, route.name) == (
                "authentication.k8s.io", "v1", None, None):
            if route.plural == "tokenreviews":
                return self.tokens.review(call.body)
            if route.plural == "selfsubjectreviews":
                return self.tokens.self_review(call.bearer)
        info = _kind_of(route)
        body = _decoded(call, payload, media)
        dry_run = "dryRun" in call.query
        if call.verb == "watch":
            raise ApiError(405, "watch is not emulated")
        if call.verb == "list":
            return 200, self._list(info, route.namespace, call.query)
        if info.namespaced and route.namespace is None:
            raise ApiError(405, "the server does not allow this method on the requested resource")
        if call.method in ("POST", "PUT") and media not in (None, "application/json"):
            raise ApiError(415, "the body of the request was in an unknown format - accepted media types include: "
                                f"application/json, application/yaml, application/vnd.kubernetes.protobuf (got {media!r})")
        if call.verb == "create" and route.name is None and route.subresource is None:
            return 201, self._create(info, route.namespace, body, dry_run)
        if route.name is None or call.verb == "create":
            raise ApiError(405, "the server does not allow this method on the requested resource")
        return 200, self._on_object(info, route, call.verb, body, media, dry_run)

    def _on_object(self, info: KindInfo, route: Route, verb: str, body: Any, media: str | None,
                   dry_run: bool) -> dict[str, Any]:
        """A verb on one named object: get, patch, update or delete."""
        assert route.name is not None
        if verb == "get":
            with self.state_lock:
                obj = self.current(info, route.namespace, route.name)
                if obj is None:
                    raise not_found(info, route.name)
                return copy.deepcopy(obj)
        if verb == "patch":
            return self._update(info, route, dry_run, lambda old: patched(info, old, body, media), put=False)
        if verb == "update":
            if not isinstance(body, dict):
                raise ApiError(400, "the body of an update must be an object")
            return self._update(info, route, dry_run, lambda old: copy.deepcopy(body), put=True)
        if verb == "delete":
            return self._delete(info, route.namespace, route.name, body, dry_run)
        raise ApiError(405, "the server does not allow this method on the requested resource")

    # -- verbs -------------------------------------------------------------------------------------

    def _list(self, info: KindInfo, namespace: str | None, query: Mapping[str, str]) -> dict[str, Any]:
        labels = selector(query.get("labelSelector", ""), "label")
        fields = selector(query.get("fieldSelector", ""), "field")
        for key, _, _ in fields:
            if info.custom and key not in ("metadata.name", "metadata.namespace"):
                raise ApiError(400, f'field label not supported: {key}')
        with self.state_lock:
            items = [
                copy.deepcopy(obj) for found, obj in self.live()
                if found is info and (namespace is None or obj["metadata"].get("namespace") == namespace)
                and matches(labels, lambda k: (obj["metadata"].get("labels") or {}).get(k))
                and matches(fields, lambda k: dotted(obj, k))
            ]
            revision = str(self._revision)
        items.sort(key=key_of)
        served, metadata = page(items, query, revision, selected=bool(labels or fields))
        return {"apiVersion": info.api_version, "kind": f"{info.kind}List", "metadata": metadata, "items": served}

    def _create(self, info: KindInfo, namespace: str | None, body: Any, dry_run: bool) -> dict[str, Any]:
        """POST: the object admitted with the server's own fields, stored unless its name is taken."""
        if not isinstance(body, dict):
            raise ApiError(400, "the body of a create must be an object")
        obj = copy.deepcopy(body)
        check_type(info, obj)
        name = _created_name(info, namespace, obj)
        problems = name_problems(name, label=info.kind == "Namespace" and not info.group)
        problems += metadata_problems(obj, None)
        if info.kind == "Event" and not info.group:
            problems += event_problems(obj)
        if problems:
            raise invalid(info, name, problems)
        _set_server_fields(info, obj)
        obj = self._mutate(info, namespace, obj, None)
        check_schema(self.validate, info, obj, None)
        with self.state_lock:
            if self.current(info, namespace, name) is not None:
                raise ApiError(409, f'{info.resource} "{name}" already exists', reason="AlreadyExists",
                               details={"name": name, "group": info.group, "kind": info.plural})
            if self.require_namespaces and info.namespaced and self.current(
                    KINDS["v1", "Namespace"], None, namespace or "") is None:
                raise not_found(KINDS["v1", "Namespace"], namespace or "")
            if dry_run:
                return obj
            obj["metadata"]["resourceVersion"] = self.next_revision()
            self.store(info, obj)
            return copy.deepcopy(obj)

    def _update(self, info: KindInfo, route: Route, dry_run: bool,
                compute: Callable[[dict[str, Any]], Any], put: bool) -> dict[str, Any]:
        """PATCH and PUT: what rest.BeforeUpdate, the CR strategy and admission do to the candidate."""
        assert route.name is not None
        name, namespace = route.name, route.namespace
        with self.state_lock:
            old = self.current(info, namespace, name)
            if old is None:
                raise not_found(info, name)
            new = compute(old)
            if not isinstance(new, dict):
                raise ApiError(422, f'{info.qualified_kind} "{name}" is invalid: the result must be an object')
            if put:
                check_type(info, new)
            elif new.get("apiVersion") != old.get("apiVersion") or new.get("kind") != old.get("kind"):
                raise ApiError(400, "apiVersion and kind cannot be changed by a patch")
            _keep_identity(info, route, old, new, put=put)
            new = _status_kept(info, route, old, new)
            if route.subresource is None:
                new = self._mutate(info, namespace, new, old)
            self._admit_update(info, route, old, new)
            if new == old or dry_run:
                return copy.deepcopy(new)
            new["metadata"]["resourceVersion"] = self.next_revision()
            self.store(info, new)
            if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
                self.remove(info, namespace, name)
            return copy.deepcopy(new)

    def _mutate(self, info: KindInfo, namespace: str | None, obj: dict[str, Any],
                old: dict[str, Any] | None) -> dict[str, Any]:
        """The mutating admission policies kai_fn installs, where the emulator runs them (``name_gangs``)."""
        if not self.name_gangs or (info.group, info.kind) != ("jobset.x-k8s.io", "JobSet"):
            return obj
        space = self.current(KINDS["v1", "Namespace"], None, namespace or "") or {}
        labels = (space.get("metadata") or {}).get("labels") or {}
        return naming.named(obj, old) if naming.applies(obj, labels, old) else obj

    def _admit_update(self, info: KindInfo, route: Route, old: dict[str, Any], new: dict[str, Any]) -> None:
        """The candidate's metadata, schema and (for a JobSet) JobSet's webhook checked; a spec change counted in a
        custom object's generation."""
        name = new["metadata"]["name"]
        problems = metadata_problems(new, old)
        if info.kind == "Event" and not info.group:
            problems += event_problems(new)
        if problems:
            raise invalid(info, name, problems)
        if info.custom and spec_of(new, info) != spec_of(old, info):
            new["metadata"]["generation"] = int(old["metadata"].get("generation") or 0) + 1
        check_schema(self.validate, info, new, old)
        if (info.group, info.kind) == ("jobset.x-k8s.io", "JobSet") and route.subresource is None:
            problems = jobset_problems(old, new)
            if problems:
                raise invalid(info, name, problems, denied_by="vjobset.kb.io")

    def _delete(self, info: KindInfo, namespace: str | None, name: str, options: Any, dry_run: bool) -> dict[str, Any]:
        preconditions = (options or {}).get("preconditions") or {} if isinstance(options, dict) else {}
        with self.state_lock:
            old = self.current(info, namespace, name)
            if old is None:
                raise not_found(info, name)
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
                new["metadata"]["deletionTimestamp"] = now()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["resourceVersion"] = self.next_revision()
                self.store(info, new)
                return copy.deepcopy(new)
            self.next_revision()
            self.remove(info, namespace, name)
            return copy.deepcopy(old)


_NOT_FOUND = "the server could not find the requested resource"


def _kind_of(route: Route) -> KindInfo:
    """The kind a resource URL names, or 404 as the API server answers an unknown resource or subresource."""
    info = BY_RESOURCE.get((route.group, route.version, route.plural))
    if info is None or (route.namespace is not None and not info.namespaced):
        raise ApiError(404, _NOT_FOUND)
    if route.subresource not in (None, "status") or (route.subresource == "status" and not info.status):
        raise ApiError(404, _NOT_FOUND)
    return info


def _decoded(call: Call, payload: bytes, media: str | None) -> Any:
    """The request's JSON body, for the verbs that take one; server-side apply is refused."""
    if not (call.method in ("POST", "PUT", "PATCH") or (call.method == "DELETE" and payload)):
        return None
    if media == APPLY_PATCH:
        raise ApiError(415, "server-side apply (application/apply-patch+yaml) is not emulated")
    try:
        return json.loads(payload) if payload else None
    except ValueError as exc:
        raise ApiError(400, f"error decoding request body: {exc}") from exc


def _created_name(info: KindInfo, namespace: str | None, obj: dict[str, Any]) -> str:
    """The new object's metadata made to agree with the URL (namespace, a name from generateName); its name."""
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
            raise invalid(info, "", ["metadata.name: Required value: name or generateName is required"])
        meta["name"] = meta["generateName"] + "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
    if meta.get("resourceVersion"):
        raise ApiError(500, "resourceVersion should not be set on objects to be created")
    return str(meta["name"])


def _set_server_fields(info: KindInfo, obj: dict[str, Any]) -> None:
    """What the server sets on a new object, over whatever the client sent: uid, creation time, generation, and
    (for a kind with a status subresource) no status; a Namespace is Active with the kubernetes finalizer."""
    meta = obj["metadata"]
    for server_owned in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                         "generation", "managedFields", "selfLink"):
        meta.pop(server_owned, None)
    if info.status:
        obj.pop("status", None)
    if info.kind == "Namespace" and not info.group:
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now()
    if info.custom:
        meta["generation"] = 1


def _keep_identity(info: KindInfo, route: Route, old: dict[str, Any], new: dict[str, Any], *, put: bool) -> None:
    """The candidate's name and namespace must be the URL's, its resourceVersion the stored one's (a PUT of a custom
    object must give one), its uid unchanged; the server's own fields are carried over from the stored object."""
    name, namespace = route.name, route.namespace
    meta = new.get("metadata")
    if not isinstance(meta, dict):
        if not (put and meta is None):
            raise ApiError(400, "metadata must be an object")
        meta = new["metadata"] = {}
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
        raise invalid(info, str(name), ["metadata.resourceVersion: Invalid value: 0x0: must be specified for an "
                                         "update"])
    if rv and rv != old_meta.get("resourceVersion"):
        raise conflict(info, str(name))
    if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
        raise invalid(info, str(name), [f'metadata.uid: Invalid value: "{meta["uid"]}": field is immutable'])
    for server_owned in ("uid", "creationTimestamp", "generation", "deletionTimestamp",
                         "deletionGracePeriodSeconds", "resourceVersion"):
        if server_owned in old_meta:
            meta[server_owned] = old_meta[server_owned]
        else:
            meta.pop(server_owned, None)


def _status_kept(info: KindInfo, route: Route, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The status subresource changes the status only; the main resource of a kind with one keeps the stored
    status."""
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
    return new
