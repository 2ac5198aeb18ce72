"""The resync's view of the cluster: TrainJobs joined with the JobSets they control and kai_fn's main PodGroups, in
the namespaces that opted in (:mod:`kai_fn.function.optin`) and nowhere else.

Its LISTs, whatever the number of TrainJobs: at most one of Namespaces (by the opt-in label, cached for
``KAI_FN_NAMESPACE_CACHE_SECONDS``), then for each of the N opted-in namespaces one of TrainJobs and one of JobSets
(namespaced: TrainJobs carry no label of kai_fn's, and a suspended JobSet owed its gang may carry none either), and
one of kai_fn's PodGroups (label ``app.kubernetes.io/managed-by=kai-fn``): 2N + 2 at most, each read in pages
(:mod:`kai_fn.kube.listing`). The gate's state lives on the JobSet and the gang's on its PodGroup
(:mod:`kai_fn.core.state`), so no per-TrainJob read is needed to know what is owed.
"""
from __future__ import annotations

from kai_fn.core import turns
from kai_fn.core.objects import meta
from kai_fn.core.state import Entry, join, podgroup_api
from kai_fn.function.backoff import Backoff, Key
from kai_fn.function.cluster import CachedSession
from kai_fn.function.optin import OptIn
from kai_fn.settings import Settings


def creation_order(entry: Entry) -> str:
    """The resync's turns go by the TrainJob's creation (:mod:`kai_fn.core.turns`)."""
    return turns.order(entry.trainjob)


def take(session: CachedSession, settings: Settings, optin: OptIn) -> list[Entry]:
    """Every TrainJob of the opted-in namespaces, joined (2N + 2 LISTs at most: the module's docstring)."""
    names = optin.names(session)
    trainjobs = [t for ns in sorted(names) for t in session.list_trainjobs(ns)]
    jobsets = [j for ns in sorted(names) for j in session.list_jobsets(ns)]
    podgroups = [p for p in session.podgroups(podgroup_api(settings.flavor)) if meta(p).get("namespace") in names]
    return join(trainjobs, jobsets, podgroups)


def owed(entry: Entry, settings: Settings) -> bool:
    """A pass is owed (:meth:`kai_fn.core.state.Facts.owes_pass`) or the gang holds places (``Entry.holding``)."""
    return entry.marks.owes_pass(settings.watches(entry.key[0])) or entry.holding


def backoff_key(entry: Entry) -> Key:
    namespace, name = entry.key
    return namespace, name, str(meta(entry.trainjob).get("uid") or "")


def version_of(entry: Entry) -> str:
    return str(meta(entry.trainjob).get("resourceVersion") or "")


def due(entries: list[Entry], settings: Settings, backoff: Backoff) -> tuple[list[Entry], int]:
    """The entries owed a pass now, and how many more are owed but backing off (:mod:`kai_fn.function.backoff`)."""
    owed_now = [e for e in entries if owed(e, settings)]
    ready = [e for e in owed_now if backoff.due(backoff_key(e), version_of(e))]
    return ready, len(owed_now) - len(ready)
