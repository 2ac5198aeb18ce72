"""The plan a made gang is judged by: "bound" counts against the plan's minMember and Jobs
(:func:`kai_fn.core.state.judged`), never against the PodGroup's spec, which a writer of PodGroups could edit.

Planned again as the pass plans it (:mod:`kai_fn.plan_inputs`: the runtime cached, KAI's defaults and PriorityClasses
kept for ``KAI_FN_RUNTIME_CACHE_SECONDS``). A TrainJob that cannot be planned now (its runtime deleted or broken since
the gang was made) has no plan, so its pods never call it bound: the caller says why and leaves the gang as it is,
rather than calling it bound or timing it out on a count it cannot make.
"""
from __future__ import annotations

from typing import Any

from kai_fn.core.plan import Plan
from kai_fn.function import kai_cluster
from kai_fn.function.cluster import CachedSession
from kai_fn.settings import Settings


def of(session: CachedSession, settings: Settings, trainjob: dict[str, Any]) -> Plan | None:
    """The TrainJob's plan, or None when it has none now (its TrainJob or runtime unreadable, its runtime gone)."""
    found = kai_cluster.planned(session, settings, trainjob)
    return found if isinstance(found, Plan) else None
