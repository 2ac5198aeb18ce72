"""kai_fn/local's typed edge of the kubernetes package, which the harness calls directly (the function and the
commands go through :mod:`kai_fn.kube` instead).

The package is typed, but loosely where it matters here: CustomObjectsApi returns decoded JSON declared ``object``;
the models' ``metadata``, ``spec`` and ``status`` are optional although the API server always sets them on what it
returns; ``watch.Watch``, ``config.new_client_from_config`` and ``ApiClient.sanitize_for_serialization`` carry no
annotations at all. What each returns is said here once, so the harness reads as typed code.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypedDict, cast

from kubernetes import client, config, watch


class WatchEvent(TypedDict):
    """One event of :func:`stream`: ``type`` is ADDED, MODIFIED, DELETED, BOOKMARK or ERROR; ``object`` the object,
    as the list call returns it (a model for the core API, decoded JSON for custom objects)."""

    type: str
    object: Any
    raw_object: dict[str, Any]


class Stream:
    """A :class:`kubernetes.watch.Watch` over one list call: iterate its events, :meth:`stop` it from inside."""

    def __init__(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]  # kubernetes.watch is unannotated
        self._events = self._watch.stream(func, *args, **kwargs)  # type: ignore[no-untyped-call]  # as above

    def __iter__(self) -> Iterator[WatchEvent]:
        return cast(Iterator[WatchEvent], iter(self._events))

    def stop(self) -> None:
        self._watch.stop()  # type: ignore[no-untyped-call]  # as above


def new_client(kubeconfig: str) -> client.ApiClient:
    """An API client for the kubeconfig's current context."""
    return cast(client.ApiClient, config.new_client_from_config(  # type: ignore[no-untyped-call]  # unannotated
        config_file=kubeconfig))


def close(api: client.ApiClient) -> None:
    """The client's connection pool closed."""
    api.close()  # type: ignore[no-untyped-call]  # unannotated


def as_json(api: client.ApiClient, model: object) -> dict[str, Any]:
    """A model (V1Pod, ...) as the API server's JSON."""
    return obj(api.sanitize_for_serialization(model))  # type: ignore[no-untyped-call]  # unannotated


def obj(value: object) -> dict[str, Any]:
    """Decoded JSON that is an object: what CustomObjectsApi's calls return (declared ``object``)."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object from the API server, got {type(value).__name__}")
    return value


def items(listed: object) -> list[dict[str, Any]]:
    """The objects of a CustomObjectsApi list call's answer."""
    return [obj(item) for item in obj(listed)["items"]]


class HasMetadata(Protocol):
    @property
    def metadata(self) -> client.V1ObjectMeta | None: ...


def meta(model: HasMetadata) -> client.V1ObjectMeta:
    """A model's metadata, which the API server sets on every object it returns."""
    if model.metadata is None:
        raise ValueError(f"{type(model).__name__} without metadata from the API server")
    return model.metadata


def name(model: HasMetadata) -> str:
    """A returned object's name, which the API server always sets."""
    named = meta(model).name
    if named is None:
        raise ValueError(f"{type(model).__name__} without a name from the API server")
    return named


def pod_spec(pod: client.V1Pod) -> client.V1PodSpec:
    if pod.spec is None:
        raise ValueError("a pod without spec from the API server")
    return pod.spec


def pod_status(pod: client.V1Pod) -> client.V1PodStatus:
    if pod.status is None:
        raise ValueError("a pod without status from the API server")
    return pod.status


def token(request: client.AuthenticationV1TokenRequest) -> str:
    """The token of a TokenRequest the API server answered."""
    if request.status is None or request.status.token is None:
        raise ValueError("a TokenRequest answered without a token")
    return request.status.token
