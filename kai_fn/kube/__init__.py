"""The kube layer: one API client, one request path with one status-to-exception table, and the typed calls the
function and the commands make. It holds no memory of its own: the function's caches live in
:mod:`kai_fn.function.cluster`."""
from kai_fn.kube.client import NoClusterConfig, Observer, api_client, request_shape
from kai_fn.kube.errors import (
    AlreadyExists, ApiError, Conflict, Forbidden, Gone, GuardFailed, Invalid, NotFound, NotServed, Stale, Terminating,
    Transient, Unauthorized,
)
from kai_fn.kube.session import JSON_PATCH, MERGE_PATCH, ApiServer, ApiSession

__all__ = [
    "AlreadyExists", "ApiError", "ApiServer", "ApiSession", "Conflict", "Forbidden", "Gone", "GuardFailed", "Invalid",
    "JSON_PATCH", "MERGE_PATCH", "NoClusterConfig", "NotFound", "NotServed", "Observer", "Stale", "Terminating",
    "Transient", "Unauthorized", "api_client", "request_shape",
]
