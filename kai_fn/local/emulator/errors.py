"""Refusals in the API server's own words: the ``kind: Status`` body, its reason and its message."""
from __future__ import annotations

from typing import Any

from kai_fn.local.emulator.kinds import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, KindInfo


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


def not_found(info: KindInfo, name: str) -> ApiError:
    return ApiError(404, f'{info.resource} "{name}" not found',
                    details={"name": name, "group": info.group, "kind": info.plural})


def invalid(info: KindInfo, name: str, problems: list[str], denied_by: str = "") -> ApiError:
    """422 in the API server's own shape: ``Kind.group "name" is invalid: [field: message, ...]``; ``denied_by`` a
    validating webhook, its name first, as the API server relays the webhook's Invalid error."""
    listed = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
    causes = []
    for problem in problems:
        field, _, message = problem.partition(": ")
        causes.append({"reason": "FieldValueInvalid", "message": message or problem, "field": field})
    by = f'admission webhook "{denied_by}" denied the request: ' if denied_by else ""
    return ApiError(422, f'{by}{info.qualified_kind} "{name}" is invalid: {listed}',
                    details={"name": name, "group": info.group, "kind": info.kind, "causes": causes})


def conflict(info: KindInfo, name: str) -> ApiError:
    return ApiError(409, f'Operation cannot be fulfilled on {info.resource} "{name}": the object has been '
                         "modified; please apply your changes to the latest version and try again",
                    details={"name": name, "group": info.group, "kind": info.plural})


def unsupported_media(info: KindInfo, content_type: str | None) -> ApiError:
    accepted = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH] if info.custom else [
        JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, APPLY_PATCH]
    return ApiError(415, f"the body of the request was in an unknown format - accepted media types include: "
                         f"{', '.join(accepted)} (got {content_type!r})")


def terminating(info: KindInfo, name: str, namespace: str) -> ApiError:
    """403 on a create in a namespace being deleted, with the ``NamespaceTerminating`` cause kube-apiserver's
    namespace lifecycle admission gives (the cause, not the message, is what a client reads)."""
    return ApiError(403, f'{info.resource} "{name}" is forbidden: unable to create new content in namespace '
                         f"{namespace} because it is being terminated",
                    details={"name": name, "group": info.group, "kind": info.plural, "causes": [
                        {"reason": "NamespaceTerminating", "message": f"namespace {namespace} is being terminated",
                         "field": "metadata.namespace"}]})
