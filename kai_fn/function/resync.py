"""The periodic resync (a PingSource, every minute), apart from the event handlers as kopf keeps its timers.

It finds what no event brought: JobSets named at admission whose gang kai_fn has not made (an adapter restarted and
replayed nothing, a pass ran out of tries, the function was down), JobSets an earlier version held, released gangs
not yet known to be bound (binding changes no PodGroup, so no event says it), and overdue schedule timeouts. Owed
passes go to the work queue all at once (bounded by the queue's capacity, not by a count per ping; a refused or
failing TrainJob only once its back-off is over, :mod:`kai_fn.function.backoff`); without one,
``KAI_FN_RESYNC_LIMIT`` are reconciled here, in turn. A resync that got this far renews the heartbeat. It sees only
the namespaces that opted in (:func:`kai_fn.function.inventory.take`), and so do the sweep, the migration and the
timeouts, which take its entries.
"""
from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable

from kai_fn.core.state import Entry
from kai_fn.function import gang_status, heartbeat, inventory, metrics, migration, timeouts
from kai_fn.function.cluster import CachedSession
from kai_fn.kube import Transient
from kai_fn.function.events import TrainJobEvent, Via
from kai_fn.function.isolate import tally_of
from kai_fn.function.optin import OptIn
from kai_fn.function.reconcile import Reconciler, Retry, now
from kai_fn.function.report import Outcome
from kai_fn.settings import Settings

Offer = Callable[[TrainJobEvent], bool]


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


def resync(session: CachedSession, settings: Settings, optin: OptIn, offer: Offer | None = None) -> Outcome:
    moment = now()
    entries = inventory.take(session, settings, optin)
    backoff = session.cluster.backoff
    if backoff.any() and settings.flavor == "kai":
        with contextlib.suppress(Transient):  # read to lift the back-offs when a Queue changed (from the cache)
            session.queues()
    owed, backing_off = inventory.due(entries, settings, backoff)
    tally: dict[str, int] = {}
    queued = [e for e in owed if offer is not None and offer(as_event(e))]
    if queued:
        tally["queued"] = len(queued)
    inline = [e for e in owed if e not in queued]
    for entry in session.cluster.take_turn("owed", inline, settings.resync_limit, inventory.creation_order):
        with session.cluster.locks.hold(entry.key):
            result = tally_of("resync", session, entry.trainjob, lambda: Reconciler(
                session, settings, entry.trainjob, entry.jobset, moment).run().result, retried=(Retry, Transient))
        backoff.record(inventory.backoff_key(entry), result, inventory.version_of(entry))
        tally[result] = tally.get(result, 0) + 1
    left = max(len(inline) - settings.resync_limit, 0)
    summary = ", ".join(f"{n} {r}" for r, n in sorted(tally.items())) or "nothing to do"
    summary = (f"resync: {len(owed)} owed a pass" + (f" ({backing_off} more backing off)" if backing_off else "")
               + f"; {summary}" + (f"; {left} left for the next run" if left else ""))
    released = [e for e in entries if e.podgroup is not None and e.marks.settled() is None
                and settings.watches(e.key[0])]
    if released:
        swept = gang_status.sweep(session, settings, released)
        summary += f"; {len(released)} released gangs not yet bound: " + ", ".join(
            f"{n} {r}" for r, n in sorted(swept.items()))
    summary += migration.resync(session, settings, entries)
    if settings.flavor == "kai":
        summary += "; " + timeouts.check(session, settings, entries, moment)
    return Outcome("done", summary + "; " + heartbeat.beat(session, settings, moment))
