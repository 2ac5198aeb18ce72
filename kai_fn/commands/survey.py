"""What ``status``, ``release`` and ``explain`` read to place TrainJobs in :mod:`kai_fn.core.state`, at a bounded
cost, read-only.

For many TrainJobs (:func:`survey`), whatever their number:

1. one LIST of TrainJobs and one of JobSets (the namespace, or all);
2. one LIST of kai_fn's PodGroups of the flavor (label ``app.kubernetes.io/managed-by=kai-fn``);
3. one LIST of pods labelled ``jobset.sigs.k8s.io/jobset-name``, only when a released gang not yet marked
   ``kai-fn/bound`` needs its pods to say whether it is bound now;
4. one LIST of Events per namespace holding a TrainJob kai_fn still owes a release: kai_fn's Warnings on TrainJobs
   only (field selector), which tell ``blocked`` from ``held``.

For one TrainJob (:func:`reading_of`): its JobSet, its PodGroups (one LIST by its uid label), its JobSet's pods when needed, and
its refusals when needed (one LIST of Events by its uid). The heartbeat is read by the callers, only when something
is held longer than a resync period (:mod:`kai_fn.kube.lease`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kai_fn.core import keys, state
from kai_fn.core.objects import controlled_by, deleting, labels, meta
from kai_fn.core.reasons import Refusal, refusals
from kai_fn.core.models import InputError, Runtime, TrainJob, parse
from kai_fn.core.plan import Plan, plan
from kai_fn.core.runtime import RuntimeTarget, target
from kai_fn.core.state import Facts, Reading, podgroup_api
from kai_fn.kube import ApiSession
from kai_fn.settings import Settings

_WARNINGS = f"involvedObject.kind={keys.TRAINJOB_KIND},type=Warning,reportingComponent={keys.MANAGED_BY}"


def survey(session: ApiSession, settings: Settings, namespace: str | None) -> list[Reading]:
    """Every TrainJob in kai_fn's scope, in the namespace or all, read."""
    return [reading for _, reading in entries(session, settings, namespace)]


def entries(session: ApiSession, settings: Settings, namespace: str | None) -> list[tuple[dict[str, Any], Reading]]:
    """Every TrainJob in kai_fn's scope, as listed, with its reading."""
    trainjobs = [t for t in session.list_trainjobs(namespace) if not deleting(t)]
    podgroups = session.podgroups(podgroup_api(settings.flavor), namespace)
    joined = state.join(trainjobs, session.list_jobsets(namespace), podgroups)
    by_uid: dict[str, list[dict[str, Any]]] = {}
    for pg in podgroups:
        by_uid.setdefault(labels(pg).get(keys.TRAINJOB_UID_LABEL, ""), []).append(pg)
    pods = _pods(session, namespace) if any(_needs_pods(e.marks, e.podgroup) for e in joined) else []
    by_jobset: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pod in pods:
        by_jobset.setdefault((meta(pod).get("namespace", ""), labels(pod).get(keys.JOBSET_NAME_LABEL, "")),
                             []).append(pod)
    refused: dict[str, list[Refusal]] = {}
    for ns in sorted({e.key[0] for e in joined if e.marks.may_be_refused}):
        refused |= refusals(session.events(ns, _WARNINGS))
    runtimes: dict[RuntimeTarget, dict[str, Any] | None] = {}
    readings = []
    for entry in joined:
        uid = meta(entry.trainjob).get("uid", "")
        mine, theirs = by_uid.get(uid, []), refused.get(uid, [])
        if state.in_scope(entry.trainjob, entry.jobset, mine, theirs):
            planned = planned_gang(session, settings, entry.trainjob, entry.marks, runtimes)
            readings.append((entry.trainjob, state.read(entry.trainjob, entry.jobset, mine,
                                                        by_jobset.get(entry.key, []), theirs, planned)))
    return readings


def reading_of(session: ApiSession, settings: Settings, trainjob: dict[str, Any],
               pods: Sequence[dict[str, Any]] | None = None) -> tuple[Reading, list[dict[str, Any]]]:
    """One TrainJob, read as :func:`survey` reads it; and its PodGroups. ``pods``: its JobSet's, if already listed."""
    namespace, name, uid = (meta(trainjob).get(k, "") for k in ("namespace", "name", "uid"))
    jobset = jobset_of(session, trainjob)
    mine = (session.podgroups(podgroup_api(settings.flavor), namespace, f"{keys.TRAINJOB_UID_LABEL}={uid}")
            if uid else [])
    main = state.main_podgroup(state.facts(trainjob, jobset), mine)
    marks = state.facts(trainjob, jobset, main)
    if pods is None:
        pods = session.jobset_pods(namespace, name) if _needs_pods(marks, main) else []
    refused: list[Refusal] = []
    if marks.may_be_refused and uid:
        selector = f"involvedObject.uid={uid},type=Warning,reportingComponent={keys.MANAGED_BY}"
        refused = refusals(session.events(namespace, selector)).get(uid, [])
    planned = planned_gang(session, settings, trainjob, marks, {})
    return state.read(trainjob, jobset, mine, pods, refused, planned), mine


def planned_gang(session: ApiSession, settings: Settings, trainjob: dict[str, Any], marks: Facts,
                 runtimes: dict[RuntimeTarget, dict[str, Any] | None]) -> Plan | None:
    """What kai_fn would make of a TrainJob it has not decided yet, so that its gang is shown before it is made; None
    once decided or running, or when it cannot be planned. A GET of its runtime, once per runtime (``runtimes``: those
    read)."""
    if marks.decided or marks.running:
        return None
    try:
        job = parse(TrainJob, trainjob)
        where = target(job)
        if where not in runtimes:
            runtimes[where] = session.runtime(where)
        raw = runtimes[where]
        return None if raw is None else plan(job, parse(Runtime, raw), topologies={}, **settings.planning())
    except InputError:
        return None


def jobset_of(session: ApiSession, trainjob: dict[str, Any]) -> dict[str, Any] | None:
    meta = trainjob.get("metadata") or {}
    jobset = session.jobset(meta.get("namespace", ""), meta.get("name", ""))
    return jobset if jobset is not None and controlled_by(jobset, meta.get("uid")) else None


def _needs_pods(marks: Facts, podgroup: dict[str, Any] | None) -> bool:
    """Released with its gang and not marked bound: only its pods can say whether the gang is bound now."""
    return marks.podgroup is not None and marks.bound is None and marks.running and podgroup is not None


def _pods(session: ApiSession, namespace: str | None) -> list[dict[str, Any]]:
    """Every pod of a JobSet, in the namespace or all."""
    return session.pods(namespace, keys.JOBSET_NAME_LABEL)
