"""The one API client of a process: configured as kubectl is, without retries of its own, and metered.

API errors map by status code to a few outcomes the reconciler understands: absent (404), already there
(409 on create), a failed JSON Patch ``test`` (422), and :class:`Transient` for what a retry may fix (429, 5xx, timeouts,
connection errors, and any other refusal, which a later delivery or the resync may get past).
"""
from __future__ import annotations

from typing import Any

import kubernetes.config
import urllib3
import yaml
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration
from kubernetes.client.exceptions import ApiException

from kai_fn.function import metrics


class Transient(Exception):
    """A failure a retry may fix; the function answers 503 with Retry-After."""


class NotServed(Transient):
    """404 on a list or a create of a kind: its API is not installed (KAI Scheduler's CRDs, say). A retry helps
    only once someone installs it, so the reconciler says so once rather than answering 503 for ever."""


class Gone(Exception):
    """404 on a write: the object was deleted meanwhile."""


class GuardFailed(Exception):
    """422 on a JSON Patch: a guard no longer holds (the JobSet was resumed, replaced or reordered)."""


class Stale(Exception):
    """409 on a patch that names a resourceVersion: the object changed since it was read."""


class NoClusterConfig(SystemExit):
    """Neither in a cluster nor given a kubeconfig: stops the process at start-up."""


def api_client(kubeconfig: str | None = None, context: str | None = None) -> ApiClient:
    """In a cluster, its service account; otherwise, or given either argument, the kubeconfig as kubectl reads it
    (``kubeconfig``, else ``KUBECONFIG``, else ``~/.kube/config``) in ``context``, else its current-context."""
    config = Configuration()
    try:
        if kubeconfig is None and context is None:
            try:
                kubernetes.config.load_incluster_config(client_configuration=config)
            except kubernetes.config.ConfigException:
                kubernetes.config.load_kube_config(client_configuration=config)
        else:
            kubernetes.config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=config)
    except (kubernetes.config.ConfigException, OSError, yaml.YAMLError) as error:
        why = " ".join(str(error).split())  # YAML errors span lines; this is one
        raise NoClusterConfig(f"no Kubernetes API to talk to: not in a cluster, and KUBECONFIG: {why}") from None
    config.retries = False  # the sender redelivers; stacked retries would outlast its patience
    config.connection_pool_maxsize = 64
    return MeteredApiClient(config)


class MeteredApiClient(ApiClient):
    """Counts every request by verb, resource and status code: the one place all of kai_fn's calls go through."""

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        verb, resource = request_shape(method, url)
        try:
            response = super().call_api(method, url, *args, **kwargs)
        except ApiException as error:
            metrics.API_CALLS.labels(verb, resource, str(error.status or "error")).inc()
            raise
        except Exception:
            metrics.API_CALLS.labels(verb, resource, "error").inc()
            raise
        metrics.API_CALLS.labels(verb, resource, str(response.status)).inc()
        return response


def request_shape(method: str, url: str) -> tuple[str, str]:
    """(verb, resource) of a Kubernetes API URL, as RBAC names them: ``("list", "pods")``, ``("get", "trainjobs")``."""
    path = [p for p in urllib3.util.parse_url(url).path.split("/") if p] if url else []
    rest = path[2:] if path[:1] == ["api"] else path[3:] if path[:1] == ["apis"] else []
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = rest[0] if rest else "other"
    named = len(rest) >= 2
    verb = {"GET": "get" if named else "list", "POST": "create", "PATCH": "patch", "PUT": "update",
            "DELETE": "delete"}.get(method.upper(), "other")
    return verb, resource
