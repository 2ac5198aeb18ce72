"""The gang's status, told on the TrainJob: why it waits (``GangUnschedulable``), and when it is placed (``GangBound``).

PodGroup update events are only a trigger: what is reported is read fresh with kai_fn's own identity, so duplicates,
updates that arrive out of order and forged bodies cannot report a state that is not the PodGroup's now. One
exception spares the reads where they would only find what this process saw moments ago (:func:`known`): from an
authenticated sender, the body of the main PodGroup of a gang this process made and saw named stands for the
PodGroup, and the TrainJob and JobSet are taken as its pass and the JobSet's add saw them; the pods are still listed
now, and a body carrying KAI's reasons is read again, so such a look can tell ``GangBound``, never
``GangUnschedulable``. A gang whose
main PodGroup is marked ``kai-fn/bound`` is never reported on again (the mark is on kai_fn's own PodGroup, so it costs
Trainer no reconcile);
an unschedulable report needs the PodGroup, read now, to carry KAI's reasons and no pod of the gang to be on a node
(KAI writes reasons only while nothing is allocated). Event names come from their content, so the same report made
twice is one Event. The resync looks at released gangs too, because binding itself changes no PodGroup. With
workers (``KAI_FN_BACKGROUND_WORKERS``) a PodGroup event is only checked in the request thread (:func:`precheck`, no
read) and the look is its TrainJob's work in the queue (:mod:`kai_fn.function.keywork`); a gang seen waiting says
when its schedule timeout is due (``Outcome.due``), which sets its TrainJob's timer.
"""
from __future__ import annotations

import datetime
from dataclasses import replace
from collections.abc import Callable
from typing import Any

from kai_fn.core import adopt, gang, keys, objects
from kai_fn.core.plan import Plan
from kai_fn.core.schedule_timeout import waiting
from kai_fn.core.state import (Entry, Phase, facts, gang_name, gang_names, judged, named_at_admission, own_jobset,
                               read, reserving)
from kai_fn.function import gang_plan, metrics, report, reserve
from kai_fn.kube import Gone, Transient
from kai_fn.function.cluster import CachedSession
from kai_fn.function.events import PodGroupEvent
from kai_fn.function.inventory import creation_order
from kai_fn.function.isolate import tally_of
from kai_fn.function.optin import OptIn, refusal
from kai_fn.function.recent import Named
from kai_fn.function.report import Outcome
from kai_fn.settings import Settings
from kai_fn.kube.events import event_body


def observe(event: PodGroupEvent, session: CachedSession, settings: Settings, optin: OptIn) -> Outcome:
    """One PodGroup update: a PodGroup GET, then at most a TrainJob GET, a pod list and an Event (plus the bound
    mark). The event only says which PodGroup to look at: what is reported comes from the PodGroup as the API server
    returns it to kai_fn, so a forged or stale body can skip a look but never make a report."""
    return precheck(event, session, settings, optin) or look(event, session, settings)


def precheck(event: PodGroupEvent, session: CachedSession, settings: Settings, optin: OptIn) -> Outcome | None:
    """The answer the event gives without a read of the PodGroup (the opted-in namespaces' LIST at most, cached), or
    None when its gang is worth a look. The body may skip a look (KAI has said nothing yet,
    :func:`kai_fn.core.gang.nothing_to_tell`); it never makes a report: a later write of the PodGroup is an event
    of its own, and the resync looks at every released gang."""
    hint = event.object
    ns, pg_name = event.namespace, event.name
    if not settings.watches(ns):
        return Outcome("ignored", "namespace not in KAI_FN_NAMESPACES", ns, pg_name, event.uid)
    if objects.labels(hint).get(keys.MANAGED_BY_LABEL) != keys.MANAGED_BY:
        return Outcome("ignored", "not a PodGroup kai_fn made", ns, pg_name, event.uid)
    if session.server.recent.is_bound(event.uid):
        return Outcome("skipped", "already bound", ns, pg_name, event.uid, pg_name)
    if not optin.opted_in(session, ns):
        return Outcome("ignored", refusal(ns), ns, pg_name, event.uid)
    if event.type.endswith(".add") and not hint.get("status"):
        # Made a moment ago (by kai_fn's pass): no pod of it can exist yet. The scheduler's status writes that
        # follow come as updates; the resync looks at every released gang in any case.
        return Outcome("skipped", "just made: no status from the scheduler yet", ns, pg_name, event.uid, pg_name)
    if settings.flavor == "kai" and gang.nothing_to_tell(hint):
        return Outcome("skipped", "KAI placed none of its pods and gives no reason yet", ns, pg_name, event.uid,
                       pg_name)
    return None


def trainjob_key(event: PodGroupEvent) -> tuple[str, str] | None:
    """The key of the TrainJob the event's PodGroup names (kai_fn's label on it), for the work queue: a hint, as the
    body is; :func:`look` reads the owner from the PodGroup itself and holds that TrainJob."""
    name = objects.labels(event.object).get(keys.TRAINJOB_NAME_LABEL)
    return (event.namespace, name) if isinstance(name, str) and name else None


def look(event: PodGroupEvent, session: CachedSession, settings: Settings) -> Outcome:
    """The look at the gang, once :func:`precheck` let the event through: the PodGroup read now (or as
    :func:`known` lets the event stand for it), its TrainJob held."""
    ns, pg_name = event.namespace, event.name
    seen = known(event, session, settings)
    podgroup = event.object if seen is not None else session.podgroup(
        event.object.get("apiVersion") or keys.KAI_PODGROUP_API, ns, pg_name)
    if podgroup is None:
        return Outcome("ignored", "the PodGroup no longer exists", ns, pg_name, event.uid)
    owner = owning_trainjob(podgroup)
    if objects.labels(podgroup).get(keys.MANAGED_BY_LABEL) != keys.MANAGED_BY or owner is None:
        return Outcome("ignored", "not a PodGroup kai_fn made for a TrainJob", ns, pg_name, event.uid)
    with session.server.locks.hold((ns, owner["name"])):  # after any pass of its TrainJob under way
        return _report(event, session, settings, podgroup, owner, seen)


def known(event: PodGroupEvent, session: CachedSession, settings: Settings) -> Named | None:
    """The TrainJob and JobSet this process keeps for the event's gang (:meth:`kai_fn.function.recent.Recent.named`:
    its pass made the gang and the JobSet's add showed it as planned), when the event's body may stand for the
    PodGroup read now: delivered by an authenticated sender (``KAI_FN_AUDIENCE``), whole (resource mode), the main
    PodGroup kai_fn made for that very TrainJob (its uid), holding no places (a reservation's hand-over reads) and
    giving no reasons (an unschedulable report needs the PodGroup read now). The look then lists the pods and reads
    nothing else: three calls fewer (the PodGroup, the TrainJob, the JobSet). Otherwise None, and the look reads
    them."""
    if not settings.audience or event.mode != "resource":
        return None
    podgroup = event.object
    owner = owning_trainjob(podgroup)
    if (owner is None or reserving(podgroup) or gang.unschedulable(podgroup)  # kai_fn's label: checked by precheck
            or (seen := session.server.recent.known(owner.get("uid"))) is None):
        return None
    trainjob = seen[0]
    if (objects.meta(trainjob).get("namespace"), objects.meta(trainjob).get("name")) != (event.namespace,
                                                                                        owner.get("name")):
        return None
    return seen if event.name == gang_name(trainjob, settings.flavor) else None


def _report(event: PodGroupEvent, session: CachedSession, settings: Settings, podgroup: dict[str, Any],
            owner: dict[str, Any], seen: Named | None = None) -> Outcome:
    """The look at a gang whose PodGroup kai_fn made, holding its TrainJob (:mod:`kai_fn.function.keylocks`);
    ``seen``: its TrainJob and JobSet as :func:`known` keeps them, else read now."""
    ns, pg_name, recent = event.namespace, event.name, session.server.recent
    pg_uid, tj_uid = objects.meta(podgroup).get("uid"), owner.get("uid")
    if reserving(podgroup):
        handed = hand_over(session, podgroup, owner)
        if handed is not None:
            return handed
    if keys.GANG_BOUND_ANNOTATION in objects.notes(podgroup):
        recent.bound(pg_uid, tj_uid)
        return Outcome("skipped", "already bound", ns, owner["name"], owner.get("uid"), pg_name, bound=True,
                       phase=Phase.BOUND)  # the mark is the model's bound (kai_fn/core/state.py)
    trainjob = seen[0] if seen is not None else session.trainjob(ns, owner["name"])
    if trainjob is None or trainjob.get("metadata", {}).get("uid") != owner.get("uid"):
        return Outcome("ignored", "its TrainJob no longer exists", ns, owner["name"], owner.get("uid"), pg_name)
    jobset = own_jobset(trainjob, seen[1] if seen is not None else session.jobset(ns, owner["name"]))
    made = made_gang(session, trainjob, jobset, podgroup)
    marks = facts(trainjob, jobset, made)
    gangs = [g for g in (made, podgroup) if g is not None]
    if why := marks.settled(pg_name):
        if marks.bound is not None:
            recent.bound(pg_uid, tj_uid)
        return Outcome("skipped", why, ns, owner["name"], owner.get("uid"), pg_name,
                       phase=read(trainjob, jobset, gangs, []).phase)
    outcome = report_on(session, settings, trainjob, podgroup, marks.podgroup or "",
                        lambda pods: read(trainjob, jobset, gangs, pods).phase)
    if outcome.bound:
        recent.bound(pg_uid, tj_uid)
        return outcome
    wait = waiting(trainjob, marks, made if made is not None else podgroup) if settings.flavor == "kai" else None
    return outcome if wait is None else replace(outcome, due=wait.deadline)


def hand_over(session: CachedSession, podgroup: dict[str, Any], owner: dict[str, Any]) -> Outcome | None:
    """KAI's controllers rewrite the gang's status when a pod joins it: the moment JobSet makes the launcher, its
    placeholder goes (kai_fn/function/reserve.py). An Outcome when that was this event's work, else None (the gang's
    status is looked at as for any other)."""
    ns, name, uid = str(objects.meta(podgroup).get("namespace") or ""), owner["name"], owner.get("uid")
    pg_name = str(objects.meta(podgroup).get("name") or "")  # a PodGroup read from the API server has both
    trainjob = session.trainjob(ns, name)
    if trainjob is None or objects.meta(trainjob).get("uid") != uid:
        return Outcome("ignored", "its TrainJob no longer exists", ns, name, uid, pg_name)
    jobset = own_jobset(trainjob, session.jobset(ns, name))
    if jobset is None:
        return None
    marks = facts(trainjob, jobset, podgroup)
    if marks.podgroup != pg_name:
        return None
    done, changed = reserve.settle(session, trainjob, jobset, pg_name, None, unmarked=True, reserves=marks.reserves)
    return Outcome("done", done, ns, name, uid, pg_name) if changed else None


def made_gang(session: CachedSession, trainjob: dict[str, Any], jobset: dict[str, Any] | None,
              podgroup: dict[str, Any]) -> dict[str, Any] | None:
    """The main PodGroup, where it is the decision (a JobSet named at admission, or not made yet): this one, or read
    (this one is a stage's: KAI's flavor, whose main PodGroup is ``pg-<name>-<uid>``)."""
    if jobset is not None and not named_at_admission(jobset):
        return None
    if objects.meta(podgroup).get("name") in gang_names(trainjob):
        return podgroup
    return session.podgroup(podgroup.get("apiVersion") or keys.KAI_PODGROUP_API,
                            objects.meta(trainjob).get("namespace", ""), gang_names(trainjob)[0])


def owning_trainjob(podgroup: dict[str, Any]) -> dict[str, Any] | None:
    for ref in (podgroup.get("metadata") or {}).get("ownerReferences") or []:
        if (isinstance(ref, dict) and ref.get("kind") == keys.TRAINJOB_KIND and ref.get("apiVersion") == keys.TRAINER_API
                and isinstance(ref.get("name"), str) and ref.get("controller")):
            return ref
    return None


def report_on(session: CachedSession, settings: Settings, trainjob: dict[str, Any], podgroup: dict[str, Any],
              main_name: str, phase: Callable[[list[dict[str, Any]]], str | None] | None = None) -> Outcome:
    """Bound (:func:`kai_fn.core.state.judged`: the plan's minMember pods of the gang's own Jobs on nodes): GangBound
    once, then the mark on the main PodGroup. Nothing on a node and KAI gives reasons: GangUnschedulable. Another
    stage's PodGroup (initializers, MPI's launcher) gets reasons only: GangBound is the main gang's. ``podgroup`` is
    as the API server returned it to kai_fn (a GET or the resync's LIST). ``phase``: where the TrainJob stands
    given its pods (:func:`kai_fn.core.state.read`), for the look's log line."""
    pods = session.jobset_pods(trainjob["metadata"]["namespace"], trainjob["metadata"]["name"])
    outcome = _reported(session, settings, trainjob, podgroup, main_name, pods)
    if phase is None:
        return outcome
    return replace(outcome, phase=Phase.BOUND if outcome.bound else phase(pods))  # bound: the mark it just wrote


def _reported(session: CachedSession, settings: Settings, trainjob: dict[str, Any], podgroup: dict[str, Any],
              main_name: str, pods: list[dict[str, Any]]) -> Outcome:
    meta = trainjob["metadata"]
    ns, name, uid = meta["namespace"], meta["name"], meta.get("uid")
    pg_name = podgroup["metadata"]["name"]
    main = main_name == pg_name
    planned = gang_plan.of(session, settings, trainjob)
    if planned is not None:
        warn_if_edited(session, trainjob, podgroup, planned)
    counted = judged(planned, podgroup, pods)
    if counted.bound and not main:
        return Outcome("skipped", f"stage bound ({counted.summary()}); GangBound waits for the main gang",
                       ns, name, uid, pg_name)
    if counted.bound:
        message = f"PodGroup {pg_name}: every pod of the gang is on a node ({counted.summary()})"
        body = event_body(trainjob, report.GANG_BOUND, message, warning=False, key=pg_name)
        if not session.create_event(ns, body):
            raise Transient("GangBound could not be posted; the mark waits for it")
        stamp = objects.stamp(datetime.datetime.now(datetime.UTC))
        try:
            session.patch_podgroup(podgroup["apiVersion"], ns, pg_name,
                                   {"metadata": {"annotations": {keys.GANG_BOUND_ANNOTATION: stamp}}})
        except Gone:
            return Outcome("ignored", "the PodGroup was deleted meanwhile", ns, name, uid, pg_name)
        metrics.GANG_STATUS.labels(report.GANG_BOUND).inc()
        if (created := objects.parse_time(objects.meta(trainjob).get("creationTimestamp"))) is not None:
            metrics.GANG_BOUND_SECONDS.observe(max((datetime.datetime.now(datetime.UTC) - created).total_seconds(), 0))
        return Outcome("done", f"{report.GANG_BOUND}: {message}", ns, name, uid, pg_name, bound=True)
    waiting = f"waiting: {counted.summary()}" + ("" if planned else " (no plan now: is its runtime gone?)")
    reasons = gang.unschedulable(podgroup)
    if counted.any_bound or not reasons:
        return Outcome("skipped", waiting, ns, name, uid, pg_name)
    text = gang.describe(reasons)
    message = f"PodGroup {pg_name}: {text}"
    body = event_body(trainjob, report.GANG_UNSCHEDULABLE, message, warning=True, key=f"{pg_name}|{text}")
    if not session.create_event(ns, body):
        raise Transient("GangUnschedulable could not be posted")  # the report is this delivery's whole work
    metrics.GANG_STATUS.labels(report.GANG_UNSCHEDULABLE).inc()
    return Outcome("blocked", f"{report.GANG_UNSCHEDULABLE}: {message}", ns, name, uid, pg_name)


def warn_if_edited(session: CachedSession, trainjob: dict[str, Any], podgroup: dict[str, Any], planned: Plan) -> None:
    """A Warning ``PodGroupEdited`` when the gang's shape on its PodGroup is no longer the plan's, and nothing put
    back (docs/how-it-decides.md, "Bound"): only writers the admission policy trusts get an edit through, on
    purpose; and "bound" never reads the spec. The same edit is one Event, however often it is seen."""
    pg_name = podgroup["metadata"]["name"]
    mine = next((p for p in planned.podgroups if p["metadata"]["name"] == pg_name), None)
    if mine is None or not (edits := adopt.gang_edits(podgroup, mine)):
        return
    message = (f"PodGroup {pg_name}: {'; '.join(edits)}. KAI schedules the gang as its PodGroup says; kai_fn "
               "still calls it bound only when its plan's pods are on nodes")
    if session.create_event(objects.meta(trainjob).get("namespace", ""), event_body(
            trainjob, report.PODGROUP_EDITED, message, warning=True, key=f"{pg_name}|{'; '.join(edits)}")):
        metrics.GANG_STATUS.labels(report.PODGROUP_EDITED).inc()


def sweep(session: CachedSession, settings: Settings, entries: list[Entry]) -> dict[str, int]:
    """The resync's pass over released gangs not known to be bound: a pod list each (and an Event, a mark),
    KAI_FN_RESYNC_LIMIT in turn."""
    tally: dict[str, int] = {}
    waiting = [e for e in entries if e.podgroup is not None and e.marks.settled() is None]
    for entry in session.server.take_turn("sweep", waiting, settings.resync_limit, creation_order):
        with session.server.locks.hold(entry.key):
            result = tally_of("sweep", session, entry.trainjob, lambda: report_on(
                session, settings, entry.trainjob, entry.podgroup or {}, entry.marks.podgroup or "").result)
        tally[result] = tally.get(result, 0) + 1
    return tally
