"""Where the function keeps what KAI's podgrouper reads besides the workload (KAI's defaults ConfigMap, the
PriorityClasses that exist; read by :mod:`kai_fn.plan_inputs`) between passes: for ``KAI_FN_RUNTIME_CACHE_SECONDS``,
like runtimes and Queues, on the process's :class:`~kai_fn.function.cluster.CachedServer`."""
from __future__ import annotations

import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, TypeVar, cast

from kai_fn import plan_inputs
from kai_fn.core import decide
from kai_fn.function.cluster import CachedSession
from kai_fn.settings import Settings

_CACHE = "_kai_cluster"  # on the process's CachedServer: what -> (expiry, value)
T = TypeVar("T")


@dataclass
class Kept:
    """The process's memory of the cluster-wide reads, for :func:`kai_fn.plan_inputs.planned`."""

    session: CachedSession

    def __call__(self, what: str, read: Callable[[], T]) -> T:
        cache: dict[str, tuple[float, Any]] = self.session.server.__dict__.setdefault(_CACHE, {})
        hit = cache.get(what)
        if hit is not None and hit[0] > time.monotonic():
            return cast(T, hit[1])  # what read returned when it was put there
        value = read()
        if self.session.server.runtime_ttl > 0:
            cache[what] = (time.monotonic() + self.session.server.runtime_ttl, value)
        return value


def planned(session: CachedSession, settings: Settings, trainjob: dict[str, Any]) -> decide.Planned:
    """The pass's plan of the TrainJob, or why there is none (:func:`kai_fn.plan_inputs.planned`), with the
    cluster-wide reads kept."""
    return plan_inputs.planned(session, settings, trainjob, Kept(session))
