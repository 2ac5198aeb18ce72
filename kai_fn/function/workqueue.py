"""TrainJob work done after the answer, by a few threads of this process (``KAI_FN_BACKGROUND_WORKERS``).

Why: a direct sink gets a namespace's events one at a time, each after the previous answer (knative/README.md,
"Knative's adapters, measured"). Answered after the work, a burst of N TrainJobs in one namespace waits for N
reconciles in a row, each a few API calls long, and the function's other threads idle. Answered at once (202) with
the work queued here, the adapter hands over the next event right away and the work of many TrainJobs overlaps.

The queue is a client-go style work queue: one entry per TrainJob (a later event replaces the queued one and keeps
its place), never two workers on one TrainJob (an event arriving meanwhile is worked on once the first is done), and
a failed pass (the API unreachable, a 5xx, a guard that kept failing) tried again after a growing delay, a bounded
number of times. A graceful stop (SIGTERM: a rollout, a scale-down) first drains the queue (the handler's
``DRAIN_SECONDS``). What is lost (the process killed with work queued, a pass out of tries, a drain cut short) is
what the adapter would have dropped after its own retries: the resync (every minute) finds every suspended
TrainJob still owed its gang.
A full queue refuses the offer, and the caller then does the work before answering, as with no workers.

The queue is fair between namespaces (issue 39, attack 5): each namespace has a lane, first come first served within
it, and the workers take from the lanes in turn. A team that queues a thousand passes (a resync that found a thousand
of its TrainJobs owed, refused ones included) delays another team's next pass by at most one pass of each other
namespace with work queued, not by its thousand.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any


class Again(Exception):
    """Raised by the work function: this pass failed in a way a later one may not (see the module docstring)."""


@dataclass
class Item:
    key: Hashable
    payload: Any
    queued_at: float  # time.monotonic() of the offer this pass answers
    attempt: int = 1


def namespace_of(key: Hashable) -> Hashable:
    """A TrainJob's lane: its namespace, the first of its ``(namespace, name)`` key."""
    return key[0] if isinstance(key, tuple) and key else key


class _Lanes:
    """The pending passes: one first-come-first-served lane per namespace, taken in turn. A mapping of key to item
    for what the queue needs of it (``in``, get, set, ``len``, truth)."""

    def __init__(self, lane: Callable[[Hashable], Hashable]) -> None:
        self.lane = lane
        self._lanes: dict[Hashable, OrderedDict[Hashable, Item]] = {}
        self._turns: deque[Hashable] = deque()  # the lanes with work, the next to serve first
        self._size = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._lanes.get(self.lane(key), ())

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Hashable]:
        for lane in self._turns:
            yield from self._lanes[lane]

    def __setitem__(self, key: Hashable, item: Item) -> None:
        """A new key joins the end of its lane; a known one is replaced in its place."""
        lane = self.lane(key)
        if lane not in self._lanes:
            self._lanes[lane] = OrderedDict()
            self._turns.append(lane)
        if key not in self._lanes[lane]:
            self._size += 1
        self._lanes[lane][key] = item

    def setdefault(self, key: Hashable, item: Item) -> Item:
        if key not in self:
            self[key] = item
        return self._lanes[self.lane(key)][key]

    def pop_next(self) -> tuple[Hashable, Item]:
        """The oldest pass of the lane whose turn it is; that lane then waits behind the others."""
        lane = self._turns.popleft()
        queue = self._lanes[lane]
        key, item = queue.popitem(last=False)
        self._size -= 1
        if queue:
            self._turns.append(lane)
        else:
            del self._lanes[lane]
        return key, item


class WorkQueue:
    """``work(item)`` runs on one of ``workers`` daemon threads, started with the first offer (after any fork).
    ``clock`` (monotonic seconds) says when a retry is due; tests pass one they move."""

    def __init__(self, work: Callable[[Item], None], workers: int, *, capacity: int = 10000, tries: int = 6,
                 first_delay: float = 0.5, on_drop: Callable[[Item, BaseException | None], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, lane: Callable[[Hashable], Hashable] = namespace_of
                 ) -> None:
        self.work, self.workers, self.capacity, self.tries = work, workers, capacity, tries
        self.first_delay, self.on_drop, self.clock, self.lane = first_delay, on_drop, clock, lane
        self._cond = threading.Condition()
        self._pending = _Lanes(lane)
        self._active: set[Hashable] = set()
        self._dirty: dict[Hashable, Item] = {}  # offered while active: queued again when that pass ends
        self._later: list[tuple[float, int, Item]] = []  # retries, by when they are due
        self._retrying: dict[Hashable, Item] = {}  # the retry each key waits for (a newer offer cancels it)
        self._order = itertools.count()
        self._threads: list[threading.Thread] = []

    def offer(self, key: Hashable, payload: Any) -> bool:
        """Queue work for ``key``; False (nothing queued) when the queue holds ``capacity`` TrainJobs already."""
        with self._cond:
            item = Item(key, payload, time.monotonic())
            self._retrying.pop(key, None)
            if key in self._active:
                self._dirty[key] = item
            elif key in self._pending:
                self._pending[key] = item  # the newer event, in the older one's place
            else:
                if self.depth() >= self.capacity:
                    return False
                self._pending[key] = item
            self._start()
            self._cond.notify()
            return True

    def depth(self) -> int:
        """TrainJobs queued, waiting to be tried again, or being worked on."""
        with self._cond:
            return len(set(self._pending) | set(self._retrying) | self._active)

    def idle(self) -> bool:
        return self.depth() == 0

    def drain(self, timeout: float) -> int:
        """Waits until nothing is queued, waiting to be tried again or running, for at most ``timeout`` seconds;
        returns how many TrainJobs are still held then."""
        end = time.monotonic() + timeout
        with self._cond:
            while (left := self.depth()) and (wait := end - time.monotonic()) > 0:
                self._cond.wait(min(wait, 0.1))
        return left

    def _start(self) -> None:
        while len(self._threads) < self.workers:
            thread = threading.Thread(target=self._run, name=f"kai-fn-work-{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _next(self) -> Item:
        with self._cond:
            while True:
                now = self.clock()
                while self._later and self._later[0][0] <= now:
                    _, _, item = heapq.heappop(self._later)
                    if self._retrying.get(item.key) is not item:
                        continue  # superseded by a newer offer
                    del self._retrying[item.key]
                    if item.key in self._active:
                        self._dirty.setdefault(item.key, item)
                    else:
                        self._pending.setdefault(item.key, item)
                if self._pending:
                    key, item = self._pending.pop_next()
                    self._active.add(key)
                    return item
                self._cond.wait(max(0.0, self._later[0][0] - now) if self._later else None)

    def _run(self) -> None:
        while True:
            item = self._next()
            retry: Item | None = None
            try:
                self.work(item)
            except Again:
                if item.attempt < self.tries:
                    retry = Item(item.key, item.payload, item.queued_at, item.attempt + 1)
                elif self.on_drop:
                    self.on_drop(item, None)
            except Exception as error:  # a bug must not stop the worker: the resync will see the TrainJob again
                if self.on_drop:
                    self.on_drop(item, error)
            with self._cond:
                self._active.discard(item.key)
                newer = self._dirty.pop(item.key, None)
                if newer is not None:
                    self._pending[item.key] = newer  # a newer event supersedes the retry
                elif retry is not None:
                    delay = self.first_delay * 2 ** (retry.attempt - 2)
                    self._retrying[item.key] = retry
                    heapq.heappush(self._later, (self.clock() + delay, next(self._order), retry))
                self._cond.notify_all()
