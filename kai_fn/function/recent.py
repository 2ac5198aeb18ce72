"""What this process did lately, so that the events that follow it cost no API call.

A burst of TrainJobs in one namespace reaches the function one event at a time (the adapter's watch waits for each
answer), and most of those events are about work already done: Trainer's status updates of a TrainJob carry the copy
from before its release, and KAI's controllers update a bound gang's PodGroup many times over. Each used to cost
reads (the JobSet and the TrainJob; the TrainJob), and every later event of the namespace waited for them.

Remembered, per process and bounded (least recently used goes first): the TrainJobs it released, with the
resourceVersion its release wrote, and the PodGroups whose gang it knows to be bound. A copy of a TrainJob older than
its release (resourceVersions of one resource compare as integers: apimachinery's ``CompareResourceVersion``,
Kubernetes 1.35+) shows work done; a bound gang is never reported again. Forgetting (a restart, another replica, an
old entry) only costs the reads again, never a wrong answer.
"""
from __future__ import annotations

import threading
from collections import OrderedDict


class Recent:
    def __init__(self, size: int = 20000) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._released: OrderedDict[str, str] = OrderedDict()  # TrainJob uid -> resourceVersion of its release
        self._bound: OrderedDict[str, None] = OrderedDict()  # PodGroup uids

    def released(self, uid: str | None, resource_version: object) -> None:
        if uid and _well_formed(resource_version):
            self._put(self._released, uid, resource_version)

    def done_before(self, uid: str | None, resource_version: object) -> bool:
        """True when this process released this TrainJob at a later resourceVersion: the copy an event carries is
        from before the release, so the work it asks for is done."""
        if not uid or not _well_formed(resource_version):
            return False
        with self._lock:
            at = self._released.get(uid)
        return at is not None and older(str(resource_version), at)

    def bound(self, podgroup_uid: str | None) -> None:
        if podgroup_uid:
            self._put(self._bound, podgroup_uid, None)

    def is_bound(self, podgroup_uid: str | None) -> bool:
        with self._lock:
            return bool(podgroup_uid) and podgroup_uid in self._bound

    def _put(self, table: OrderedDict, key: str, value: object) -> None:
        with self._lock:
            table[key] = value
            table.move_to_end(key)
            while len(table) > self._size:
                table.popitem(last=False)


def _well_formed(rv: object) -> bool:
    return isinstance(rv, str) and rv.isdigit() and not rv.startswith("0")


def older(a: str, b: str) -> bool:
    """resourceVersion ``a`` is before ``b`` (both well formed): apimachinery's CompareResourceVersion."""
    return (len(a), a) < (len(b), b)
