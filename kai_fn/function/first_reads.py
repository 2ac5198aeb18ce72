"""A pass's first reads made at once, not one after another: the TrainJob, its JobSet and, while the process's
caches are cold, what the plan reads (the runtime, KAI's defaults, the Queues).

A TrainJob's pass races Trainer: its PodGroup should exist before the first pod does, and on an idle cluster Trainer
makes the JobSet and its pods within a second of the create. One after another, those reads cost a round trip each
before the PodGroup's create; at once they cost the slowest one.

The warm-up plans from the event's body, which decides nothing: it only fills the caches the pass then reads
(:class:`~kai_fn.function.cluster.CachedSession`, :mod:`kai_fn.function.kai_cluster`), with objects as the API
server returns them; the pass plans from the TrainJob it reads itself. Its failures are the pass's to meet again.

Only an authenticated delivery gets reads beside: without ``KAI_FN_AUDIENCE`` anyone may send a body, and one forged
event would buy several reads; there the pass reads the TrainJob, then what it needs, one at a time as before.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

from kai_fn.core.models import InputError, TrainJob, parse
from kai_fn.core.plan import Plan
from kai_fn.core.runtime import target
from kai_fn.function import kai_cluster
from kai_fn.function.cluster import CachedServer, CachedSession
from kai_fn.kube import ApiError
from kai_fn.plan_inputs import queue_check
from kai_fn.settings import Settings

log = logging.getLogger("kai_fn")


@dataclass(frozen=True)
class FirstReads:
    """The TrainJob and its JobSet (either None when absent), read now; ``jobset_read`` False: the JobSet is the
    pass's to read."""

    trainjob: dict[str, Any] | None
    jobset: dict[str, Any] | None = None
    jobset_read: bool = True


UNREAD = FirstReads(None, jobset_read=False)


def first_reads(session: CachedSession, settings: Settings, namespace: str, name: str,
                body: dict[str, Any] | None = None) -> FirstReads:
    """Both objects, read at once when delivery is authenticated (``KAI_FN_AUDIENCE``); the plan's inputs warmed
    from ``body`` beside them when the runtime cache has none of its runtime. A read's refusal is raised as a lone
    read would raise it."""
    server = session.server
    if not settings.audience:  # unauthenticated, anyone may send a body: one read, then the next, as it needs
        return FirstReads(session.trainjob(namespace, name), jobset_read=False)
    reads = [_Beside(server, lambda s: s.jobset(namespace, name))]
    if _cold(server, body):
        reads.append(_Beside(server, lambda s: _warm(s, settings, body)))
    try:
        trainjob = session.trainjob(namespace, name)
    finally:
        wait([read.future for read in reads])  # no read outlives the pass's first step
        session.calls += sum(read.session.calls for read in reads)
    return FirstReads(trainjob, reads[0].future.result())


class _Beside:
    """One read on the server's reading threads, in a session of its own (its calls are added to the pass's)."""

    def __init__(self, server: CachedServer, read: Callable[[CachedSession], Any]) -> None:
        self.session = server.session()
        self.future: Future[Any] = server.readers.submit(read, self.session)


def _cold(server: CachedServer, body: dict[str, Any] | None) -> bool:
    if not body or server.runtime_ttl <= 0:
        return False
    try:
        return server.cached_runtime(target(parse(TrainJob, body))) is None
    except InputError:
        return False


def _warm(session: CachedSession, settings: Settings, body: dict[str, Any] | None) -> None:
    """The plan's reads for ``body``, into the caches; nothing is decided from it."""
    try:
        planned = kai_cluster.planned(session, settings, body or {})
        if isinstance(planned, Plan) and settings.queue_check != "off":
            queue_check(session, planned)
    except ApiError as error:
        log.debug("warm-up read failed; the pass reads again", extra={"fields": {"error": str(error)}})
    except Exception:  # the pass plans again and meets it there; no thread dies of it unseen
        log.warning("warm-up failed; the pass plans from its own read", exc_info=True)
