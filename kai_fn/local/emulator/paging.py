"""A LIST in pages, as the API server serves ``limit`` and ``continue``.

The token is the server's own shape (base64url of ``{"v": "meta.k8s.io/v1", "rv": N, "start": "<key>\\x00"}``): the
next page starts after the last key served. Unlike the real server, which serves every page at the first page's
revision from etcd, a later page here is read from the objects as they are now (created ones after the key show up,
deleted ones do not); the first page's revision is still the list's ``resourceVersion`` on every page.
"""
from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from kai_fn.local.emulator.errors import ApiError

_VERSION = "meta.k8s.io/v1"


def key_of(obj: dict[str, Any]) -> str:
    """Where an object sorts in a list: namespace, then name (the order of etcd's keys)."""
    return f"{obj['metadata'].get('namespace') or ''}/{obj['metadata']['name']}"


def page(items: list[dict[str, Any]], query: dict[str, str] | Any, revision: str,
         selected: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The page ``query`` asks for of ``items`` (sorted by :func:`key_of`) and the list's metadata. ``selected``: a
    label or field selector narrowed the list (the server then says no ``remainingItemCount``)."""
    limit = _limit(query.get("limit"))
    start, revision = _start(query.get("continue"), revision)
    rest = [item for item in items if key_of(item) >= start] if start else items
    if not limit or len(rest) <= limit:
        return rest, {"resourceVersion": revision}
    served = rest[:limit]
    token = {"v": _VERSION, "rv": int(revision), "start": key_of(served[-1]) + "\x00"}
    meta: dict[str, Any] = {"resourceVersion": revision,
                            "continue": base64.urlsafe_b64encode(json.dumps(token).encode()).decode().rstrip("=")}
    if not selected:
        meta["remainingItemCount"] = len(rest) - limit
    return served, meta


def _limit(raw: str | None) -> int:
    if not raw:
        return 0
    try:
        return max(int(raw), 0)
    except ValueError:
        raise ApiError(400, f'strconv.ParseInt: parsing "{raw}": invalid syntax') from None


def _start(raw: str | None, revision: str) -> tuple[str, str]:
    """Where a continued list resumes, and its first page's revision."""
    if not raw:
        return "", revision
    try:
        token = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        if token.get("v") != _VERSION or not isinstance(token.get("start"), str) or not isinstance(token.get("rv"), int):
            raise ValueError(raw)
    except (ValueError, binascii.Error, AttributeError):
        raise ApiError(400, "invalid continue token: continue key is not valid") from None
    return token["start"], str(token["rv"])
