"""What the API server (and the JobSet admission webhook) refuses on create and update, whatever the client.

Problems are returned as ``field: message`` strings in the API server's wording; the server turns them into a 422.
"""
from __future__ import annotations

import copy
import json
import re
from typing import Any

from kai_fn.local.emulator.errors import ApiError, invalid
from kai_fn.local.emulator.kinds import KindInfo, Validator

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def name_problems(name: str, label: bool) -> list[str]:
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


def metadata_problems(obj: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
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


def event_problems(obj: dict[str, Any]) -> list[str]:
    """core/v1 Event validation: the involved object must live in the event's namespace."""
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


def jobset_problems(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
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


def check_type(info: KindInfo, obj: dict[str, Any]) -> None:
    if info.custom and (not obj.get("apiVersion") or not obj.get("kind")):
        raise ApiError(400, f"Object 'Kind' is missing in '{json.dumps(obj)[:200]}'")
    obj.setdefault("apiVersion", info.api_version)
    obj.setdefault("kind", info.kind)
    if obj["apiVersion"] != info.api_version:
        raise ApiError(400, f"the API version in the data ({obj['apiVersion']}) does not match the expected API "
                            f"version ({info.api_version})")
    if obj["kind"] != info.kind:
        raise ApiError(400, f"the kind in the data ({obj['kind']}) does not match the expected kind ({info.kind})")


def check_schema(validate: Validator | None, info: KindInfo, new: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Run the validate hook, ratcheting like Kubernetes >= 1.30: problems the stored object already had pass."""
    if validate is None:
        return
    problems = validate(copy.deepcopy(new))
    if problems and old is not None:
        known = set(validate(copy.deepcopy(old)))
        problems = [p for p in problems if p not in known]
    if problems:
        raise invalid(info, new["metadata"].get("name", ""), list(problems))


def spec_of(obj: dict[str, Any], info: KindInfo) -> dict[str, Any]:
    """What generation tracks: everything but metadata (and status, when it is a subresource)."""
    return {k: v for k, v in obj.items() if k != "metadata" and not (info.status and k == "status")}
