"""What ``status``, ``release`` and ``explain`` read to place TrainJobs in :mod:`kai_fn.commands.state`, at a bounded
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

from kubernetes.client.exceptions import ApiException

from kai_fn.commands import state
from kai_fn.core import keys, triage
from kai_fn.function import inventory
from kai_fn.kube import Session, Transient

_WARNINGS = f"involvedObject.kind={keys.TRAINJOB_KIND},type=Warning,reportingComponent={keys.MANAGED_BY}"


podgroup_api = inventory.podgroup_api


def survey(session: Session, flavor: str, namespace: str | None) -> list[state.Reading]:
    """Every TrainJob in kai_fn's scope, in the namespace or all, read."""
    return [reading for _, reading in entries(session, flavor, namespace)]


def entries(session: Session, flavor: str, namespace: str | None) -> list[tuple[dict[str, Any], state.Reading]]:
    """Every TrainJob in kai_fn's scope, as listed, with its reading."""
    trainjobs = [t for t in session.list_trainjobs(namespace) if not triage.deleting(t)]
    podgroups = session.podgroups(podgroup_api(flavor), namespace)
    joined = inventory.join(trainjobs, session.list_jobsets(namespace), podgroups)
    by_uid: dict[str, list[dict[str, Any]]] = {}
    for pg in podgroups:
        by_uid.setdefault(triage.labels(pg).get(keys.TRAINJOB_UID_LABEL, ""), []).append(pg)
    pods = _pods(session, namespace) if any(_needs_pods(e.marks, e.podgroup) for e in joined) else []
    by_jobset: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        by_jobset.setdefault((meta.get("namespace", ""), (meta.get("labels") or {}).get(keys.JOBSET_NAME_LABEL, "")),
                             []).append(pod)
    owed = sorted({e.key[0] for e in joined if state.may_be_refused(e.trainjob, e.jobset)})
    refused: dict[str, list[state.Refusal]] = {}
    for ns in owed:
        refused |= state.refusals(_warnings(session, ns, _WARNINGS))
    readings = []
    for entry in joined:
        uid = triage.meta(entry.trainjob).get("uid", "")
        mine, theirs = by_uid.get(uid, []), refused.get(uid, [])
        if state.in_scope(entry.trainjob, entry.jobset, mine, theirs):
            readings.append((entry.trainjob, state.read(entry.trainjob, entry.jobset, mine,
                                                        by_jobset.get(entry.key, []), theirs)))
    return readings


def reading_of(session: Session, flavor: str, trainjob: dict[str, Any], pods: Sequence[dict[str, Any]] | None = None
               ) -> tuple[state.Reading, list[dict[str, Any]]]:
    """One TrainJob, read as :func:`survey` reads it; and its PodGroups. ``pods``: its JobSet's, if already listed."""
    meta = trainjob.get("metadata") or {}
    namespace, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
    jobset = jobset_of(session, trainjob)
    mine = session.podgroups(podgroup_api(flavor), namespace, f"{keys.TRAINJOB_UID_LABEL}={uid}") if uid else []
    marks = triage.marks(trainjob, jobset)
    main = next((p for p in mine if triage.meta(p).get("name") == marks.podgroup), None)
    if pods is None:
        pods = session.jobset_pods(namespace, name) if _needs_pods(triage.marks(trainjob, jobset, main), main) else []
    refused: list[state.Refusal] = []
    if state.may_be_refused(trainjob, jobset) and uid:
        selector = f"involvedObject.uid={uid},type=Warning,reportingComponent={keys.MANAGED_BY}"
        refused = state.refusals(_warnings(session, namespace, selector)).get(uid, [])
    return state.read(trainjob, jobset, mine, pods, refused), mine


def jobset_of(session: Session, trainjob: dict[str, Any]) -> dict[str, Any] | None:
    meta = trainjob.get("metadata") or {}
    jobset = session.jobset(meta.get("namespace", ""), meta.get("name", ""))
    return jobset if jobset is not None and triage.controlled_by(jobset, meta.get("uid")) else None


def _needs_pods(marks: triage.Marks, podgroup: dict[str, Any] | None) -> bool:
    """Released with its gang and not marked bound: only its pods can say whether the gang is bound now."""
    return marks.podgroup is not None and marks.bound is None and marks.running and podgroup is not None


def _pods(session: Session, namespace: str | None) -> list[dict[str, Any]]:
    query = [("labelSelector", keys.JOBSET_NAME_LABEL)]
    if namespace is None:
        return _list(session, "/api/v1/pods", query)
    return _list(session, "/api/v1/namespaces/{namespace}/pods", query, namespace=namespace)


def _warnings(session: Session, namespace: str, selector: str) -> list[dict[str, Any]]:
    return _list(session, "/api/v1/namespaces/{namespace}/events", [("fieldSelector", selector)], namespace=namespace)


def _list(session: Session, path: str, query: list[tuple[str, str]], **where: str) -> list[dict[str, Any]]:
    try:
        found = session.request("GET", path, query=query, **where)
    except ApiException as error:
        raise Transient(f"API {error.status} on list {path.rsplit('/', 1)[-1]}") from None
    return list((found or {}).get("items") or [])
