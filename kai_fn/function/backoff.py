"""Refused and failing TrainJobs back off from the resync (issue 39, attack 5).

A TrainJob whose gang kai_fn refuses (an invalid annotation, a missing Queue, a plan it cannot make) or whose pass
keeps failing stays owed a pass: its JobSet is named and it has no gang. With no memory of that, every resync and
every catch-up would redo each of them, so a tenant's five hundred bad TrainJobs cost a thousand API calls a minute
and delay everyone else's. The process therefore remembers, per TrainJob (namespace, name and uid), how many passes
in a row were refused or failed, and the resync offers it again only ``first * 2**(n-1)`` seconds after the last
(``KAI_FN_RESYNC_BACKOFF_SECONDS``, at most ``cap``). Only the resync's own offers wait: an event of the TrainJob
itself is worked on at once, a TrainJob changed since its refusal (its author fixed it, even if that event was lost)
is due at once, and a pass that makes the gang forgets it. A change in the Queues makes every TrainJob due again (a
missing or too small Queue is the commonest refusal); a refusal another object lifts (a runtime fixed later) waits
at most ``cap``.

The memory is the process's, bounded to ``size`` TrainJobs (the longest unseen go first): a new process, or one that
forgot, tries each once more and backs off again.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

Key = tuple[str, str, str]  # namespace, name, uid

FIRST_SECONDS = 60.0  # one resync period of knative/base: a refused TrainJob is seen by the next ping, then less often
CAP_SECONDS = 600.0  # a refusal another object lifts (a Queue or runtime made later) waits at most this
SIZE = 100_000
FORGETS = frozenset({"done", "ignored"})  # the gang made (or found made); the TrainJob gone or not kai_fn's
FAILS = frozenset({"blocked", "error"})  # refused; failed unexpectedly (a ``retry`` is the API's failing, not its)


@dataclass
class _Failing:
    times: int
    due: float
    version: str  # the TrainJob's resourceVersion its last pass read ("" when unknown)


class Backoff:
    """Thread-safe; one per process. ``clock``: monotonic seconds."""

    def __init__(self, *, first: float = FIRST_SECONDS, cap: float = CAP_SECONDS, size: int = SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.first, self.cap, self.size, self.clock = first, cap, size, clock
        self._failing: OrderedDict[Key, _Failing] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, key: Key, result: str, version: str = "") -> None:
        """The result of a pass of the TrainJob ``key``: :data:`FORGETS` forget it, :data:`FAILS` count one more
        failure in a row, and the others (a duplicate skipped, a wait its author asked for) change nothing."""
        with self._lock:
            if result in FORGETS:
                self._failing.pop(key, None)
                return
            if result not in FAILS:
                return
            failing = self._failing.pop(key, None) or _Failing(0, 0.0, "")
            failing.times, failing.version = failing.times + 1, version
            failing.due = self.clock() + min(self.first * 2 ** (failing.times - 1), self.cap)
            self._failing[key] = failing
            while len(self._failing) > self.size:
                self._failing.popitem(last=False)

    def due(self, key: Key, version: str = "") -> bool:
        """Whether the resync may offer the TrainJob ``key`` (at resourceVersion ``version``) now."""
        with self._lock:
            failing = self._failing.get(key)
            return (failing is None or failing.due <= self.clock()
                    or bool(version and failing.version and version != failing.version))

    def any(self) -> bool:
        with self._lock:
            return bool(self._failing)

    def clear(self) -> None:
        """Every TrainJob due again: what refused them may be gone (the Queues changed)."""
        with self._lock:
            self._failing.clear()

    def waiting(self) -> int:
        """TrainJobs the resync leaves for later now (``kai_fn_backing_off``)."""
        with self._lock:
            now = self.clock()
            return sum(1 for f in self._failing.values() if f.due > now)
