"""Fault injection and the call log: what a test may make a request suffer, and how each request is recorded."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from typing import Any

import aiohttp.web

from kai_fn.local.emulator.errors import ApiError


@dataclasses.dataclass(frozen=True)
class Fault:
    """An injected failure. ``after`` loses the response of a request that was applied; ``until``: the request
    waits until the test sets it (at most a minute), so that what the test does meanwhile is not a race."""

    status: int | None = None
    hang: float = 0.0
    after: bool = False
    retry_after: int | None = None
    until: threading.Event | None = None
    details: dict[str, Any] | None = None  # the Status's details (e.g. a validation refusal's kind and causes)


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
    bearer: str | None = dataclasses.field(default=None, repr=False)  # the caller's token, for SelfSubjectReview
    subresource: str | None = None


_FAULT_MESSAGES = {
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected fault",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted, but may still be processing the request",
}


def fault_response(fault: Fault) -> aiohttp.web.Response:
    assert fault.status is not None
    details = {**(fault.details or {}),
               **({"retryAfterSeconds": fault.retry_after} if fault.retry_after is not None else {})} or None
    message = _FAULT_MESSAGES.get(fault.status, f"injected fault: HTTP {fault.status}")
    return aiohttp.web.json_response(ApiError(fault.status, message, details=details).body(), status=fault.status)


async def hang(seconds: float, stopping: asyncio.Event | None) -> None:
    """Sleep, but end at once when the server stops so shutdown never waits on a hung request."""
    if stopping is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
