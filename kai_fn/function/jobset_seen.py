"""A JobSet's add judged from what this process just did: no read, when the JobSet's body shows what the pass would
find.

A TrainJob's pass usually makes its gang before Trainer makes the JobSet (:mod:`kai_fn.function.first_reads`). The
JobSet's add, moments later, is the second chance: a pass that reads the TrainJob, the JobSet and the main PodGroup
again, only to find the gang made, in the seconds when Trainer's one worker is making the other TrainJobs' JobSets on
the same API server. Here that add is decided by the pass's own decision (:mod:`kai_fn.core.decide`) on the TrainJob
as the pass read it, the main PodGroup as it made it (:meth:`kai_fn.function.recent.Recent.made_early`) and the
JobSet's body. Only "already gang-scheduled", with the JobSet like the plan, is answered so; anything else, a
JobSet unlike the plan among them, goes to the pass, which reads everything again.

A body may skip a look, never make a write: a forged body can at most spare a JobSet the second look, which the
resync gives every named JobSet whose gang is owed. Only an authenticated delivery (``KAI_FN_AUDIENCE``) is taken so.
The TrainJob and the JobSet so judged are kept until the gang is bound (:meth:`kai_fn.function.recent.Recent.named`):
the look at the gang (:mod:`kai_fn.function.gang_status`) then reads neither again.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kai_fn.core import decide, state
from kai_fn.core.decide import Skip
from kai_fn.function import kai_cluster
from kai_fn.function.cluster import CachedSession
from kai_fn.function.events import TrainJobEvent, Via
from kai_fn.function.report import Outcome
from kai_fn.settings import Settings


def answer(event: TrainJobEvent, session: CachedSession, settings: Settings,
           context_of: Callable[[dict[str, Any], dict[str, Any]], decide.Context],
           untouched: Callable[[dict[str, Any], dict[str, Any]], bool]) -> Outcome | None:
    """``skipped`` for a named JobSet's add whose gang this process made before it, or None: the pass decides.
    ``context_of``: the pass's own context of a TrainJob and its JobSet; ``untouched``: neither carries an earlier
    version's marks (:func:`kai_fn.function.migration.untouched`, which only the pass's module imports)."""
    if not settings.audience or event.via is not Via.JOBSET or event.jobset is None:
        return None
    made = session.server.recent.early(event.uid)
    if made is None:
        return None
    trainjob, podgroup = made
    jobset = event.jobset
    if state.own_jobset(trainjob, jobset) is None or not untouched(trainjob, jobset):
        return None
    facts, context = state.facts(trainjob, jobset, podgroup), context_of(trainjob, jobset)
    action = decide.before_plan(facts, context)
    if not isinstance(action, Skip) or decide.made_before_its_jobset(
            facts, context, kai_cluster.planned(session, settings, trainjob)) is not None:
        return None
    session.server.recent.decided(event.uid, event.jobset_uid)
    session.server.recent.named(event.uid, trainjob, jobset)  # the look at the gang reads neither again
    return Outcome("skipped", f"{action.why}: its JobSet's body is the plan's, as named at admission (no read)",
                   event.namespace, event.name, event.uid, action.podgroup)
