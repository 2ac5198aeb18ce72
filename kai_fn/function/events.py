"""CloudEvents in: what an ApiServerSource (or the resync PingSource) delivered, checked and typed.

Anything malformed raises :class:`BadEvent` before a single API call is made; deletes and other kinds or
types are :class:`Ignored`, so the sender gets a 2xx and stops retrying them. Three kinds are handled: TrainJobs
(the gang is made), the JobSets the admission policy holds (the same pass, for the TrainJob that controls it, the
moment Trainer makes the JobSet) and kai_fn's PodGroups (the gang's status is reported on its TrainJob).
"""
from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cloudevents.exceptions import GenericException
from cloudevents.http import from_http

from kai_fn.core import keys, validation

PREFIX = "dev.knative.apiserver."
PING = "dev.knative.sources.ping"


class Via(enum.StrEnum):
    """What brought a TrainJob's pass: its own event, its held JobSet's, or the resync (its TrainJob listed)."""

    TRAINJOB = keys.TRAINJOB_KIND
    JOBSET = keys.JOBSET_KIND
    RESYNC = "resync"


class BadEvent(ValueError):
    """Not a usable event: answered 400 with this one-line reason."""


@dataclass(frozen=True)
class TrainJobEvent:
    id: str
    type: str
    mode: Literal["resource", "ref"]
    namespace: str
    name: str
    uid: str | None = None  # ref mode carries none
    object: dict[str, Any] | None = None  # resource mode: the TrainJob as the watch saw it
    via: Via = Via.TRAINJOB  # JOBSET: brought by the held JobSet's event (resource mode, no TrainJob body)
    jobset_uid: str | None = None  # the JobSet's, when ``via`` is JOBSET
    jobset: dict[str, Any] | None = None  # the JobSet as the watch saw it, when ``via`` is JOBSET


@dataclass(frozen=True)
class PodGroupEvent:
    """A change of a PodGroup (the second source, Resource mode): a cue to report the gang's status."""

    id: str
    type: str
    namespace: str
    name: str
    uid: str
    object: dict[str, Any]
    mode: Literal["resource"] = "resource"


@dataclass(frozen=True)
class Resync:
    id: str
    type: str


@dataclass(frozen=True)
class Ignored:
    id: str
    type: str
    reason: str


Work = TrainJobEvent | PodGroupEvent | Resync  # what asks for work: all but Ignored
Event = Work | Ignored


def parse(headers: Mapping[str, str], body: bytes) -> Event:
    try:
        event = from_http(dict(headers), body, data_unmarshaller=lambda raw: raw)
    except GenericException as error:
        raise BadEvent(f"not a CloudEvent: {_first_line(error)}") from None
    except (ValueError, TypeError, AttributeError) as error:
        raise BadEvent(f"not a CloudEvent: {_first_line(error)}") from None
    except RecursionError:
        raise BadEvent("not a CloudEvent: nested too deeply") from None
    attrs = event.get_attributes()
    ce_id, ce_type = str(attrs.get("id", "")), str(attrs.get("type", ""))
    if not ce_id or not ce_type:
        raise BadEvent("CloudEvent lacks id or type")

    if ce_type == PING:
        return Resync(ce_id, ce_type)
    if not ce_type.startswith(PREFIX):
        return Ignored(ce_id, ce_type, f"event type {ce_type} is not from an ApiServerSource")
    mode, _, action = ce_type[len(PREFIX):].partition(".")
    if mode not in ("resource", "ref") or action not in ("add", "update", "delete"):
        return Ignored(ce_id, ce_type, f"event type {ce_type} is not handled")

    data = _json_object(event.get_data())
    kind = attrs.get("kind") or data.get("kind")
    if kind == keys.PODGROUP_KIND:
        return _podgroup(ce_id, ce_type, mode, action, data)
    if kind == keys.JOBSET_KIND:
        return _jobset(ce_id, ce_type, mode, action, data)
    if kind != keys.TRAINJOB_KIND:
        return Ignored(ce_id, ce_type, f"kind {kind!r} is not {keys.TRAINJOB_KIND}")
    if action == "delete":
        return Ignored(ce_id, ce_type, "a deleted TrainJob needs nothing: its PodGroup goes with it (ownerReference)")

    if data.get("kind") != keys.TRAINJOB_KIND:
        raise BadEvent(f"data.kind: must be {keys.TRAINJOB_KIND}, got {data.get('kind')!r}")
    if data.get("apiVersion") != keys.TRAINER_API:
        raise BadEvent(f"data.apiVersion: must be {keys.TRAINER_API}, got {data.get('apiVersion')!r}")
    if mode == "ref":
        return TrainJobEvent(ce_id, ce_type, "ref", _name(data, "namespace", "data"), _name(data, "name", "data"))
    meta = _metadata(data)
    return TrainJobEvent(
        ce_id, ce_type, "resource",
        namespace=_name(meta, "namespace", "data.metadata"),
        name=_name(meta, "name", "data.metadata"),
        uid=_name(meta, "uid", "data.metadata"),
        object=data,
    )


def _podgroup(ce_id: str, ce_type: str, mode: str, action: str, data: dict[str, Any]) -> Event:
    if action == "delete":
        return Ignored(ce_id, ce_type, "a deleted PodGroup has nothing to report")
    if mode != "resource":
        return Ignored(ce_id, ce_type, "PodGroup events carry their status only in Resource mode")
    if data.get("kind") != keys.PODGROUP_KIND:
        raise BadEvent(f"data.kind: must be {keys.PODGROUP_KIND}, got {data.get('kind')!r}")
    if data.get("apiVersion") not in _PODGROUP_APIS:
        raise BadEvent(f"data.apiVersion: must be one of {', '.join(_PODGROUP_APIS)}, got {data.get('apiVersion')!r}")
    meta = _metadata(data)
    refs = meta.get("ownerReferences")
    if refs is not None and not (isinstance(refs, list) and all(isinstance(r, dict) for r in refs)):
        raise BadEvent("data.metadata.ownerReferences: must be a list of objects")
    for key in ("spec", "status"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise BadEvent(f"data.{key}: must be an object")
    return PodGroupEvent(ce_id, ce_type, _name(meta, "namespace", "data.metadata"), _name(meta, "name", "data.metadata"),
                         _name(meta, "uid", "data.metadata"), data)


_PODGROUP_APIS = (keys.KAI_PODGROUP_API, keys.SP_PODGROUP_API)


def _jobset(ce_id: str, ce_type: str, mode: str, action: str, data: dict[str, Any]) -> Event:
    """A named (or an earlier version's held) JobSet: the pass of the TrainJob that controls it. A delete (the
    JobSet gone, or a held one leaving the source's selector once decided) needs nothing."""
    if action == "delete":
        return Ignored(ce_id, ce_type, "a deleted JobSet needs nothing")
    if mode != "resource":
        return Ignored(ce_id, ce_type, "JobSet events name their TrainJob only in Resource mode")
    if data.get("kind") != keys.JOBSET_KIND or data.get("apiVersion") != keys.JOBSET_API:
        raise BadEvent(f"data: must be a {keys.JOBSET_API} {keys.JOBSET_KIND}")
    meta = _metadata(data)
    refs = meta.get("ownerReferences") or []
    if not (isinstance(refs, list) and all(isinstance(r, dict) for r in refs)):
        raise BadEvent("data.metadata.ownerReferences: must be a list of objects")
    owner = next((r for r in refs if r.get("kind") == keys.TRAINJOB_KIND and r.get("apiVersion") == keys.TRAINER_API
                  and r.get("controller") is True), None)
    if owner is None:
        return Ignored(ce_id, ce_type, "a JobSet no TrainJob controls")
    return TrainJobEvent(ce_id, ce_type, "resource", _name(meta, "namespace", "data.metadata"),
                         _name(owner, "name", "data.metadata.ownerReferences[]"),
                         _name(owner, "uid", "data.metadata.ownerReferences[]"), via=Via.JOBSET,
                         jobset_uid=_name(meta, "uid", "data.metadata"), jobset=data)


def _metadata(data: dict[str, Any]) -> dict[str, Any]:
    meta = data.get("metadata")
    if not isinstance(meta, dict):
        raise BadEvent("data.metadata: must be an object")
    for key in ("labels", "annotations"):  # read before any model sees the object: check them here
        value = meta.get(key)
        if value is not None and not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
            raise BadEvent(f"data.metadata.{key}: must be a map of strings")
    return meta


def _json_object(raw: Any) -> dict[str, Any]:
    if isinstance(raw, (bytes, bytearray)):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadEvent("data: not UTF-8") from None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as error:
            raise BadEvent(f"data: not JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
        except ValueError as error:  # an integer of more digits than Python converts
            raise BadEvent(f"data: not usable JSON ({_first_line(error)})") from None
        except RecursionError:
            raise BadEvent("data: JSON nested too deeply") from None
    if not isinstance(raw, dict):
        raise BadEvent(f"data: must be a JSON object, got {type(raw).__name__ if raw is not None else 'nothing'}")
    return raw


_SYNTAX = {"namespace": validation.dns_label, "name": validation.dns_subdomain}


def _name(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise BadEvent(f"{where}.{key}: must be a non-empty string, got {value!r}")
    check = _SYNTAX.get(key)
    if check and (why := check(value)):
        raise BadEvent(f"{where}.{key}: {why}")
    return value


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]
