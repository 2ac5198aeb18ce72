"""The plan a made gang is judged by: "bound" counts against the plan's minMember and Jobs
(:func:`kai_fn.core.state.judged`), never against the PodGroup's spec, which a writer of PodGroups could edit.

Planned again from the TrainJob and its runtime (cached), with no PriorityClass, KAI ConfigMap or Topology read: the
pod sets and start waves, all that is counted, depend on neither. A TrainJob that cannot be planned now (its runtime
deleted or broken since the gang was made) has no plan, so its pods never call it bound: the caller says why and
leaves the gang as it is, rather than calling it bound or timing it out on a count it cannot make.
"""
from __future__ import annotations

from typing import Any

from kai_fn.core.models import InputError, Runtime, TrainJob, parse
from kai_fn.core.owner_metadata import KaiCluster
from kai_fn.core.plan import Plan, plan
from kai_fn.core.runtime import target
from kai_fn.function.cluster import CachedSession
from kai_fn.settings import Settings


def of(session: CachedSession, settings: Settings, trainjob: dict[str, Any]) -> Plan | None:
    """The TrainJob's plan, or None when it has none now."""
    try:
        return planned(session, settings, trainjob)
    except InputError:
        return None


def planned(session: CachedSession, settings: Settings, trainjob: dict[str, Any]) -> Plan | None:
    """The TrainJob's plan from its runtime (cached) and the queue's node pool, PriorityClasses playing no part;
    None when its runtime is gone; :class:`InputError` when the TrainJob or runtime cannot be read."""
    job = parse(TrainJob, trainjob)
    raw = session.runtime(target(job))
    if raw is None:
        return None
    cluster = KaiCluster(node_pool_label=settings.node_pool_label_key)
    return plan(job, parse(Runtime, raw), **settings.planning(), cluster=cluster)
