"""What KAI's podgrouper reads from the cluster besides the workload, read for the planner: KAI's per-kind defaults
ConfigMap, when one is configured (``KAI_DEFAULTS_CONFIGMAP``), and the PriorityClasses that exist (a named one that
does not is passed over, as KAI does), listed only when a TrainJob or its defaults name one. Both kept for
``KAI_FN_RUNTIME_CACHE_SECONDS``, like runtimes and Queues."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from kai_fn.core import owner_metadata
from kai_fn.core.models import InputError, Runtime, TrainJob, parse
from kai_fn.core.owner_metadata import KaiCluster
from kai_fn.function.cluster import CachedSession
from kai_fn.kube import ApiError, Forbidden, Transient, Unauthorized
from kai_fn.settings import Settings

log = logging.getLogger(__name__)
_CACHE = "_kai_cluster"  # on the process's CachedServer: what -> (expiry, value)
T = TypeVar("T")


def read(session: CachedSession, settings: Settings, job: TrainJob, runtime: dict[str, Any]) -> KaiCluster | None:
    """The cluster as KAI's podgrouper sees it (the KAI flavor only). PriorityClasses that cannot be listed (no
    permission: an older install's RBAC) are taken to exist, as before kai_fn read them; a ConfigMap that cannot be
    read counts as absent, as it does for KAI."""
    if settings.flavor != "kai":
        return None
    configured = bool(settings.kai_defaults_configmap)
    data = _cached(session, "defaults", lambda: _configmap_data(session, settings.kai_defaults_configmap)) \
        if configured else None
    try:
        named = owner_metadata.named_priorities(job, parse(Runtime, runtime), data)
    except InputError:  # the planner says what is wrong with it
        named = frozenset()
    names = _cached(session, "priorityclasses", lambda: _priority_classes(session)) if named else frozenset()
    return KaiCluster(priority_classes=names, defaults_configured=configured, defaults=data,
                      node_pool_label=settings.node_pool_label_key)


def _cached(session: CachedSession, what: str, read_it: Callable[[], T]) -> T:
    cache: dict[str, tuple[float, Any]] = session.cluster.__dict__.setdefault(_CACHE, {})
    hit = cache.get(what)
    if hit is not None and hit[0] > time.monotonic():
        return cast(T, hit[1])  # what read_it returned when it was put there
    value = read_it()
    if session.cluster.runtime_ttl > 0:
        cache[what] = (time.monotonic() + session.cluster.runtime_ttl, value)
    return value


def _priority_classes(session: CachedSession) -> frozenset[str] | None:
    try:
        listed = session.priority_classes()
    except ApiError as error:
        if not _refused(error):
            raise
        log.warning("cannot list PriorityClasses (%s): every PriorityClass named is taken to exist", error)
        return None
    return frozenset(str(i.get("metadata", {}).get("name")) for i in listed)


def _configmap_data(session: CachedSession, where: str) -> dict[str, str] | None:
    namespace, _, name = where.partition("/")
    try:
        found = session.configmap(namespace, name)
    except ApiError as error:
        if not _refused(error):
            raise
        log.warning("cannot read KAI's defaults ConfigMap %s (%s): taken as absent", where, error)
        return None
    data = found.get("data") if found is not None else None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _refused(error: ApiError) -> bool:
    """Not found or not allowed: an answer, not a fault to retry; anything Transient is retried with the event."""
    return isinstance(error, (Forbidden, Unauthorized)) or not isinstance(error, Transient)

