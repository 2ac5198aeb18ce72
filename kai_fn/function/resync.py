"""The periodic resync (a PingSource, every minute), apart from the event handlers as kopf keeps its timers.

It finds what no event brought: JobSets named at admission whose gang kai_fn has not made (an adapter restarted and
replayed nothing, a pass ran out of tries, the function was down), JobSets an earlier version held, released gangs
not yet known to be bound (binding changes no PodGroup, so no event says it), overdue schedule timeouts (a timer is
in memory: a process started since has none) and TrainJobs of earlier versions. With workers it only enqueues: each
TrainJob's work goes to the work queue under its key (:mod:`kai_fn.function.keywork`), the owed passes all at once
(bounded by the queue's capacity, not by a count per ping; a refused or failing TrainJob only once its back-off is
over, :mod:`kai_fn.function.backoff`), the rest ``KAI_FN_RESYNC_LIMIT`` of each kind in turn, and gangs waiting for
a timeout not yet due get their timers. Without workers, it does that work here, ``KAI_FN_RESYNC_LIMIT`` of each
kind in turn, each TrainJob holding its lock. A resync that got this far renews the heartbeat. It sees only the
namespaces that opted in (:func:`kai_fn.function.inventory.take`), and so do the sweep, the migration and the
timeouts, which take its entries.
"""
from __future__ import annotations

import contextlib
import datetime
import threading
import uuid
from collections.abc import Callable

from kai_fn.core.state import Entry
from kai_fn.function import gang_status, heartbeat, inventory, metrics, migration, timeouts
from kai_fn.function.cluster import CachedSession
from kai_fn.kube import Transient
from kai_fn.function.events import TrainJobEvent, Via
from kai_fn.function.isolate import tally_of
from kai_fn.function.keywork import Chores
from kai_fn.function.optin import OptIn
from kai_fn.function.reconcile import Reconciler, Retry, now
from kai_fn.function.report import Outcome
from kai_fn.settings import Settings
from kai_fn.function.workqueue import WorkQueue



class OneAtATime:
    """One resync at a time in a process: a ping that arrives while one runs joins it and answers with its outcome,
    so a flood of pings (forged, or a redelivering sender) costs the LISTs of one resync, not one each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: tuple[threading.Event, list[Outcome | BaseException]] | None = None

    def run(self, work: Callable[[], Outcome]) -> Outcome:
        with self._lock:
            joined = self._running
            if joined is None:
                mine: tuple[threading.Event, list[Outcome | BaseException]] = (threading.Event(), [])
                self._running = mine
        if joined is not None:
            metrics.RESYNC_JOINS.inc()
            done, result = joined
            done.wait()
            if isinstance(result[0], BaseException):
                raise result[0]
            return Outcome(result[0].result, f"joined the resync under way: {result[0].reason}")
        done, result = mine
        try:
            outcome = work()
            result.append(outcome)
            return outcome
        except BaseException as error:
            result.append(error)
            raise
        finally:
            with self._lock:
                self._running = None
            done.set()


def as_event(entry: Entry) -> TrainJobEvent:
    namespace, name = entry.key
    return TrainJobEvent(f"resync-{uuid.uuid4()}", Via.RESYNC, "ref", namespace, name,
                         (entry.trainjob.get("metadata") or {}).get("uid"), entry.trainjob, via=Via.RESYNC)


def resync(session: CachedSession, settings: Settings, optin: OptIn, queue: WorkQueue | None = None) -> Outcome:
    moment = now()
    entries = inventory.take(session, settings, optin)
    backoff = session.server.backoff
    if backoff.any() and settings.flavor == "kai":
        with contextlib.suppress(Transient):  # read to lift the back-offs when a Queue changed (from the cache)
            session.queues()
    owed, backing_off = inventory.due(entries, settings, backoff)
    summary = (f"resync: {len(owed)} owed a pass" + (f" ({backing_off} more backing off)" if backing_off else "")
               + "; " + (enqueue(queue, session, settings, entries, owed, moment) if queue is not None
                         else inline(session, settings, entries, owed, moment)))
    return Outcome("done", summary + "; " + heartbeat.beat(session, settings, moment))


def enqueue(queue: WorkQueue, session: CachedSession, settings: Settings, entries: list[Entry], owed: list[Entry],
            moment: datetime.datetime) -> str:
    """With workers, every TrainJob's work goes to the queue under its key and none is done here: the passes owed
    (all of them; one the full queue refuses is made here, as without workers), and, ``KAI_FN_RESYNC_LIMIT`` each
    in turn, the released gangs not known to be bound, the overdue timeouts and earlier versions' marks. The other
    gangs waiting with a timeout get their timers (no API call)."""
    queued = [e for e in owed if queue.offer(e.key, Chores(trainjob=as_event(e)))]
    tally = {"queued": len(queued)} if queued else {}
    refused = [e for e in owed if e not in queued]
    summary = _passes(session, settings, refused, moment, tally)
    looks = session.server.take_turn("sweep", released(settings, entries), settings.resync_limit,
                                     inventory.creation_order)
    migrating = session.server.take_turn("migration", migration.due(session, settings, entries), settings.resync_limit,
                                          inventory.creation_order)
    waits = timeouts.waits(session, settings, entries) if settings.flavor == "kai" else []
    overdue = [(w, e) for w, e in waits if w.deadline <= moment][: settings.resync_limit]
    for wait, entry in waits:
        if wait.deadline > moment:
            queue.offer_after(entry.key, Chores(timer=True), (wait.deadline - moment).total_seconds())
    counts = {"gang looks": sum(queue.offer(e.key, Chores(gang=e)) for e in looks),
              "overdue timeouts": sum(queue.offer(e.key, Chores(overdue=(w, e))) for w, e in overdue),
              "of earlier versions": sum(queue.offer(e.key, Chores(migrate=e)) for e in migrating)}
    return summary + "".join(f"; {n} {what} queued" for what, n in counts.items() if n) + (
        f"; {len(waits) - len(overdue)} timers set" if len(waits) > len(overdue) else "")


def inline(session: CachedSession, settings: Settings, entries: list[Entry], owed: list[Entry],
           moment: datetime.datetime) -> str:
    """Without workers, the resync's own work, each TrainJob holding its lock: ``KAI_FN_RESYNC_LIMIT`` passes owed,
    released gangs, overdue timeouts and TrainJobs of the earlier gate, each in turn."""
    summary = _passes(session, settings, owed, moment, {})
    gangs = released(settings, entries)
    if gangs:
        swept = gang_status.sweep(session, settings, gangs)
        summary += f"; {len(gangs)} released gangs not yet bound: " + ", ".join(
            f"{n} {r}" for r, n in sorted(swept.items()))
    summary += migration.resync(session, settings, entries)
    if settings.flavor == "kai":
        summary += "; " + timeouts.check(session, settings, entries, moment)
    return summary


def released(settings: Settings, entries: list[Entry]) -> list[Entry]:
    """The listed gangs made and not known to be bound or timed out, in the namespaces kai_fn serves: each worth a
    look, as binding changes no PodGroup."""
    return [e for e in entries if e.podgroup is not None and e.marks.settled() is None and settings.watches(e.key[0])]


def _passes(session: CachedSession, settings: Settings, owed: list[Entry], moment: datetime.datetime,
            tally: dict[str, int]) -> str:
    """``KAI_FN_RESYNC_LIMIT`` of the passes ``owed`` made here, in turn; the summary of those and ``tally``."""
    backoff = session.server.backoff
    for entry in session.server.take_turn("owed", owed, settings.resync_limit, inventory.creation_order):
        with session.server.locks.hold(entry.key):
            result = tally_of("resync", session, entry.trainjob, lambda: Reconciler(
                session, settings, entry.trainjob, entry.jobset, moment).run().result, retried=(Retry, Transient))
        backoff.record(inventory.backoff_key(entry), result, inventory.version_of(entry))
        tally[result] = tally.get(result, 0) + 1
    left = max(len(owed) - settings.resync_limit, 0)
    summary = ", ".join(f"{n} {r}" for r, n in sorted(tally.items())) or "nothing to do"
    return summary + (f"; {left} left for the next run" if left else "")
