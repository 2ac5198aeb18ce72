"""A TrainJob's work done after the answer, by a few threads of this process (``KAI_FN_BACKGROUND_WORKERS``).

Why: a direct sink gets a namespace's events one at a time, each after the previous answer (knative/README.md,
"Knative's adapters, measured"). Answered after the work, a burst of N TrainJobs in one namespace waits for N
reconciles in a row, each a few API calls long, and the function's other threads idle. Answered at once (202) with
the work queued here, the adapter hands over the next event right away and the work of many TrainJobs overlaps.

The queue is a client-go style work queue keyed by TrainJob (issue 38): every event of a TrainJob (its own, its
JobSet's, its PodGroups', the resync's, its timer's) is offered under that one key. One entry per key (a later offer
is merged into the queued one, ``merge``, and keeps its place), never two workers on one key (an offer arriving
meanwhile is worked on once the first is done), and a failed pass (the API unreachable, a 5xx, a guard that kept
failing) tried again after a growing delay, a bounded number of times; ``Again(payload)`` retries only the part that
failed. A key may also be offered for later (:meth:`WorkQueue.offer_after`, controller-runtime's ``RequeueAfter``):
one timer per key, the earliest kept, in memory only (a restarted process has the resync's safety net). A graceful
stop (SIGTERM: a rollout, a scale-down) first drains the queue (the handler's ``DRAIN_SECONDS``); timers are not
waited for. What is lost (the process killed with work queued, a pass out of tries, a drain cut short, a timer) is
what the adapter would have dropped after its own retries: the resync (every minute) finds every TrainJob still
owed its work.
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
    """Raised by the work function: this pass failed in a way a later one may not (see the module docstring).
    ``payload``: what the retry is to do, when only a part of the item's work failed (None: all of it)."""

    def __init__(self, payload: Any = None) -> None:
        super().__init__()
        self.payload = payload


def newest(_older: Any, newer: Any) -> Any:
    """The default merge: a later offer replaces the queued one."""
    return newer


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
    """The pending passes: one first-come-first-served lane per namespace, taken in turn, and in each lane the urgent
    work (``urgent(payload)``) before the rest. A mapping of key to item for what the queue needs of it (``in``, get,
    set, ``len``, truth)."""

    def __init__(self, lane: Callable[[Hashable], Hashable], urgent: Callable[[Any], bool]) -> None:
        self.lane, self.urgent = lane, urgent
        self._lanes: dict[Hashable, tuple[OrderedDict[Hashable, Item], OrderedDict[Hashable, Item]]] = {}
        self._turns: deque[Hashable] = deque()  # the lanes with work, the next to serve first
        self._size = 0

    def _held(self, key: Hashable) -> OrderedDict[Hashable, Item] | None:
        """The part of its lane (urgent or not) that holds ``key``, if any."""
        return next((part for part in self._lanes.get(self.lane(key), ()) if key in part), None)

    def __contains__(self, key: Hashable) -> bool:
        return self._held(key) is not None

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Hashable]:
        for lane in self._turns:
            for part in self._lanes[lane]:
                yield from part

    def __setitem__(self, key: Hashable, item: Item) -> None:
        """A new key joins the end of its lane's part; a known one is replaced in its place, or moves to the end of
        the urgent part once its work is urgent."""
        lane = self.lane(key)
        if lane not in self._lanes:
            self._lanes[lane] = (OrderedDict(), OrderedDict())
            self._turns.append(lane)
        urgent, rest = self._lanes[lane]
        if key in urgent:
            urgent[key] = item
        elif key in rest and self.urgent(item.payload):
            del rest[key]
            urgent[key] = item
        elif key in rest:
            rest[key] = item
        else:
            (urgent if self.urgent(item.payload) else rest)[key] = item
            self._size += 1

    def get(self, key: Hashable) -> Item:
        part = self._held(key)
        if part is None:
            raise KeyError(key)
        return part[key]

    def setdefault(self, key: Hashable, item: Item) -> Item:
        if key not in self:
            self[key] = item
        return self.get(key)

    def pop_next(self) -> tuple[Hashable, Item]:
        """The oldest urgent pass of the lane whose turn it is, else its oldest; that lane then waits behind the
        others."""
        lane = self._turns.popleft()
        urgent, rest = self._lanes[lane]
        key, item = (urgent or rest).popitem(last=False)
        self._size -= 1
        if urgent or rest:
            self._turns.append(lane)
        else:
            del self._lanes[lane]
        return key, item


class WorkQueue:
    """``work(item)`` runs on one of ``workers`` daemon threads, started with the first offer (after any fork).
    ``merge(older, newer)``: one payload for two offers of a key; ``urgent(payload)``: work served before the rest
    of its lane. ``clock`` (monotonic seconds) says when a retry or a timer is due; tests pass one they move."""

    def __init__(self, work: Callable[[Item], None], workers: int, *, capacity: int = 10000, tries: int = 6,
                 first_delay: float = 0.5, on_drop: Callable[[Item, BaseException | None], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, lane: Callable[[Hashable], Hashable] = namespace_of,
                 merge: Callable[[Any, Any], Any] = newest, urgent: Callable[[Any], bool] = lambda _: True) -> None:
        self.work, self.workers, self.capacity, self.tries = work, workers, capacity, tries
        self.first_delay, self.on_drop, self.clock, self.lane, self.merge = first_delay, on_drop, clock, lane, merge
        self._cond = threading.Condition()
        self._pending = _Lanes(lane, urgent)
        self._active: set[Hashable] = set()
        self._dirty: dict[Hashable, Item] = {}  # offered while active: queued again when that pass ends
        self._later: list[tuple[float, int, Item]] = []  # retries and timers, by when they are due
        self._retrying: dict[Hashable, Item] = {}  # the retry each key waits for (a newer offer takes it in)
        self._timers: dict[Hashable, tuple[float, Item]] = {}  # the one timer of each key, and when it is due
        self._order = itertools.count()
        self._threads: list[threading.Thread] = []

    def offer(self, key: Hashable, payload: Any) -> bool:
        """Queue work for ``key``; False (nothing queued) when the queue holds ``capacity`` TrainJobs already."""
        with self._cond:
            if not self._known(key) and self.depth() >= self.capacity:
                return False
            self._put(Item(key, payload, time.monotonic()))
            self._start()
            self._cond.notify()
            return True

    def offer_after(self, key: Hashable, payload: Any, seconds: float) -> None:
        """Queue work for ``key`` in ``seconds`` (a timer): a key has one, due at the earliest time asked, its
        payloads merged. It holds no place in :meth:`depth` until it is due."""
        with self._cond:
            due = self.clock() + max(seconds, 0.0)
            held = self._timers.get(key)
            if held is not None:
                due = min(due, held[0])
                payload = self.merge(held[1].payload, payload)
            item = Item(key, payload, time.monotonic())
            self._timers[key] = (due, item)
            heapq.heappush(self._later, (due, next(self._order), item))
            self._start()
            self._cond.notify()

    def forget_timer(self, key: Hashable) -> None:
        """The key's timer is not needed any more (what it waited for happened)."""
        with self._cond:
            self._timers.pop(key, None)

    def timers(self) -> int:
        """Keys with a timer set (``kai_fn_work_timers``)."""
        with self._cond:
            return len(self._timers)

    def _known(self, key: Hashable) -> bool:
        return key in self._active or key in self._pending or key in self._retrying

    def _put(self, item: Item) -> None:
        """``item`` joins its key's work: merged into the pass to come after the running one, into the queued one
        (in its place), or into the retry it waits for (which it starts now), else queued."""
        key = item.key
        if (retry := self._retrying.pop(key, None)) is not None:
            item = Item(key, self.merge(retry.payload, item.payload), item.queued_at)
        if key in self._active:
            older = self._dirty.get(key)
            self._dirty[key] = item if older is None else Item(key, self.merge(older.payload, item.payload),
                                                               item.queued_at)
        elif key in self._pending:
            older = self._pending.get(key)
            self._pending[key] = Item(key, self.merge(older.payload, item.payload), item.queued_at)
        else:
            self._pending[key] = item

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

    def _due(self, now: float) -> None:
        """The retries and timers due by ``now`` join their keys' work; a superseded one is dropped."""
        while self._later and self._later[0][0] <= now:
            _, _, item = heapq.heappop(self._later)
            if self._retrying.get(item.key) is item:
                del self._retrying[item.key]
                if item.key in self._active:
                    self._dirty.setdefault(item.key, item)
                else:
                    self._pending.setdefault(item.key, item)
            elif (timer := self._timers.get(item.key)) is not None and timer[1] is item:
                del self._timers[item.key]
                self._put(Item(item.key, item.payload, time.monotonic()))

    def _next(self) -> Item:
        with self._cond:
            while True:
                now = self.clock()
                self._due(now)
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
            except Again as again:
                if item.attempt < self.tries:
                    payload = item.payload if again.payload is None else again.payload
                    retry = Item(item.key, payload, item.queued_at, item.attempt + 1)
                elif self.on_drop:
                    self.on_drop(item, None)
            except Exception as error:  # a bug must not stop the worker: the resync will see the TrainJob again
                if self.on_drop:
                    self.on_drop(item, error)
            self._done(item, retry)

    def _done(self, item: Item, retry: Item | None) -> None:
        with self._cond:
            self._active.discard(item.key)
            newer = self._dirty.pop(item.key, None)
            if newer is not None:  # a newer offer takes in the part to retry, now
                self._pending[item.key] = newer if retry is None else Item(
                    item.key, self.merge(retry.payload, newer.payload), newer.queued_at)
            elif retry is not None:
                delay = self.first_delay * 2 ** (retry.attempt - 2)
                self._retrying[item.key] = retry
                heapq.heappush(self._later, (self.clock() + delay, next(self._order), retry))
            self._cond.notify_all()
