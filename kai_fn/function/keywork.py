"""One TrainJob's turn in the work queue (issue 38, item 1), as controller-runtime maps every owned object's event to
its owner's key: every event of a TrainJob is offered under its key ``(namespace, name)``. Its own and its JobSet's
ask for a pass; its PodGroups' for a look at its gang (the TrainJob the PodGroup's kai_fn label names); the resync's
for a pass owed, a look at a released gang not known to be bound, an overdue schedule timeout or an earlier
version's marks; its timer's for its schedule timeout, at the deadline. A key's work is the union of what was offered for it
since its last turn (:class:`Chores`, :func:`merge`), done in that order: the pass first, as it may make or adopt
the gang the others look at. Each part costs the API calls it cost in the request thread or in the resync, and logs
one ``work`` line; a part a retry may fix is tried again alone (``Again``), one that failed unexpectedly is logged
and left to the resync, the others are done.

A gang seen waiting with a schedule timeout sets its key's timer to the deadline (``RequeueAfter``); a gang bound
clears it. The timers live in memory: the resync hands the queue every overdue gang, and sets the others' timers,
for a process started since.
"""
from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from functools import partial, reduce
from typing import Any

from kai_fn.core.schedule_timeout import Wait
from kai_fn.core.state import Entry
from kai_fn.function import gang_status, metrics, migration, reconcile, timeouts
from kai_fn.function.cluster import CachedServer, CachedSession
from kai_fn.function.events import PodGroupEvent, TrainJobEvent
from kai_fn.function.isolate import apart
from kai_fn.function.optin import OptIn
from kai_fn.function.report import Outcome, log
from kai_fn.function.workqueue import Again, Item, WorkQueue
from kai_fn.kube import Transient
from kai_fn.settings import Settings

Key = tuple[str, str]


@dataclass(frozen=True)
class Chores:
    """What a TrainJob's events asked of its next turn."""

    trainjob: TrainJobEvent | None = None  # a pass: the newest event that asked for one
    podgroups: tuple[PodGroupEvent, ...] = ()  # a look at the gang: the newest event of each PodGroup
    gang: Entry | None = None  # the resync's look at a released gang, as listed
    overdue: tuple[Wait, Entry] | None = None  # the resync's overdue schedule timeout, as listed
    timer: bool = False  # the key's timer: its schedule timeout, its objects read then
    migrate: Entry | None = None  # an earlier version's marks, as listed (kai_fn.function.migration)


def merge(older: Chores, newer: Chores) -> Chores:
    """Both turns' work in one: the newer event where both asked for the same."""
    looks = {e.name: e for e in older.podgroups} | {e.name: e for e in newer.podgroups}
    return Chores(newer.trainjob or older.trainjob, tuple(looks.values()), newer.gang or older.gang,
                  newer.overdue or older.overdue, older.timer or newer.timer, newer.migrate or older.migrate)


def urgent(chores: Chores) -> bool:
    """A pass comes before looks in its namespace's lane: it may make a gang whose pods wait for their PodGroup, where
    a look only reports (KAI writes a PodGroup's status about ten times while it binds, each a PodGroup event; served
    in arrival order, those looks delayed the next TrainJobs' PodGroups by seconds in a burst: BENCHMARKS.md,
    "Chain with one keyed queue")."""
    return chores.trainjob is not None


@dataclass(frozen=True)
class Done:
    """How one part went, for its log line; ``due``: its gang waits, and its timeout is due then."""

    result: str
    reason: str
    fields: dict[str, Any] = field(default_factory=dict)
    due: datetime.datetime | None = None
    bound: bool = False


Part = tuple[Chores, str, Callable[[CachedSession], Done]]  # what to retry if it fails, its kind, its work


class Worker:
    """The work queue's work function (``queue`` set once the queue is made): one turn of one key."""

    def __init__(self, server: CachedServer, settings: Settings, optin: OptIn) -> None:
        self.server, self.settings, self.optin = server, settings, optin
        self.queue: WorkQueue | None = None

    def __call__(self, item: Item) -> None:
        failed: list[Chores] = []
        key = key_of(item)
        for retry, kind, work in self.parts(item.payload, key):
            session = self.server.session()
            started = time.perf_counter()
            fields: dict[str, Any] = {"work": kind, "namespace": key[0], "name": key[1],
                                      "attempt": item.attempt,
                                      "waited_ms": round((time.monotonic() - item.queued_at) * 1000, 1)}
            try:
                done = work(session)
            except (Transient, reconcile.Retry) as error:
                failed.append(retry)
                _log_work(kind, fields | {"outcome": "retry", "reason": str(error), "api_calls": session.calls},
                          started)
                continue
            except Exception as error:  # a bug must not cost the key's other parts: the resync sees it again
                metrics.WORK.labels("dropped").inc()
                log.warning("work dropped", exc_info=error, extra={"fields": fields | {
                    "reason": f"failed unexpectedly ({type(error).__name__}: {error}); the resync tries it again"}})
                continue
            _log_work(kind, fields | done.fields | {"outcome": done.result, "reason": done.reason,
                                                     "api_calls": session.calls}, started)
            self.timer(key, done)
        if failed:
            raise Again(reduce(merge, failed))

    def timer(self, key: Hashable, done: Done) -> None:
        """The key's timer set to the deadline a part saw, or cleared once its gang is bound."""
        if self.queue is None:
            return
        if done.bound:
            self.queue.forget_timer(key)
        elif done.due is not None:
            seconds = (done.due - reconcile.now()).total_seconds()
            self.queue.offer_after(key, Chores(timer=True), seconds)

    def parts(self, chores: Chores, key: Key) -> Iterator[Part]:
        """The turn's parts, in their order (the module's docstring)."""
        if (event := chores.trainjob) is not None:
            yield Chores(trainjob=event), "trainjob", lambda s: self.pass_of(event, s)
        for look in chores.podgroups:
            yield Chores(podgroups=(look,)), "gang_status", partial(self.look, look)
        looked = {e.name for e in chores.podgroups}
        if (entry := chores.gang) is not None and entry.marks.podgroup not in looked:
            yield Chores(gang=entry), "gang_status", lambda s: self.listed_gang(entry, s)
        if (overdue := chores.overdue) is not None:
            yield Chores(overdue=overdue), "timeout", lambda s: self.held(key, s, lambda: _timed(
                timeouts.timed(s, self.settings, overdue[0], overdue[1], reconcile.now())))
        elif chores.timer:
            yield Chores(timer=True), "timeout", lambda s: self.held(key, s, lambda: _timed(
                timeouts.on_timer(s, self.settings, key, reconcile.now())))
        if (marked := chores.migrate) is not None:
            yield Chores(migrate=marked), "migration", lambda s: self.held(key, s, lambda: Done(
                migration.migrate(s, self.settings, marked), "an earlier version's marks"))

    def pass_of(self, event: TrainJobEvent, session: CachedSession) -> Done:
        outcome = reconcile.reconcile(event, session, self.settings, self.optin)
        return _of(outcome, {"type": event.type, "id": event.id, "kind": event.via, "uid": event.uid,
                             "mode": event.mode})

    def look(self, event: PodGroupEvent, session: CachedSession) -> Done:
        outcome = gang_status.observe(event, session, self.settings, self.optin)
        return _of(outcome, {"type": event.type, "id": event.id, "kind": "PodGroup", "podgroup": event.name})

    def listed_gang(self, entry: Entry, session: CachedSession) -> Done:
        """The resync's look at a released gang, from its listed objects (a pod list, maybe an Event and a mark)."""
        def report() -> Outcome:
            return gang_status.report_on(session, self.settings, entry.trainjob, entry.podgroup or {},
                                         entry.marks.podgroup or "")
        with session.server.locks.hold(entry.key):
            outcome = apart("sweep", session, entry.trainjob, report, Outcome("error", "failed unexpectedly (logged)"),
                            let_through=(Transient, reconcile.Retry))
        return _of(outcome, {})

    def held(self, key: Key, session: CachedSession, work: Callable[[], Done]) -> Done:
        """``work`` holding the TrainJob (:mod:`kai_fn.function.keylocks`), as inline work does."""
        with session.server.locks.hold(key):
            return work()


def key_of(item: Item) -> Key:
    """The TrainJob's ``(namespace, name)`` an item is queued under."""
    key = item.key
    assert isinstance(key, tuple), "every key offered is a TrainJob's (namespace, name)"
    return str(key[0]), str(key[1])


def _of(outcome: Outcome, fields: dict[str, Any]) -> Done:
    out = dict(fields) | {"uid": outcome.uid or fields.get("uid")}
    if outcome.podgroup:
        out["podgroup"] = outcome.podgroup
    if outcome.phase:
        out["phase"] = outcome.phase
    return Done(outcome.result, outcome.reason, out, outcome.due, outcome.bound)


def _timed(result: tuple[str, datetime.datetime | None]) -> Done:
    what, due = result
    return Done(what, f"schedule timeout: {what}", {}, due)


def _log_work(kind: str, fields: dict[str, Any], started: float) -> None:
    seconds = time.perf_counter() - started
    metrics.RECONCILE_SECONDS.labels(kind).observe(seconds)
    metrics.WORK.labels(fields["outcome"] if kind in ("trainjob", "gang_status") or fields["outcome"] == "retry"
                        else "done").inc()
    level = logging.WARNING if fields["outcome"] == "retry" else logging.INFO
    log.log(level, "work", extra={"fields": fields | {"ms": round(seconds * 1000, 1)}})


def dropped(item: Item, error: BaseException | None) -> None:
    """The queue's ``on_drop``: a key's turn out of tries, or failed outside its parts."""
    namespace, name = key_of(item)
    metrics.WORK.labels("dropped").inc()
    why = f"failed unexpectedly ({type(error).__name__}: {error})" if error else f"out of tries ({item.attempt})"
    log.warning("work dropped", exc_info=error, extra={"fields": {
        "namespace": namespace, "name": name, "attempt": item.attempt, "reason": f"{why}; the resync tries it again"}})
