"""The one API client of a process: configured as kubectl is, without retries of its own, and observed.

Every request goes through :class:`ObservedApiClient`, which tells an :class:`Observer` (the function's metrics;
nothing for the commands) its verb, resource and status code.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol, cast

import kubernetes.config
import urllib3
import yaml
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse


# kubernetes.config and RESTResponse.read have no annotations: these are the calls kai_fn makes of them, with the types
# they take and return, so the rest of the tree calls typed names. The loaders write into ``client_configuration``;
# ``read_body`` reads a response's body in full (before it is deserialized).
read_body = cast(Callable[[RESTResponse], bytes], RESTResponse.read)
_load_incluster = cast(Callable[..., None], kubernetes.config.load_incluster_config)
_load_kubeconfig = cast(Callable[..., None], kubernetes.config.load_kube_config)
_kubeconfig_contexts = cast(Callable[..., tuple[list[dict[str, Any]], dict[str, Any]]],
                            kubernetes.config.list_kube_config_contexts)


class NoClusterConfig(SystemExit):
    """Neither in a cluster nor given a kubeconfig: stops the process at start-up."""


class Observer(Protocol):
    """What the kube layer reports to whoever counts: each request's outcome, each best-effort write lost."""

    def called(self, verb: str, resource: str, code: str) -> None: ...

    def event_not_written(self, reason: str) -> None: ...


def kubeconfig_read(kubeconfig: str | None) -> tuple[str, list[str]]:
    """Which kubeconfig kubectl's rules read, as an error names it (the option, KUBECONFIG, or the default), and its
    files."""
    if kubeconfig is not None:
        return f"--kubeconfig {kubeconfig}", [kubeconfig]
    if os.environ.get("KUBECONFIG"):
        return f"KUBECONFIG={os.environ['KUBECONFIG']}", [p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
    return "~/.kube/config (KUBECONFIG is unset)", ["~/.kube/config"]


def api_client(kubeconfig: str | None = None, context: str | None = None,
               observer: Observer | None = None) -> ApiClient:
    """In a cluster, its service account; otherwise, or given either argument, the kubeconfig as kubectl reads it
    (``kubeconfig``, else ``KUBECONFIG``, else ``~/.kube/config``) in ``context``, else its current-context."""
    config = Configuration()
    try:
        if kubeconfig is None and context is None:
            try:
                _load_incluster(client_configuration=config)
            except kubernetes.config.ConfigException:
                _load_kubeconfig(client_configuration=config)
        else:
            _load_kubeconfig(config_file=kubeconfig, context=context, client_configuration=config)
    except (kubernetes.config.ConfigException, OSError, yaml.YAMLError) as error:
        where, paths = kubeconfig_read(kubeconfig)
        missing = [p for p in paths if not os.path.exists(os.path.expanduser(p))]
        why = "no such file" if missing == paths else " ".join(str(error).split())  # YAML errors span lines
        raise NoClusterConfig(f"no Kubernetes API to talk to: not in a cluster, and the kubeconfig {where}: {why}") \
            from None
    config.retries = False  # the sender redelivers; stacked retries would outlast its patience
    config.connection_pool_maxsize = 64
    return ObservedApiClient(config, observer)


def current_context(kubeconfig: str | None) -> str | None:
    """The kubeconfig's current-context (``kubeconfig``, else ``KUBECONFIG``, else ``~/.kube/config``); None when
    there is none to read."""
    try:
        return str(_kubeconfig_contexts(config_file=kubeconfig)[1]["name"])
    except (kubernetes.config.ConfigException, OSError, KeyError, TypeError):
        return None


class ObservedApiClient(ApiClient):
    """Tells the observer of every request by verb, resource and status code: the one place all calls go through."""

    def __init__(self, configuration: Configuration, observer: Observer | None = None) -> None:
        super().__init__(configuration)
        self.observer = observer

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if self.observer is None:
            return super().call_api(method, url, *args, **kwargs)
        verb, resource = request_shape(method, url)
        try:
            response = super().call_api(method, url, *args, **kwargs)
        except ApiException as error:
            self.observer.called(verb, resource, str(error.status or "error"))
            raise
        except Exception:
            self.observer.called(verb, resource, "error")
            raise
        self.observer.called(verb, resource, str(response.status))
        return response


def request_shape(method: str, url: str) -> tuple[str, str]:
    """(verb, resource) of a Kubernetes API URL, as RBAC names them: ``("list", "pods")``, ``("get", "trainjobs")``."""
    path = [p for p in (urllib3.util.parse_url(url).path or "").split("/") if p] if url else []
    rest = path[2:] if path[:1] == ["api"] else path[3:] if path[:1] == ["apis"] else []
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = rest[0] if rest else "other"
    named = len(rest) >= 2
    verb = {"GET": "get" if named else "list", "POST": "create", "PATCH": "patch", "PUT": "update",
            "DELETE": "delete"}.get(method.upper(), "other")
    return verb, resource
