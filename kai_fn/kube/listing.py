"""A LIST answer read one object at a time, so an object too large to keep is measured and dropped before the next
is decoded, and a page never costs more than its text and its kept objects.

Every LIST kai_fn makes through :class:`kai_fn.kube.ApiSession` is read in pages of :data:`PAGE_SIZE` objects
(``limit`` and ``continue``, as kubectl reads in chunks). An object whose JSON is longer than the session's
``max_object_bytes`` (:data:`MAX_OBJECT_BYTES` unless told) is left out: a tenant's 1.3 MB JobSet of empty
tolerations decodes to some 25 MB of Python objects, and a resync that kept fourteen of them was OOM-killed every
minute (issue 39). Each one left out is returned as an :class:`Oversized`, which the session logs and hands to its
server's ``on_oversized`` hook (the function's metric and Warning; nothing for the commands).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

PAGE_SIZE = 50
MAX_OBJECT_BYTES = 512 * 1024  # a Trainer JobSet or TrainJob is some 5-30 KiB; the API server's own limit is ~1.5 MiB
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class NotAList(ValueError):
    """The answer is not a Kubernetes list object."""


@dataclass(frozen=True)
class Oversized:
    """An object a LIST answered and kai_fn left out for its size."""

    resource: str
    namespace: str | None
    name: str | None
    size: int  # the length of its JSON


@dataclass
class Page:
    items: list[dict[str, Any]] = field(default_factory=list)
    more: str | None = None  # the continue token of the next page
    oversized: list[Oversized] = field(default_factory=list)


def read_page(text: str, resource: str, max_object_bytes: int) -> Page:
    """The objects of a list's JSON text up to ``max_object_bytes`` each, its continue token, and those left out."""
    found = Page()
    at = _expect(text, _skip(text, 0), "{")
    while (at := _skip(text, at)) < len(text) and text[at] != "}":
        key, at = _DECODER.raw_decode(text, at)
        at = _skip(text, _expect(text, _skip(text, at), ":"))
        if key == "items":
            at = _items(text, at, resource, max_object_bytes, found)
        else:
            value, at = _DECODER.raw_decode(text, at)
            if key == "metadata" and isinstance(value, dict):
                found.more = value.get("continue") or None
        at = _skip(text, at)
        if at < len(text) and text[at] == ",":
            at += 1
    _expect(text, at, "}")
    return found


def _items(text: str, at: int, resource: str, limit: int, found: Page) -> int:
    at = _skip(text, _expect(text, at, "["))
    while at < len(text) and text[at] != "]":
        start = at
        item, at = _DECODER.raw_decode(text, at)
        if not isinstance(item, dict):
            raise NotAList(f"a {resource} list holds a {type(item).__name__}")
        if at - start > limit:
            meta = found_meta if isinstance(found_meta := item.get("metadata"), dict) else {}
            found.oversized.append(Oversized(resource, _text(meta.get("namespace")), _text(meta.get("name")),
                                             at - start))
        else:
            found.items.append(item)
        del item  # an oversized one is freed before the next is decoded
        at = _skip(text, at)
        if at < len(text) and text[at] == ",":
            at = _skip(text, at + 1)
    return _expect(text, at, "]")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _skip(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    return match.end() if match else at


def _expect(text: str, at: int, char: str) -> int:
    if at >= len(text) or text[at] != char:
        raise NotAList(f"expected {char!r} at {at} of a list's JSON")
    return at + 1
