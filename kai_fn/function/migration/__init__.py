"""The migrations from kai_fn's earlier versions, one module each, and what the pass and the resync call of them.

- :mod:`~kai_fn.function.migration.jobset_hold`: 0.2.0 held each JobSet (labelled, suspended) until kai_fn decided
  it; each one still held is decided and released once.
- :mod:`~kai_fn.function.migration.trainjob_gate`: 0.1.0 suspended the TrainJob itself (``kai-fn/auto-suspended``);
  its marks are carried to the JobSet and PodGroup and the TrainJob resumed.

The pass reads the JobSet through :func:`carry` and each decision through :func:`released`, and ends with
:func:`after_pass`; the resync adds :func:`resync`'s share, or with a work queue hands it :func:`due`'s TrainJobs
for :func:`migrate`. Nothing else in kai_fn knows of either.
"""
from __future__ import annotations

from typing import Any

from kai_fn.core.state import Entry
from kai_fn.function.cluster import CachedSession
from kai_fn.function.execute import Retry
from kai_fn.function.inventory import creation_order
from kai_fn.function.isolate import tally_of
from kai_fn.kube import Transient
from kai_fn.function.migration import jobset_hold, trainjob_gate
from kai_fn.function.migration.jobset_hold import released, seen
from kai_fn.function.migration.trainjob_gate import after_pass
from kai_fn.settings import Settings

__all__ = ["after_pass", "carry", "due", "migrate", "released", "resync", "seen", "untouched"]


def untouched(trainjob: dict[str, Any], jobset: dict[str, Any] | None) -> bool:
    """Neither earlier version marked them: the pass would carry nothing and release nothing."""
    return not trainjob_gate.concerns(trainjob) and not jobset_hold.marked(jobset)


def carry(session: CachedSession, settings: Settings, trainjob: dict[str, Any], jobset: dict[str, Any] | None
          ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The TrainJob and its JobSet as the pass is to decide them: 0.1.0's marks carried off the TrainJob, and a JobSet
    0.2.0 still holds seen as one admission did not name."""
    trainjob, jobset = trainjob_gate.carry(session, settings, trainjob, jobset)
    return trainjob, seen(jobset)


def resync(session: CachedSession, settings: Settings, entries: list[Entry]) -> str:
    """The resync's share without a work queue: :func:`due`'s TrainJobs, ``KAI_FN_RESYNC_LIMIT`` in turn, each
    holding its TrainJob."""
    found = due(session, settings, entries)
    if not found:
        return ""
    tally: dict[str, int] = {}
    for entry in session.server.take_turn("migration", found, settings.resync_limit, creation_order):
        with session.server.locks.hold(entry.key):
            result = tally_of("migration", session, entry.trainjob, lambda: migrate(session, settings, entry),
                              retried=(Retry, Transient))
        tally[result] = tally.get(result, 0) + 1
    return f"; {len(found)} of earlier versions: " + ", ".join(f"{n} {r}" for r, n in sorted(tally.items()))


def due(session: CachedSession, settings: Settings, entries: list[Entry]) -> list[Entry]:
    """The listed TrainJobs the resync owes a migration's turn (each once), for the work queue."""
    gate = trainjob_gate.due(session, entries)
    return gate + [e for e in jobset_hold.due(settings, entries) if e not in gate]


def migrate(session: CachedSession, settings: Settings, entry: Entry) -> str:
    """One of :func:`due`'s TrainJobs, by the version that marked it (the caller holds its TrainJob)."""
    if trainjob_gate.concerns(entry.trainjob):
        return trainjob_gate.migrate(session, settings, entry)
    return jobset_hold.migrate(session, settings, entry)
