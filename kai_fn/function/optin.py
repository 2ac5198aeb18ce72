"""Which namespaces kai_fn acts in: those labelled ``kai-fn.io/enabled=true``, and of those, ``KAI_FN_NAMESPACES``
if it names any. Opt-in means opt-in (issue 39, item 3): an empty ``KAI_FN_NAMESPACES`` is never "every namespace",
and the list narrows, never widens.

The sources and the admission policies select namespaces by that label, but the resync, the catch-up and the sweep
list cluster-wide, and an event may name any namespace: each asks :meth:`OptIn.watches` before acting. The labelled
namespaces are read with one LIST (label selector) at most every ``TTL_SECONDS``, so a namespace that opts in or
out is seen within that long; a LIST that fails keeps the last answer, and with none yet raises (nothing is done
until kai_fn knows). The policy ``kai-fn-identity`` refuses kai_fn's writes elsewhere anyway: this keeps the
function from trying them.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from kai_fn.kube.errors import Transient
from kai_fn.settings import Settings

ENABLED_LABEL = "kai-fn.io/enabled"
SELECTOR = f"{ENABLED_LABEL}=true"
TTL_SECONDS = 10.0


class Lister(Protocol):
    def namespaces(self, selector: str) -> list[dict[str, object]]: ...


class OptIn:
    """Thread-safe; one per process. ``clock`` is monotonic seconds."""

    def __init__(self, settings: Settings, *, ttl: float = TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings, self.ttl, self.clock = settings, ttl, clock
        self._names: frozenset[str] | None = None
        self._read_at = 0.0
        self._lock = threading.Lock()

    def watches(self, session: Lister, namespace: str) -> bool:
        """Whether kai_fn acts in ``namespace``: it opted in, and ``KAI_FN_NAMESPACES`` (if set) names it."""
        return self.settings.watches(namespace) and namespace in self.names(session)

    def names(self, session: Lister) -> frozenset[str]:
        """The namespaces labelled ``kai-fn.io/enabled=true``, at most ``ttl`` old (or the last answer, when the
        LIST fails). :class:`Transient` when there is none yet."""
        with self._lock:
            if self._names is not None and self.clock() - self._read_at < self.ttl:
                return self._names
            try:
                found = session.namespaces(SELECTOR)
            except Transient:
                if self._names is None:
                    raise
                return self._names
            self._names = frozenset(meta["name"] for ns in found if isinstance(meta := ns.get("metadata"), dict)
                                    and isinstance(meta.get("name"), str))
            self._read_at = self.clock()
            return self._names
