"""What this process did lately, so that the events that follow it cost no API call.

A burst of TrainJobs in one namespace reaches the function one event at a time (the adapter's watch waits for each
answer), and most of those events are about work already done: Trainer's status updates of a TrainJob carry the copy
from before its release, and KAI's controllers update a bound gang's PodGroup many times over. Each used to cost
reads (the JobSet and the TrainJob; the TrainJob), and every later event of the namespace waited for them.

Remembered, per process and bounded (least recently used goes first): the TrainJobs whose JobSet it decided with
nothing left for kai_fn to do (by the TrainJob's uid and the JobSet's), the PodGroups whose gang it knows to be
bound, the gangs it made before Trainer made their JobSets (the TrainJob read and the main PodGroup made), so that
the JobSet's add is judged without reading them again (:mod:`kai_fn.function.jobset_seen`), and then, until the gang
is bound, that TrainJob with the JobSet its add showed, so that the look at the gang reads neither again
(:mod:`kai_fn.function.gang_status`). Any later event of such a TrainJob asks for work that is done; a bound gang is
never reported again. Forgetting (a restart, another replica, an old entry) only costs the reads again, never a wrong
answer.
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

EARLY_BYTES = 32 * 1024  # of JSON per gang made early: at most 1,000 kept, some 32 MB at worst (a TrainJob: 2-10 KB)

Made = tuple[dict[str, Any], dict[str, Any]]  # the TrainJob as the pass read it, its main PodGroup as made
Named = tuple[dict[str, Any], dict[str, Any]]  # that TrainJob, its JobSet as its add showed it (named at admission)


def _kept(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without its managedFields and status: what the memory keeps of an object."""
    kept = {**obj, "metadata": {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}}
    kept.pop("status", None)
    return kept


class Recent:
    def __init__(self, size: int = 20000, early: int = 1000) -> None:
        self._size, self._early_size = size, early
        self._lock = threading.Lock()
        self._decided: OrderedDict[str, None] = OrderedDict()  # TrainJob uids
        self._bound: OrderedDict[str, None] = OrderedDict()  # PodGroup uids
        self._early: OrderedDict[str, Made] = OrderedDict()  # TrainJob uid -> its gang made before its JobSet
        self._named: OrderedDict[str, Named] = OrderedDict()  # TrainJob uid -> it and its JobSet, until bound

    def made_early(self, uid: str | None, trainjob: dict[str, Any], podgroup: dict[str, Any]) -> None:
        """A gang made from its TrainJob's event, before Trainer made the JobSet: the JobSet's add comes next. Kept
        without the TrainJob's managedFields and status, and not at all when the rest is over :data:`EARLY_BYTES`
        (a tenant's object is not the process's memory to fill: its JobSet's add is then read, as before)."""
        kept = _kept(trainjob)
        if uid and len(json.dumps(kept)) + len(json.dumps(podgroup)) <= EARLY_BYTES:
            self._put(self._early, uid, (kept, podgroup), self._early_size)

    def early(self, uid: str | None) -> Made | None:
        """What :meth:`made_early` kept for the TrainJob, taken: one JobSet's add is judged from it, once."""
        with self._lock:
            return self._early.pop(uid or "", None)

    def named(self, uid: str | None, trainjob: dict[str, Any], jobset: dict[str, Any]) -> None:
        """The JobSet's add of a gang made early showed it as planned (:mod:`kai_fn.function.jobset_seen`): the
        TrainJob (as :meth:`made_early` kept it) and that JobSet, kept the same way and within the same bound, until
        the gang is bound."""
        kept = _kept(jobset)
        if uid and len(json.dumps(trainjob)) + len(json.dumps(kept)) <= EARLY_BYTES:
            self._put(self._named, uid, (trainjob, kept), self._early_size)

    def known(self, uid: str | None) -> Named | None:
        """What :meth:`named` kept for the TrainJob, left in place: a look that finds the gang still waiting is
        followed by others."""
        with self._lock:
            return self._named.get(uid or "")

    def decided(self, *uids: str | None) -> None:
        """The TrainJob's uid, and its JobSet's: a held JobSet Trainer makes again has a new one."""
        for uid in uids:
            if uid:
                self._put(self._decided, uid, None, self._size)

    def is_decided(self, uid: str | None) -> bool:
        with self._lock:
            return bool(uid) and uid in self._decided

    def forget(self, uid: str | None) -> None:
        """Its TrainJob owes kai_fn work again (the schedule timeout suspended it): what this process saw of it is
        no longer where it stands."""
        with self._lock:
            self._decided.pop(uid or "", None)
            self._named.pop(uid or "", None)

    def bound(self, podgroup_uid: str | None, trainjob_uid: str | None = None) -> None:
        """The gang of that PodGroup is bound: never looked at again; its TrainJob's :meth:`named` entry is let go."""
        if podgroup_uid:
            self._put(self._bound, podgroup_uid, None, self._size)
        if trainjob_uid:
            with self._lock:
                self._named.pop(trainjob_uid, None)

    def is_bound(self, podgroup_uid: str | None) -> bool:
        with self._lock:
            return bool(podgroup_uid) and podgroup_uid in self._bound

    def _put(self, table: OrderedDict[str, Any], key: str, value: Any, size: int) -> None:
        """``key`` kept last, and the table cut to ``size`` from its least recently kept end."""
        with self._lock:
            table[key] = value
            table.move_to_end(key)
            while len(table) > size:
                table.popitem(last=False)

