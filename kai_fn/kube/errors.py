"""The API's refusals as exceptions, chosen by status code and the ``kind: Status`` body's ``reason`` and causes.

One table for every call (:func:`classify`): 404 :class:`NotFound`; 409 :class:`AlreadyExists` (a create whose name
is taken) or :class:`Conflict` (a stale ``resourceVersion``, a failed precondition); 403 :class:`Terminating` (the
namespace is being deleted: a ``NamespaceTerminating`` cause) or :class:`Forbidden`; 401 :class:`Unauthorized`;
422 :class:`GuardFailed` (a JSON Patch that does not apply to the object as it now stands: a failed ``test``, a
``remove`` of a path no longer there; the API server's patch handler answers it with a Status about no object, no
kind and no causes) or :class:`Invalid` (the object the write would make is refused: its schema, a CEL rule, an
admission policy); and :class:`Transient` for what a retry may fix: 429, 5xx, timeouts, no answer, and any other
status. Forbidden and Unauthorized are Transient as well: a grant may come later,
and the function answers the sender 503 rather than drop the event.

They subclass the client's ``ApiException`` (``status``, ``reason``, ``body``), so code written against it still
catches them; ``str()`` is one line.
"""
from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException


class ApiError(ApiException):
    """A refusal by the API server (``status`` set) or no answer from it (``status`` None); one line as a string."""

    def __init__(self, message: str, status: int | None = None, reason: str = "", body: Any = None) -> None:
        super().__init__(status=status, reason=reason)
        self.body = body
        self.message = message

    def __str__(self) -> str:
        return self.message


class Transient(ApiError):
    """A failure a retry may fix; the function answers 503 with Retry-After."""


class NotServed(Transient):
    """404 on a list or a create of a kind: its API is not installed (KAI Scheduler's CRDs, say). A retry helps
    only once someone installs it, so the reconciler says so once rather than answering 503 for ever."""


class NotFound(ApiError):
    """404: no such object (or no such namespace)."""


class Conflict(ApiError):
    """409 ``Conflict``: the object changed since it was read, or a precondition (uid) does not hold."""


class AlreadyExists(ApiError):
    """409 ``AlreadyExists``: a create of a name that is taken."""


class Invalid(ApiError):
    """422: the object (or a JSON Patch ``test``) does not validate."""


class Forbidden(Transient):
    """403: RBAC or admission refused the call."""


class Terminating(Forbidden):
    """403 with a ``NamespaceTerminating`` cause: the namespace is being deleted, nothing new is made there."""


class Unauthorized(Transient):
    """401: the credentials were not accepted."""


class Gone(ApiError):
    """A write on an object deleted meanwhile (404), or a create in a namespace being deleted."""


class GuardFailed(Invalid):
    """422 on a JSON Patch that does not apply: a guard no longer holds (the object was resumed, replaced or
    reordered). Read again and decide again; any other 422 is a refusal a retry will not lift."""


class Stale(Conflict):
    """409 on a patch that names a resourceVersion: the object changed since it was read."""


_BY_STATUS: dict[int, type[ApiError]] = {401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
                                         422: Invalid}
_BY_REASON: dict[tuple[int, str], type[ApiError]] = {(409, "AlreadyExists"): AlreadyExists}
_BY_CAUSE: dict[tuple[int, str], type[ApiError]] = {(403, "NamespaceTerminating"): Terminating}


def status_body(body: Any) -> dict[str, Any]:
    """The ``kind: Status`` a refusal carries, or {} when its body is not one."""
    try:
        parsed = json.loads(body) if isinstance(body, (str, bytes)) else body
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def kind_of(status: int | None, body: Any) -> type[ApiError]:
    """The exception class of a refusal: by a cause of the Status, else its reason, else its code."""
    if status is None:
        return Transient
    found = status_body(body)
    causes = (found.get("details") or {}).get("causes") or []
    for cause in causes if isinstance(causes, list) else []:
        if isinstance(cause, dict) and (status, str(cause.get("reason"))) in _BY_CAUSE:
            return _BY_CAUSE[status, str(cause.get("reason"))]
    if status == 422 and found.get("kind") == "Status" and not causes and not (found.get("details") or {}).get("kind"):
        # A JSON Patch that did not apply: k8s.io/apiserver's patch handler (endpoints/handlers/patch.go,
        # applyJSPatch) answers it with a generic 422 about no object; validation names the kind and each field.
        return GuardFailed
    return _BY_REASON.get((status, str(found.get("reason") or "")), _BY_STATUS.get(status, Transient))


def classify(error: ApiException) -> ApiError:
    """The table's exception for an ``ApiException``, with a message of one line: ``API 503 Service Unavailable``."""
    if isinstance(error, ApiError):
        return error
    reason = str(error.reason or "")
    return kind_of(error.status, error.body)(f"API {error.status} {reason}".strip(), error.status, reason, error.body)


def unreachable(error: BaseException) -> Transient:
    return Transient(f"API unreachable or too slow: {type(error).__name__}")
