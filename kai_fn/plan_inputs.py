"""The one gatherer of a plan's inputs: a TrainJob's runtime, the Topologies it names, and what KAI's podgrouper
reads besides the workload (its defaults ConfigMap, when one is configured, ``KAI_DEFAULTS_CONFIGMAP``; the
PriorityClasses that exist, listed only when a TrainJob or those defaults name one). The function's pass, its gang
and placeholder steps, and every command (``status``, ``explain``, ``release``, ``plan``) plan through
:func:`planned`, so all of them show the priority, preemptibility and queue the function writes; and the function's
Queue pre-check, ``status`` and ``explain`` judge a plan's gang against KAI's Queues through :func:`queue_check`.

A module of its own beside :mod:`kai_fn.settings`: the function and the commands both import it, and the commands
may import neither the function (its server: flask, waitress, functions-framework) nor the kube layer's callers.
It reads through a :class:`Reader` (the function's cached session, the commands' session, or ``plan``'s files) and
imports only ``core``, ``settings`` and the kube layer's errors.

A read refused (not allowed, or not given to ``plan``) is an answer, not a fault: PriorityClasses that cannot be
listed are all taken to exist (as before kai_fn read them), a ConfigMap that cannot be read counts as absent (as it
does for KAI), and a Topology the reader cannot read (:class:`Unread`) is left unchecked. Anything else Transient
is raised, for the caller to retry.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from kai_fn.core import decide, owner_metadata, segments
from kai_fn.core.models import InputError, Runtime, TrainJob, parse
from kai_fn.core.owner_metadata import KaiCluster
from kai_fn.core.plan import Plan, plan
from kai_fn.core.queue_check import QueueTree, Refusal, check
from kai_fn.core.runtime import RuntimeTarget, target
from kai_fn.kube import ApiError, Forbidden, Transient, Unauthorized
from kai_fn.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


class Unread(Exception):
    """A read the reader cannot make (``plan`` was given no such file; a command's caller may not read it): what it
    would have checked goes unchecked."""


class Reader(Protocol):
    """The typed reads a plan needs; :class:`kai_fn.kube.ApiSession` (and the function's cached session) are one."""

    def runtime(self, target: RuntimeTarget) -> dict[str, Any] | None: ...

    def topology(self, name: str) -> dict[str, Any] | None: ...

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def priority_classes(self) -> list[dict[str, Any]]: ...


class QueueReader(Protocol):
    """All KAI Queues, and whether a cache answered (``fresh``: not from one)."""

    def queues(self, fresh: bool = False) -> tuple[QueueTree, bool]: ...


def queue_check(reader: QueueReader, planned: Plan) -> tuple[QueueTree | None, Refusal | None]:
    """The Queues read and the plan's gang judged against them as KAI would with nothing allocated
    (:func:`kai_fn.core.queue_check.check`); a refusal from a cache is confirmed on a fresh read. ``(None, None)``
    when the plan names no Queue (not KAI's flavor)."""
    if planned.flavor != "kai" or not planned.queue:
        return None, None
    tree, cached = reader.queues()
    refusal = check(tree, planned.queue, planned.gangs, planned.non_preemptible)
    if refusal is not None and cached:
        tree, _ = reader.queues(fresh=True)
        refusal = check(tree, planned.queue, planned.gangs, planned.non_preemptible)
    return tree, refusal


class Keep(Protocol):
    """Where the cluster-wide reads are kept between plans: the function keeps them for
    ``KAI_FN_RUNTIME_CACHE_SECONDS``; by default each plan reads them again."""

    def __call__(self, what: str, read: Callable[[], T]) -> T: ...


def fresh(what: str, read: Callable[[], T]) -> T:
    return read()


def planned(reader: Reader, settings: Settings, trainjob: dict[str, Any], keep: Keep = fresh) -> decide.Planned:
    """The TrainJob's plan, or why there is none: its runtime read, and the Topologies and KAI's defaults it names."""
    try:
        job = parse(TrainJob, trainjob)
        where = target(job)
    except InputError as error:
        return decide.InvalidTrainJob(str(error))
    raw = reader.runtime(where)
    if raw is None:
        return decide.RuntimeMissing(str(where))
    try:
        runtime = parse(Runtime, raw)
        return plan(job, runtime, topologies=topologies(reader, settings, job, runtime), **settings.planning(),
                    cluster=kai_cluster(reader, settings, job, runtime, keep))
    except InputError as error:
        return decide.InvalidRuntime(str(where), str(error))


def topologies(reader: Reader, settings: Settings, job: TrainJob,
               runtime: Runtime) -> dict[str, segments.TopologyResource | None]:
    """The Topologies the TrainJob names (KAI's flavor), as read; one the reader cannot read goes unchecked."""
    found: dict[str, segments.TopologyResource | None] = {}
    for name in segments.topologies_asked(job, runtime) if settings.flavor == "kai" else ():
        try:
            found[name] = segments.topology_resource(reader.topology(name))
        except Unread:
            continue
    return found


def kai_cluster(reader: Reader, settings: Settings, job: TrainJob, runtime: Runtime,
                keep: Keep = fresh) -> KaiCluster | None:
    """The cluster as KAI's podgrouper sees it (the KAI flavor only)."""
    if settings.flavor != "kai":
        return None
    configured = bool(settings.kai_defaults_configmap)
    data = keep("defaults", lambda: _configmap_data(reader, settings.kai_defaults_configmap)) if configured else None
    try:
        named = owner_metadata.named_priorities(job, runtime, data)
    except InputError:  # the planner says what is wrong with it
        named = frozenset()
    names = keep("priorityclasses", lambda: _priority_classes(reader)) if named else frozenset()
    return KaiCluster(priority_classes=names, defaults_configured=configured, defaults=data,
                      node_pool_label=settings.node_pool_label_key)


def _priority_classes(reader: Reader) -> frozenset[str] | None:
    try:
        listed = reader.priority_classes()
    except (ApiError, Unread) as error:
        if not _refused(error):
            raise
        if not isinstance(error, Unread):
            log.warning("cannot list PriorityClasses (%s): every PriorityClass named is taken to exist", error)
        return None
    return frozenset(str(i.get("metadata", {}).get("name")) for i in listed)


def _configmap_data(reader: Reader, where: str) -> dict[str, str] | None:
    namespace, _, name = where.partition("/")
    try:
        found = reader.configmap(namespace, name)
    except (ApiError, Unread) as error:
        if not _refused(error):
            raise
        if not isinstance(error, Unread):
            log.warning("cannot read KAI's defaults ConfigMap %s (%s): taken as absent", where, error)
        return None
    data = found.get("data") if found is not None else None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _refused(error: Exception) -> bool:
    """Not found, not allowed, not given: an answer, not a fault to retry; anything Transient is retried."""
    return isinstance(error, (Forbidden, Unauthorized, Unread)) or not isinstance(error, Transient)


@dataclass
class Remembered:
    """A command's reader: each runtime, Topology, ConfigMap and the PriorityClasses read once for the command's
    whole run (a ``status`` of many TrainJobs reads each runtime once), and a Topology the caller may not read left
    unchecked (:class:`Unread`) rather than failing the command."""

    reader: Reader
    _kept: dict[tuple[str, ...], Any] = field(default_factory=dict)

    def _once(self, key: tuple[str, ...], read: Callable[[], T]) -> T:
        if key not in self._kept:
            try:
                self._kept[key] = read()
            except (ApiError, Unread) as error:
                self._kept[key] = error
        kept = self._kept[key]
        if isinstance(kept, Exception):
            raise kept
        return cast(T, kept)  # what read returned when it was kept

    def runtime(self, target: RuntimeTarget) -> dict[str, Any] | None:
        return self._once(("runtime", target.kind, target.namespace or "", target.name),
                          lambda: self.reader.runtime(target))

    def topology(self, name: str) -> dict[str, Any] | None:
        try:
            return self._once(("topology", name), lambda: self.reader.topology(name))
        except Transient as error:
            raise Unread(str(error)) from None

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._once(("configmap", namespace, name), lambda: self.reader.configmap(namespace, name))

    def priority_classes(self) -> list[dict[str, Any]]:
        return self._once(("priorityclasses",), self.reader.priority_classes)
