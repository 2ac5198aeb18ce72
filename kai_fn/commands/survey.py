"""What ``status``, ``release`` and ``explain`` read to place TrainJobs in :mod:`kai_fn.core.state`, at a bounded
cost, read-only.

For many TrainJobs (:func:`survey`), whatever their number:

1. one LIST of TrainJobs and one of JobSets (the namespace, or all);
2. one LIST of kai_fn's PodGroups of the flavor (label ``app.kubernetes.io/managed-by=kai-fn``);
3. one LIST of pods labelled ``jobset.sigs.k8s.io/jobset-name``, only when a released gang not yet marked
   ``kai-fn/bound`` needs its pods to say whether it is bound now;
4. a GET of each runtime a TrainJob kai_fn has not decided names, and of the Topologies, KAI's defaults ConfigMap and
   PriorityClasses its plan reads (each once: :class:`kai_fn.plan_inputs.Remembered`), and one LIST of KAI's Queues when
   such a gang's queue is checked first: kai_fn's own decision, made again on the live objects
   (:mod:`kai_fn.commands.verdicts`), tells ``blocked`` from ``held``. Never an Event: any tenant may post one.

For one TrainJob (:func:`reading_of`): its JobSet, its PodGroups (one LIST by its uid label), its JobSet's pods when needed, and
its plan's inputs and the Queues when it is undecided. The heartbeat is read by the callers, only when something
is held longer than a resync period (:mod:`kai_fn.kube.lease`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kai_fn import plan_inputs
from kai_fn.commands import verdicts
from kai_fn.core import decide, keys, state
from kai_fn.core.objects import deleting, labels, meta
from kai_fn.core.plan import Plan
from kai_fn.core.reasons import Refusal
from kai_fn.core.state import Facts, Reading, podgroup_api
from kai_fn.kube import ApiSession
from kai_fn.settings import Settings

def survey(session: ApiSession, settings: Settings, namespace: str | None) -> list[Reading]:
    """Every TrainJob in kai_fn's scope, in the namespace or all, read."""
    return [reading for _, reading in entries(session, settings, namespace)]


def entries(session: ApiSession, settings: Settings, namespace: str | None) -> list[tuple[dict[str, Any], Reading]]:
    """Every TrainJob in kai_fn's scope, as listed, with its reading."""
    trainjobs = [t for t in session.list_trainjobs(namespace) if not deleting(t)]
    podgroups = session.podgroups(podgroup_api(settings.flavor), namespace)
    joined = state.join(trainjobs, session.list_jobsets(namespace), podgroups)
    pods = _pods(session, namespace) if any(state.needs_pods(e.marks, e.podgroup) for e in joined) else []
    by_jobset: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pod in pods:
        by_jobset.setdefault((meta(pod).get("namespace", ""), labels(pod).get(keys.JOBSET_NAME_LABEL, "")),
                             []).append(pod)
    reader = plan_inputs.Remembered(session)
    queues = verdicts.ListedOnce(session)
    readings = []
    for entry in joined:
        mine = list(entry.mine)
        if state.in_scope(entry.trainjob, entry.jobset, mine):
            found = _undecided(reader, settings, entry.trainjob, entry.marks)
            refused = _refused(settings, entry.marks, entry.trainjob, entry.jobset, found, queues)
            planned = _plan(found) or _judged_by(reader, settings, entry.trainjob, entry.marks, entry.podgroup)
            readings.append((entry.trainjob, state.read(entry.trainjob, entry.jobset, mine,
                                                        by_jobset.get(entry.key, []), refused, planned)))
    return readings


def reading_of(session: ApiSession, settings: Settings, trainjob: dict[str, Any],
               pods: Sequence[dict[str, Any]] | None = None) -> tuple[Reading, list[dict[str, Any]]]:
    """One TrainJob, read as :func:`survey` reads it; and its PodGroups. ``pods``: its JobSet's, if already listed."""
    namespace, name, uid = (meta(trainjob).get(k, "") for k in ("namespace", "name", "uid"))
    jobset = jobset_of(session, trainjob)
    mine = (session.podgroups(podgroup_api(settings.flavor), namespace, f"{keys.TRAINJOB_UID_LABEL}={uid}")
            if uid else [])
    main = state.main_of(trainjob, jobset, mine)
    marks = state.facts(trainjob, jobset, main)
    if pods is None:
        pods = session.jobset_pods(namespace, name) if state.needs_pods(marks, main) else []
    reader = plan_inputs.Remembered(session)
    found = _undecided(reader, settings, trainjob, marks)
    refused = _refused(settings, marks, trainjob, jobset, found, verdicts.ListedOnce(session))
    planned = _plan(found) or _judged_by(reader, settings, trainjob, marks, main)
    return state.read(trainjob, jobset, mine, pods, refused, planned), mine


def _undecided(reader: plan_inputs.Reader, settings: Settings, trainjob: dict[str, Any],
               marks: Facts) -> decide.Planned | None:
    """The plan (or why there is none) of a TrainJob kai_fn has yet to decide; None once decided, or running with no
    gang to come (a JobSet named at admission runs while its pods wait for their gang)."""
    if marks.decided or (marks.running and not marks.named):
        return None
    return plan_inputs.planned(reader, settings, trainjob)


def _plan(found: decide.Planned | None) -> Plan | None:
    return found if isinstance(found, Plan) else None


def _judged_by(reader: plan_inputs.Reader, settings: Settings, trainjob: dict[str, Any], marks: Facts,
               podgroup: dict[str, Any] | None) -> Plan | None:
    """The plan a released gang's pods are counted against (:func:`kai_fn.core.state.judged`), when they are."""
    return _plan(plan_inputs.planned(reader, settings, trainjob)) if state.needs_pods(marks, podgroup) else None


def _refused(settings: Settings, marks: Facts, trainjob: dict[str, Any], jobset: dict[str, Any] | None,
             found: decide.Planned | None, queues: verdicts.ListedOnce) -> list[Refusal]:
    """kai_fn's refusal of a TrainJob it still owes a release, as its pass would decide it now."""
    if found is None or not marks.may_be_refused:
        return []
    refused = verdicts.refusal(settings, marks, trainjob, jobset, found, queues)
    return [refused] if refused is not None else []


def jobset_of(session: ApiSession, trainjob: dict[str, Any]) -> dict[str, Any] | None:
    where = meta(trainjob)
    return state.own_jobset(trainjob, session.jobset(where.get("namespace", ""), where.get("name", "")))


def _pods(session: ApiSession, namespace: str | None) -> list[dict[str, Any]]:
    """Every pod of a JobSet, in the namespace or all."""
    return session.pods(namespace, keys.JOBSET_NAME_LABEL)
