"""The resync's view of the cluster: TrainJobs joined with the JobSets they control and kai_fn's main PodGroups.

Three LISTs, whatever the number of TrainJobs: the gate's state lives on the JobSet and the gang's on its PodGroup
(:mod:`kai_fn.core.triage`), so no per-TrainJob read is needed to know what is owed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kai_fn.core import keys, triage, turns
from kai_fn.function.cluster import Session
from kai_fn.settings import Settings


@dataclass(frozen=True)
class Entry:
    trainjob: dict[str, Any]
    jobset: dict[str, Any] | None
    podgroup: dict[str, Any] | None  # the main gang's, when kai_fn made it
    marks: triage.Marks

    @property
    def key(self) -> tuple[str, str]:
        meta = triage.meta(self.trainjob)
        return meta.get("namespace", ""), meta.get("name", "")


def creation_order(entry: Entry) -> str:
    """The resync's turns go by the TrainJob's creation (:mod:`kai_fn.core.turns`)."""
    return turns.order(entry.trainjob)


def podgroup_api(flavor: str) -> str:
    return keys.SP_PODGROUP_API if flavor == "scheduler-plugins" else keys.KAI_PODGROUP_API


def join(trainjobs: list[dict[str, Any]], jobsets: list[dict[str, Any]], podgroups: list[dict[str, Any]]
         ) -> list[Entry]:
    """Each TrainJob with the JobSet it controls (same name) and the PodGroup its decision names (same uid)."""
    sets = {(triage.meta(j).get("namespace"), triage.meta(j).get("name")): j for j in jobsets}
    groups = {(triage.meta(p).get("namespace"), triage.meta(p).get("name")): p for p in podgroups}
    entries = []
    for trainjob in trainjobs:
        meta = triage.meta(trainjob)
        where, uid = meta.get("namespace"), meta.get("uid")
        jobset = sets.get((where, meta.get("name")))
        if jobset is not None and not triage.controlled_by(jobset, uid):
            jobset = None
        marks = triage.marks(trainjob, jobset)
        podgroup = groups.get((where, marks.podgroup)) if marks.podgroup else None
        if podgroup is not None and triage.labels(podgroup).get(keys.TRAINJOB_UID_LABEL) != uid:
            podgroup = None
        if podgroup is not None:
            marks = triage.marks(trainjob, jobset, podgroup)
        entries.append(Entry(trainjob, jobset, podgroup, marks))
    return entries


def take(session: Session, settings: Settings, namespace: str | None = None) -> list[Entry]:
    return join(session.list_trainjobs(namespace), session.list_jobsets(namespace),
                session.podgroups(podgroup_api(settings.flavor), namespace))


def owed(entry: Entry, settings: Settings) -> bool:
    """A pass is owed: the policy holds its JobSet, the earlier policy suspended it, or its JobSet waits suspended,
    undecided, in a namespace kai_fn serves."""
    marks = entry.marks
    if marks.deleting or marks.decided and not marks.legacy_owed:
        return False
    if marks.held or marks.legacy_owed:
        return True
    return marks.has_jobset and marks.jobset_suspended and settings.watches(entry.key[0])


def holding(entry: Entry) -> bool:
    """Its gang holds places for a later wave (MPI's launcher) that kai_fn has not handed over or let go yet: a pass
    is owed whenever JobSet may have made those pods, or stopped (kai_fn/function/reserve.py); the resync is the
    backstop for an event that was lost."""
    notes = triage.notes(entry.podgroup)
    return (entry.marks.reserves is not None and entry.podgroup is not None and not entry.marks.deleting
            and keys.RESERVATION_ENDED_ANNOTATION not in notes)
