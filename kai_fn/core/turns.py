"""Which of what the resync finds it looks at in one run: ``KAI_FN_RESYNC_LIMIT`` of them, in turn.

Some never leave the resync's lists: a blocked TrainJob stays suspended and unmarked, a gang that waits for capacity
stays unbound. A resync that always took the oldest would, once more than the limit of those are older than the
rest, never reach the others. So each run starts after the last one the run before took, in creation order, and
wraps around: everything is reached within ceil(found / limit) runs. The cursor is only a hint, kept by the process
(:class:`kai_fn.function.cluster.CachedServer`): a new process starts from the oldest.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def order(obj: Any) -> str:
    """Creation order (timestamps in whole seconds, so namespace and name break the ties); the resync's inventory
    entries (kai_fn.core.state.Entry) by their TrainJob's."""
    if not isinstance(obj, dict):
        obj = getattr(obj, "trainjob", None) or {}
    meta = obj.get("metadata") or {}
    return f"{meta.get('creationTimestamp') or ''}|{meta.get('namespace') or ''}|{meta.get('name') or ''}"


def turn(found: Sequence[T], limit: int, after: str | None, key: Callable[[T], str] = order) -> list[T]:
    """At most ``limit`` of ``found``: those created after the cursor ``after`` first, oldest first, then from the
    oldest again. ``key``: the creation order of one (default: of an API object)."""
    ranked = sorted(found, key=key)
    if after is not None:
        ranked = [o for o in ranked if key(o) > after] + [o for o in ranked if key(o) <= after]
    return ranked[:limit]
