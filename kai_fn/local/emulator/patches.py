"""How the API server applies a PATCH body: by its Content-Type (JSON Patch or merge patch), never by its shape."""
from __future__ import annotations

import copy
import json
from types import MappingProxyType
from typing import Any

import jsonpatch
import jsonpointer

from kai_fn.local.emulator.errors import ApiError, unsupported_media
from kai_fn.local.emulator.kinds import JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, KindInfo


def _strict_equal(a: Any, b: Any) -> bool:
    """JSON equality: Python's ``True == 1`` and ``1 == 1.0`` must not satisfy a JSON Patch ``test``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_strict_equal(x, y) for x, y in zip(a, b))
    return bool(a == b)


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


def patched(info: KindInfo, old: dict[str, Any], body: Any, media: str | None) -> dict[str, Any]:
    """Apply a PATCH body the way the API server decodes it: by Content-Type, never by shape."""
    if media == JSON_PATCH:
        if not isinstance(body, list):
            raise ApiError(400, f"json: cannot unmarshal {type(body).__name__ if body is not None else 'null'} "
                                "into Go value of type jsonpatch.Patch")
        if not all(isinstance(op, dict) for op in body):
            raise ApiError(400, "json: cannot unmarshal into Go value of type jsonpatch.Operation")
        try:
            patched: dict[str, Any] = _JsonPatch(body).apply(copy.deepcopy(old))
            return patched
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, KeyError, TypeError) as exc:
            # As k8s.io/apiserver's patch handler answers it: a generic 422 naming no object, kind or cause.
            raise ApiError(422, "the server rejected our request due to an error in our request") from exc
    if media == MERGE_PATCH or (media == STRATEGIC_PATCH and not info.custom):
        if not isinstance(body, dict):
            raise ApiError(422, f'"" is invalid: patch: Invalid value: {json.dumps(json.dumps(body))}: couldn\'t '
                                "get version/kind; json parse error: json: cannot unmarshal "
                                f"{'array' if isinstance(body, list) else 'value'} into Go value of type struct "
                                '{ APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string '
                                '"json:\\"kind,omitempty\\"" }')
        merged: dict[str, Any] = _merge(copy.deepcopy(old), body)  # a dict: the patch is one
        return merged
    raise unsupported_media(info, media)
