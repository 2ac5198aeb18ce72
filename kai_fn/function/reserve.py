"""The placeholders' lifecycle (kai_fn/core/reserve.py says what they are): made with the gang, before its JobSet is
released; deleted the moment JobSet has made the pods they hold places for, and whenever the JobSet is suspended or
finished; made again when it runs again without those pods (a resume, a restart). Owned by the TrainJob, so they go
with it.

Two sources bring the moment a launcher pod appears: the PodGroup source (KAI's podgroupcontroller rewrites the
gang's ``status.resourcesStatus`` when a pod joins it) and the TrainJob source (Trainer copies the JobSet's
``replicatedJobsStatus``); the resync offers every TrainJob whose places are still held as a backstop. A TrainJob
with a reservation is never remembered as decided (kai_fn/function/recent.py), so its events keep coming here.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from typing import Any

from kai_fn.core import adopt, keys, objects, reserve, state
from kai_fn.function import gang_plan, metrics
from kai_fn.kube import Gone, Transient
from kai_fn.function.cluster import CachedSession
from kai_fn.settings import Settings

Planned = Callable[[], Sequence[dict[str, Any]]]  # the placeholders the plan makes (a runtime read: only when needed)


@dataclass(frozen=True)
class Made:
    """The placeholders made: how many were created, or the pod of a placeholder's name that is not kai_fn's (none
    made after it: the pass refuses the gang)."""

    created: int = 0
    foreign: adopt.Foreign | None = None


def make(session: CachedSession, bodies: Sequence[dict[str, Any]]) -> Made:
    """Create each placeholder (idempotent: one kai_fn made for the TrainJob is kept). One of that name being deleted
    (an earlier TrainJob's of the same name) is waited for; any other that is not what kai_fn plans is never taken as
    the placeholder (:attr:`Made.foreign`)."""
    created = 0
    for body in bodies:
        if session.create_pod(body) is not None:
            created += 1
            continue
        meta = body["metadata"]
        live = session.pod(meta["namespace"], meta["name"])
        if live is None or (objects.deleting(live) and not adopt.owned_by(live, meta["ownerReferences"][0]["uid"])):
            raise Transient(f"pod {meta['namespace']}/{meta['name']} is going away; its place is made again later")
        if (taken := adopt.foreign(live, body)) is not None:
            metrics.REFUSED_ADOPTIONS.labels("pod").inc()
            return Made(created, taken)
    if created:
        metrics.PLACEHOLDERS.labels("created").inc(created)
    return Made(created)


def planned(session: CachedSession, settings: Settings, trainjob: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The placeholders of the TrainJob's plan, to make them again (a resume, a restart of its JobSet)."""
    found = gang_plan.of(session, settings, trainjob)
    return found.placeholders if found is not None else ()


@dataclass(frozen=True)
class Settled:
    done: str  # in words
    changed: bool  # a placeholder made or deleted, or the gang marked
    foreign: adopt.Foreign | None = None  # a pod of a placeholder's name that is not kai_fn's: nothing else done


def settle(session: CachedSession, trainjob: dict[str, Any], jobset: dict[str, Any] | None, podgroup: str,
           planned: None, pods: list[dict[str, Any]] | None = None, *, unmarked: bool = False,
           reserves: str | None = None) -> tuple[str, bool]:
    """The places handed over or let go, none made (``planned`` None: the TrainJob's pass makes them,
    :func:`places`): what was done, in words, and whether anything was."""
    settled = places(session, trainjob, jobset, podgroup, planned, pods, unmarked=unmarked, reserves=reserves)
    return settled.done, settled.changed


def places(session: CachedSession, trainjob: dict[str, Any], jobset: dict[str, Any] | None, podgroup: str,
           planned: Planned | None, pods: list[dict[str, Any]] | None = None, *,
           unmarked: bool = False, reserves: str | None = None) -> Settled:
    """Bring the TrainJob's placeholders to what :func:`kai_fn.core.reserve.step` wants.
    ``planned`` None: make none (the PodGroup source only hands places over; the TrainJob's pass makes them).
    ``unmarked``: the gang is known to lack ``kai-fn/reservation-ended``: mark it even if another delivery deleted
    the placeholders (and then stopped), so that the gang's later events cost nothing.
    ``reserves``: the places held, as the state read them (the decision on a held JobSet, the main PodGroup of one
    named at admission); None: the JobSet's decision."""
    meta = objects.meta(trainjob)
    ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
    marks = state.facts(trainjob, jobset)
    reserves_by_job = reserve.parse_reserves(reserves if reserves is not None else marks.reserves)
    running = marks.running and not marks.deleting and not objects.deleting(jobset)

    def now_step(listed: list[dict[str, Any]] | None) -> tuple[reserve.Step, list[dict[str, Any]]]:
        held = [p for p in session.placeholders(ns, uid) if adopt.owned_by(p, uid)]
        found = listed if listed is not None else (session.jobset_pods(ns, name) if running else [])
        return reserve.step(trainjob=name, reserves=reserves_by_job, running=running, finished=reserve.finished(jobset),
                            pods=found, held=held), held

    step, held = now_step(pods)
    done = []
    if step.create and planned is not None:
        wanted = [b for b in planned() if b["metadata"]["name"] in step.create]
        try:
            made = make(session, wanted)
        except Gone as missing:  # its namespace is being deleted
            return Settled(f"no place to hold: {missing}", False)
        if made.foreign is not None:
            return Settled(str(made.foreign), bool(made.created), made.foreign)
        if made.created:
            done.append(f"{made.created} placeholder(s) made")
        # JobSet may have made the pods meanwhile: look again, so a placeholder never outlives its use.
        step, held = now_step(None)
    if step.delete:
        uids = {objects.meta(p).get("name"): objects.meta(p).get("uid") for p in held}
        gone = sum(1 for n in step.delete if session.delete_pod(ns, n, uids.get(n)))
        metrics.PLACEHOLDERS.labels("handed_over" if step.handed_over else "deleted").inc(len(step.delete))
        done.append(f"{gone} placeholder(s) deleted")
    if (step.delete or unmarked) and (step.handed_over or step.finished) and _mark_ended(session, ns, podgroup, step):
        done.append("the gang marked")
    return Settled(f"{step.why}{': ' + ', '.join(done) if done else ''}", bool(done))


def _mark_ended(session: CachedSession, namespace: str, podgroup: str, step: reserve.Step) -> bool:
    """``kai-fn/reservation-ended`` on the gang; False when it is gone."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    ended = f"{stamp} {'handed-over' if step.handed_over else 'finished'}"
    try:
        session.patch_podgroup(keys.KAI_PODGROUP_API, namespace, podgroup,
                               {"metadata": {"annotations": {keys.RESERVATION_ENDED_ANNOTATION: ended}}})
    except Gone:
        return False
    return True
