"""Which namespaces kai_fn acts in: those labelled ``kai-fn.io/enabled=true``, and of those, ``KAI_FN_NAMESPACES``
if it names any. Opt-in means opt-in (issue 39, item 3): an empty ``KAI_FN_NAMESPACES`` is never "every namespace",
and the list narrows, never widens.

The sources and the admission policies select namespaces by that label; an event may still name any namespace, so
the pass and the PodGroup events ask :meth:`OptIn.opted_in` before any read of the object, and the resync, the
catch-up (and so the sweep, the timeouts and the migration, which take the resync's entries) list only in
:meth:`OptIn.names` (kai_fn/function/inventory.py). The labelled namespaces are read with one LIST (label selector)
at most every ``KAI_FN_NAMESPACE_CACHE_SECONDS``, so a namespace that opts out is seen within that long; an event
naming a namespace the last LIST did not hold reads it again if that LIST is over ``MISS_SECONDS`` old, so one that
opts in is served at once (its sources start sending when it is labelled), and events naming others cost one LIST a
second at most. A LIST that fails keeps the last answer, and with none yet raises (nothing is done until kai_fn
knows). The policy ``kai-fn-identity`` refuses kai_fn's writes elsewhere anyway: this keeps the function from trying
them.

Two scopes, one inside the other: outside the labelled namespaces kai_fn does nothing at all; inside them but
outside ``KAI_FN_NAMESPACES`` it makes no gang and only lets go what a policy of its own holds
(:func:`kai_fn.core.decide.let_go`), so nothing waits for a gang no one makes.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from kai_fn.core import keys
from kai_fn.kube.errors import Transient
from kai_fn.settings import Settings

ENABLED_LABEL = keys.OPT_IN_LABEL
SELECTOR = f"{ENABLED_LABEL}=true"
MISS_SECONDS = 1.0  # how old a "not opted in" may be: a namespace just labelled is served within this long


def refusal(namespace: str) -> str:
    """What kai_fn says of work named in a namespace that did not opt in (the function's and the commands')."""
    return f"namespace {namespace} has not opted in ({SELECTOR}): kai_fn acts only in those that have"


class Lister(Protocol):
    def namespaces(self, selector: str) -> list[dict[str, object]]: ...


class OptIn:
    """Thread-safe; one per process. ``ttl``: ``KAI_FN_NAMESPACE_CACHE_SECONDS`` unless told; ``clock`` is
    monotonic seconds."""

    def __init__(self, settings: Settings, *, ttl: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings, self.clock = settings, clock
        self.ttl = settings.namespace_cache_seconds if ttl is None else ttl
        self._names: frozenset[str] | None = None
        self._read_at = 0.0
        self._lock = threading.Lock()

    def opted_in(self, session: Lister, namespace: str) -> bool:
        """Whether ``namespace`` is labelled ``kai-fn.io/enabled=true``: yes at most ``ttl`` ago, or no at most
        ``MISS_SECONDS`` ago (a namespace just labelled is served at once, and events naming others cost one LIST a
        second at most)."""
        return namespace in self.names(session) or namespace in self.names(session, min(MISS_SECONDS, self.ttl))

    def watches(self, session: Lister, namespace: str) -> bool:
        """Whether kai_fn acts in ``namespace``: it opted in, and ``KAI_FN_NAMESPACES`` (if set) names it."""
        return self.settings.watches(namespace) and self.opted_in(session, namespace)

    def names(self, session: Lister, max_age: float | None = None) -> frozenset[str]:
        """The namespaces labelled ``kai-fn.io/enabled=true``, at most ``max_age`` (``ttl`` unless told) old, or the
        last answer when the LIST fails. :class:`Transient` when there is none yet."""
        with self._lock:
            age = self.ttl if max_age is None else max_age
            if self._names is not None and self.clock() - self._read_at < age:
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
