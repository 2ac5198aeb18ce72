"""The resync's view of the cluster: TrainJobs joined with the JobSets they control and kai_fn's main PodGroups.

Three LISTs, whatever the number of TrainJobs: the gate's state lives on the JobSet and the gang's on its PodGroup
(:mod:`kai_fn.core.state`), so no per-TrainJob read is needed to know what is owed.
"""
from __future__ import annotations

from kai_fn.core import turns
from kai_fn.core.state import Entry, join, podgroup_api
from kai_fn.function.backoff import Backoff, Key
from kai_fn.function.cluster import Session
from kai_fn.settings import Settings


def creation_order(entry: Entry) -> str:
    """The resync's turns go by the TrainJob's creation (:mod:`kai_fn.core.turns`)."""
    return turns.order(entry.trainjob)


def take(session: Session, settings: Settings, namespace: str | None = None) -> list[Entry]:
    return join(session.list_trainjobs(namespace), session.list_jobsets(namespace),
                session.podgroups(podgroup_api(settings.flavor), namespace))


def owed(entry: Entry, settings: Settings) -> bool:
    """A pass is owed (:meth:`kai_fn.core.state.Facts.owes_pass`) or the gang holds places (``Entry.holding``)."""
    return entry.marks.owes_pass(settings.watches(entry.key[0])) or entry.holding


def backoff_key(entry: Entry) -> Key:
    namespace, name = entry.key
    return namespace, name, str((entry.trainjob.get("metadata") or {}).get("uid") or "")


def version_of(entry: Entry) -> str:
    return str((entry.trainjob.get("metadata") or {}).get("resourceVersion") or "")


def due(entries: list[Entry], settings: Settings, backoff: Backoff) -> tuple[list[Entry], int]:
    """The entries owed a pass now, and how many more are owed but backing off (:mod:`kai_fn.function.backoff`)."""
    owed_now = [e for e in entries if owed(e, settings)]
    ready = [e for e in owed_now if backoff.due(backoff_key(e), version_of(e))]
    return ready, len(owed_now) - len(ready)
