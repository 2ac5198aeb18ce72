"""Token buckets, one per client, bounded in number: how many failed token reviews a client may cost.

A bucket holds up to ``burst`` tokens and gains ``rate`` a second. :meth:`Buckets.take` spends one before the work it
limits and :meth:`Buckets.give_back` returns it when the work turns out not to count (a review that let a sender
in), so concurrent requests of one client can never overshoot the limit. At most ``max_clients`` buckets are kept,
the least recently used dropped first: a dropped client starts again full, which costs at most ``burst`` more.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable


class Buckets:
    """Thread-safe. ``clock`` is monotonic seconds."""

    def __init__(self, burst: int, rate: float, *, clock: Callable[[], float], max_clients: int = 1024) -> None:
        if burst < 1 or rate <= 0:
            raise ValueError("a bucket needs burst >= 1 and rate > 0")
        self.burst, self.rate, self.clock, self.max_clients = float(burst), rate, clock, max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # client -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, client: str) -> bool:
        """Spend one token of ``client``'s bucket; False (nothing spent) when it is empty."""
        with self._lock:
            tokens = self._now(client)
            if tokens < 1:
                return False
            self._put(client, tokens - 1)
            return True

    def give_back(self, client: str) -> None:
        with self._lock:
            self._put(client, min(self._now(client) + 1, self.burst))

    def _now(self, client: str) -> float:
        tokens, at = self._buckets.get(client, (self.burst, self.clock()))
        return min(self.burst, tokens + max(self.clock() - at, 0.0) * self.rate)

    def _put(self, client: str, tokens: float) -> None:
        self._buckets[client] = (tokens, self.clock())
        self._buckets.move_to_end(client)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
