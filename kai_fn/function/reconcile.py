"""From one TrainJob to its gang: read, plan, decide (:mod:`kai_fn.core.decide`), carry out
(:mod:`kai_fn.function.execute`).

The admission policy names, at its CREATE, the gang of every JobSet a TrainJob controls whose pods ask for the
flavor's scheduler: each pod template names its PodGroup, and KAI binds none before it exists. The pass makes the
PodGroups (usually from the TrainJob's own event, before the JobSet exists) and writes neither the JobSet nor the
TrainJob (its Events say what was done). A JobSet admission did not name (suspended, on Kubernetes 1.33) gets the gang,
then its pod templates and the decision in one guarded patch, and stays suspended; one the previous version held is
released by the same patch (:mod:`kai_fn.function.migration`). Every step is idempotent, so duplicates, retries and
concurrent deliveries are harmless.

An event's body is never acted on, whoever sent it: the plan comes from a fresh GET (or the resync's LIST), made
with kai_fn's own identity.
"""
from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from kai_fn.core import decide, objects, state
from kai_fn.core.decide import Action, Context, MakeGang
from kai_fn.function import jobset_seen, kai_cluster, migration, report
from kai_fn.kube import Gone, GuardFailed, Invalid, Transient
from kai_fn.kube.errors import status_body
from kai_fn.function.cluster import CachedSession
from kai_fn.function.events import TrainJobEvent, Via
from kai_fn.function.execute import Changed, Execution, NotYet, Retry
from kai_fn.function.first_reads import UNREAD, FirstReads, first_reads
from kai_fn.function.isolate import apart
from kai_fn.function.optin import OptIn, refusal
from kai_fn.function.report import Outcome
from kai_fn.settings import Settings

__all__ = ["Reconciler", "Retry", "NotYet", "answer_without_a_read", "not_opted_in", "pass_of", "reconcile", "now"]

_PATCH_ATTEMPTS = 3


def answer_without_a_read(event: TrainJobEvent, session: CachedSession, settings: Settings) -> Outcome | None:
    """The answer the event's identity (and what this process remembers) gives without an API call, or None when
    the TrainJob needs a pass. The body is never read here: whoever sent it, only the live TrainJob decides."""
    if not settings.watches(event.namespace) and event.via is not Via.JOBSET:
        return Outcome("ignored", "namespace not in KAI_FN_NAMESPACES", event.namespace, event.name, event.uid)
    # A JobSet's event is judged by the JobSet's uid: Trainer makes a deleted JobSet again, held, with a new one.
    known = event.uid if event.via is Via.TRAINJOB else event.jobset_uid
    if event.via is not Via.RESYNC and session.server.recent.is_decided(known):
        return Outcome("skipped", "duplicate: this process decided its JobSet", event.namespace, event.name, event.uid)
    return None


def not_opted_in(event: TrainJobEvent, session: CachedSession, optin: OptIn) -> Outcome | None:
    """The answer to an event whose namespace did not opt in (no read of the object, no write: kai_fn does nothing
    there, whoever sent it), or None. Costs the opted-in namespaces' LIST at most every
    ``KAI_FN_NAMESPACE_CACHE_SECONDS``."""
    if optin.opted_in(session, event.namespace):
        return None
    return Outcome("ignored", refusal(event.namespace), event.namespace, event.name, event.uid)


def reconcile(event: TrainJobEvent, session: CachedSession, settings: Settings, optin: OptIn) -> Outcome:
    """One TrainJob's pass, planned from the TrainJob as the API server returns it to kai_fn: read now, or listed
    by the resync a moment ago. An event's body, authenticated or not, never decides a gang. How it ended sets the
    TrainJob's back-off from the resync (:mod:`kai_fn.function.backoff`); a pass the API failed is no refusal."""
    if (answer := answer_without_a_read(event, session, settings)) is not None:
        return answer
    if (answer := not_opted_in(event, session, optin)) is not None:
        return answer
    return pass_of(event, session, settings)


def pass_of(event: TrainJobEvent, session: CachedSession, settings: Settings) -> Outcome:
    """The pass, once :func:`answer_without_a_read` and :func:`not_opted_in` let the event through. Its reads are
    made under the TrainJob's key lock, the TrainJob and its JobSet at once (:mod:`kai_fn.function.first_reads`)."""
    failed = Outcome("error", "the pass failed unexpectedly (logged, Warning on the TrainJob)", event.namespace,
                     event.name, event.uid)
    with session.server.locks.hold((event.namespace, event.name)):
        seen = jobset_seen.answer(event, session, settings, lambda tj, js: context_of(settings, tj, js, now()),
                                  migration.untouched)
        if seen is not None:
            return seen
        if event.via is Via.RESYNC and event.object is not None:
            obj, reconciler = event.object, Reconciler(session, settings, event.object)
        else:
            read = first_reads(session, settings, event.namespace, event.name,
                               event.object if event.via is Via.TRAINJOB else None)
            if read.trainjob is None or (event.uid and read.trainjob.get("metadata", {}).get("uid") != event.uid):
                return Outcome("ignored", "the TrainJob no longer exists", event.namespace, event.name, event.uid)
            obj, reconciler = read.trainjob, Reconciler(session, settings, read.trainjob, read=read)
        outcome = apart("pass", session, obj, reconciler.run, failed, let_through=(Retry, Transient))
    meta = obj.get("metadata") or {}
    session.server.backoff.record((event.namespace, event.name, str(meta.get("uid") or "")), outcome.result,
                                   str(meta.get("resourceVersion") or ""))
    return outcome


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def context_of(settings: Settings, trainjob: dict[str, Any], jobset: dict[str, Any] | None,
               moment: datetime.datetime) -> Context:
    """What the decision needs of the settings, for a TrainJob and its JobSet as read."""
    return Context(trainjob, jobset, moment, watched=settings.watches(objects.meta(trainjob).get("namespace", "")),
                   resume=settings.resume, precheck=settings.flavor == "kai" and settings.queue_check != "off")


class Reconciler(Execution):
    """One TrainJob's pass: the reads and the plan; :class:`Execution` carries out what is decided."""

    def __init__(self, session: CachedSession, settings: Settings, obj: dict[str, Any],
                 jobset: dict[str, Any] | None = None, moment: datetime.datetime | None = None,
                 read: FirstReads | None = None) -> None:
        super().__init__(session, settings, obj, jobset, moment or now())
        self.gone = False
        self.first = read or UNREAD  # the JobSet read beside the TrainJob, taken by the first live_jobset

    def run(self) -> Outcome:
        """The pass, its Outcome carrying where the TrainJob stands after it, when the pass can tell
        (:func:`kai_fn.core.state.after_pass`)."""
        outcome = self.act()
        if outcome.result == "error" or objects.deleting(self.obj) or self.gone:
            return outcome
        where = state.after_pass(self.obj, self.jobset, self.main, self.refused, made=self.made)
        return dataclasses.replace(outcome, phase=str(where) if where is not None else None)

    def act(self) -> Outcome:
        if objects.deleting(self.obj):
            return self.outcome("ignored", "the TrainJob is being deleted")
        try:
            jobset = self.jobset if self.jobset is not None else self.live_jobset()
            self.obj, self.jobset = migration.carry(self.session, self.settings, self.obj, jobset)
            action, outcome = self.decide_and_do()
            return migration.after_pass(self.session, self.settings, self.obj, self.jobset, action, outcome)
        except Gone:
            self.gone = True
            return self.outcome("ignored", "the TrainJob no longer exists")
        except GuardFailed:
            raise Retry("the JobSet kept changing under kai_fn's patch") from None
        except Invalid as refused:  # not a guard: the API server refuses what the write would make; say so, once
            why = status_body(refused.body).get("message") or str(refused)
            return self.warn(report.UNPROCESSABLE, f"the API server refused kai_fn's write: {str(why)[:400]}")
        except NotYet as wait:
            return self.carry_out(decide.Wait(wait.token))

    def context(self) -> Context:
        return context_of(self.settings, self.obj, self.jobset, self.now)

    def decide_and_do(self) -> tuple[Action, Outcome]:
        """Decide, then carry it out; a guarded JobSet patch (a gang's, or the too-late mark) that found the JobSet
        changed is decided again on it, read now, up to three times."""
        made = self.main = self.made_gang()
        facts = state.facts(self.obj, self.jobset, made)
        action = decide.before_plan(facts, self.context())
        if action is not None:
            action = migration.released(action, facts, self.context())
            if isinstance(action, decide.Skip) and made is not None and (unlike := decide.made_before_its_jobset(
                    facts, self.context(), self.planned())) is not None:
                self.carry_out(unlike)  # told once per process: the Skip below remembers the JobSet
            return action, self.carry_out(action)
        planned = self.planned()
        for _ in range(_PATCH_ATTEMPTS):
            facts = state.facts(self.obj, self.jobset, made)
            action = migration.released(decide.with_plan(facts, self.context(), planned), facts, self.context())
            try:
                if not isinstance(action, MakeGang):
                    return action, self.carry_out(action)
                return action, self.make_gang(action)
            except Changed:
                self.jobset = migration.seen(self.live_jobset())  # resumed, replaced or changed: decide again
                if self.jobset is None:
                    raise Gone("the JobSet was deleted under the patch") from None
                made = self.main = self.made_gang()
        raise Retry("the JobSet kept changing under the patch")

    def planned(self) -> decide.Planned:
        """The TrainJob's plan, or why there is none (:mod:`kai_fn.plan_inputs`, as every command plans it)."""
        return kai_cluster.planned(self.session, self.settings, self.obj)

    def made_gang(self) -> dict[str, Any] | None:
        """The main PodGroup, read where it is the decision: the JobSet was named at admission. (Before Trainer has
        made the JobSet, the plan comes first: a gang made already is found by its create, 409, and adopted.)"""
        if not state.named_at_admission(self.jobset):
            return None
        flavor = self.settings.flavor
        return self.session.podgroup(state.podgroup_api(flavor), self.namespace, state.gang_name(self.obj, flavor))

    def live_jobset(self) -> dict[str, Any] | None:
        """The TrainJob's JobSet, or None while Trainer has not made it."""
        first, self.first = self.first, UNREAD
        jobset = first.jobset if first.jobset_read else self.session.jobset(self.namespace, self.name)
        if jobset is None or state.own_jobset(self.obj, jobset) is not None:
            return jobset
        fresh = self.session.trainjob(self.namespace, self.name)
        if fresh is None or fresh.get("metadata", {}).get("uid") != self.uid:
            raise Gone("the TrainJob was deleted or replaced")
        raise NotYet(decide.REPLACED)
