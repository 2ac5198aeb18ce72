"""The process's memory around the kube layer (:mod:`kai_fn.kube`): the runtime and Queue caches, the resync's
cursors (:mod:`kai_fn.core.turns`), what it did lately (:mod:`kai_fn.function.recent`) and what it refused
(:mod:`kai_fn.function.backoff`). The calls themselves,
and what their refusals mean, are the kube layer's.

The two classes are named for what they add to the kube layer's :class:`~kai_fn.kube.ApiServer` and
:class:`~kai_fn.kube.ApiSession`: :class:`CachedServer` is the server with the memory one process keeps across
events (caches proper for runtimes and Queues, and the cursors, back-off, key locks and recent work that outlive an
event), :class:`CachedSession` one event's calls answered from that memory where it is fresh. The kube layer's names
stay for the plain, memoryless server and session the commands use."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kai_fn import kube
from kai_fn.core import keys, reasons, turns
from kai_fn.core.queue_check import QueueTree
from kai_fn.core.runtime import RuntimeTarget
from kai_fn.function import metrics
from kai_fn.function.backoff import Backoff
from kai_fn.kube import listing
from kai_fn.kube.events import event_body
from kai_fn.function.keylocks import KeyLocks
from kai_fn.function.recent import Recent
from kai_fn.settings import Settings

T = TypeVar("T")
# The resources kai_fn LISTs whose objects an Event may name (apiVersion, kind).
_KINDS = {"trainjobs": (keys.TRAINER_API, keys.TRAINJOB_KIND), "jobsets": (keys.JOBSET_API, "JobSet"),
          "podgroups": (keys.KAI_PODGROUP_API, "PodGroup")}


@dataclass
class CachedServer(kube.ApiServer):
    """The API server as this process knows it: :class:`kai_fn.kube.ApiServer`, its calls counted in the metrics,
    and the caches and memory every event shares; :meth:`session` counts the calls one event makes."""

    runtime_ttl: float = 0.0
    _runtimes: dict[RuntimeTarget, tuple[float, dict[str, Any]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _fetching: dict[RuntimeTarget | str, threading.Lock] = field(default_factory=dict)
    _queues: tuple[float, QueueTree] | None = None
    _queue_versions: frozenset[tuple[str, str]] | None = None  # the Queues last read (a change lifts the back-offs)
    _cursors: dict[str, str] = field(default_factory=dict)  # the resync's turns (kai_fn/core/turns.py)
    recent: Recent = field(default_factory=Recent)  # what this process did lately (kai_fn.function.recent)
    backoff: Backoff = field(default_factory=Backoff)  # refused and failing TrainJobs (kai_fn.function.backoff)
    locks: KeyLocks = field(default_factory=KeyLocks)  # one worker at a time on a TrainJob (kai_fn.function.keylocks)
    # The threads a pass's first reads run on beside it (kai_fn.function.first_reads): made only when first used.
    readers: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(8, thread_name_prefix="kai-fn-read"))

    @classmethod
    def from_settings(cls, settings: Settings, kubeconfig: str | None = None, context: str | None = None) -> CachedServer:
        meter = metrics.Meter()
        server = cls(kube.api_client(kubeconfig, context, meter), settings.api_timeout_seconds, meter,
                     runtime_ttl=settings.runtime_cache_seconds, backoff=Backoff(first=settings.resync_backoff_seconds))
        server.on_oversized = server.left_out
        return server

    def left_out(self, skipped: listing.Oversized) -> None:
        """An object a LIST left out for its size (:mod:`kai_fn.kube.listing`): counted, and told on the object
        (one Event per object and size: a resync that meets it again posts nothing new)."""
        metrics.OVERSIZED.labels(skipped.resource).inc()
        kind = _KINDS.get(skipped.resource)
        if kind is None or not skipped.namespace or not skipped.name:
            return
        message = (f"{skipped.size} bytes of JSON, over the {self.max_object_bytes} kai_fn reads: left out of its "
                   f"LIST, never worked on (a TrainJob's or JobSet's is some 5-30 KiB)")
        obj = {"metadata": {"name": skipped.name, "namespace": skipped.namespace}}
        self.session().create_event(skipped.namespace, event_body(obj, reasons.OBJECT_TOO_LARGE, message, True,
                                                                  key=str(skipped.size), kind=kind))

    def session(self) -> CachedSession:
        return CachedSession(self)

    def cached_runtime(self, target: RuntimeTarget) -> dict[str, Any] | None:
        with self._lock:
            hit = self._runtimes.get(target)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        return None

    def remember_runtime(self, target: RuntimeTarget, runtime: dict[str, Any]) -> None:
        if self.runtime_ttl > 0:
            with self._lock:
                self._runtimes[target] = (time.monotonic() + self.runtime_ttl, runtime)

    def cached_queues(self) -> QueueTree | None:
        with self._lock:
            hit = self._queues
        return hit[1] if hit and hit[0] > time.monotonic() else None

    def saw_queues(self, tree: QueueTree) -> None:
        """A read of the Queues: when one was made, changed or deleted since the last, every refused TrainJob is due
        again."""
        seen = frozenset((name, q.metadata.resource_version or "") for name, q in tree.queues.items())
        with self._lock:
            changed = self._queue_versions is not None and seen != self._queue_versions
            self._queue_versions = seen
        if changed:
            self.backoff.clear()

    def remember_queues(self, tree: QueueTree) -> None:
        if self.runtime_ttl > 0:
            with self._lock:
                self._queues = (time.monotonic() + self.runtime_ttl, tree)

    def take_turn(self, name: str, found: list[T], limit: int, key: Callable[[T], str] = turns.order) -> list[T]:
        """The resync's next ``limit`` of ``found`` for the list ``name``, after the ones the last run took."""
        with self._lock:
            batch = turns.turn(found, limit, self._cursors.get(name), key)
            if batch:
                self._cursors[name] = key(batch[-1])
        return batch

    def fetch_lock(self, target: RuntimeTarget | str) -> threading.Lock:
        """One fetch per runtime at a time: when an entry expires, the events in flight wait for one GET."""
        with self._lock:
            return self._fetching.setdefault(target, threading.Lock())


@dataclass
class CachedSession(kube.ApiSession):
    """The kube layer's calls, with runtimes and Queues answered from the process's caches while they are fresh."""

    server: CachedServer

    def runtime(self, target: RuntimeTarget) -> dict[str, Any] | None:
        """A runtime, from the cache while it is fresh; a missing one is never cached."""
        if (hit := self.server.cached_runtime(target)) is not None:
            return hit
        if self.server.runtime_ttl <= 0:
            return super().runtime(target)
        with self.server.fetch_lock(target):
            if (hit := self.server.cached_runtime(target)) is not None:
                return hit
            found = super().runtime(target)
            if found is not None:
                self.server.remember_runtime(target, found)
            return found

    def queues(self, fresh: bool = False) -> tuple[QueueTree, bool]:
        """All KAI Queues, from the cache while it is fresh (``KAI_FN_RUNTIME_CACHE_SECONDS``); the flag says
        whether the cache answered."""
        if not fresh and (hit := self.server.cached_queues()) is not None:
            return hit, True
        with self.server.fetch_lock("queues"):
            if not fresh and (hit := self.server.cached_queues()) is not None:
                return hit, True
            tree, _ = super().queues()
            self.server.saw_queues(tree)
            self.server.remember_queues(tree)
            return tree, False
