"""One worker at a time on a TrainJob, whatever brought the work (issue 38): its pass after the answer (the work
queue), a pass the delivery makes itself, a PodGroup event's report on its gang, the resync's and the sweep's and the
timeout's work on it. Each takes the TrainJob's lock for the work of that one TrainJob, so two never settle its
placeholders, post its reports or read-then-write its objects at once; work on other TrainJobs goes on.

A lock lives while someone holds or waits for it: the map holds only TrainJobs being worked on now. It is
reentrant: work that holds a TrainJob may call work that takes it again.
"""
from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager


class KeyLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Hashable, tuple[threading.RLock, int]] = {}

    @contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        """The work of ``key`` (a TrainJob's ``(namespace, name)``), after any under way on it."""
        with self._guard:
            lock, users = self._locks.get(key, (threading.RLock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        """TrainJobs being worked on, or waited for, now."""
        with self._guard:
            return len(self._locks)
