"""From a request to what it asks: the resource URL, the verb and the label and field selectors."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from kai_fn.local.emulator.errors import ApiError


@dataclasses.dataclass(frozen=True)
class Route:
    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_route(path: str) -> Route | None:
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
    return Route(group, version, rest[0], namespace, rest[1] if len(rest) > 1 else None,
                 "/".join(rest[2:]) or None)


def verb_of(method: str, route: Route | None, query: Mapping[str, str]) -> str:
    if method == "GET":
        if query.get("watch") in ("true", "1"):
            return "watch"
        return "list" if route is not None and route.name is None else "get"
    if method == "DELETE" and route is not None and route.name is None:
        return "deletecollection"
    return {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(method, method.lower())


def selector(expr: str, what: str) -> list[tuple[str, str, tuple[str, ...]]]:
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


def matches(terms: list[tuple[str, str, tuple[str, ...]]], lookup: Callable[[str], str | None]) -> bool:
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


def dotted(obj: dict[str, Any], path: str) -> str | None:
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return None if isinstance(value, (dict, list)) else str(value)
