"""Where a TrainJob stands with kai_fn, from what the admission policy and kai_fn wrote: one pure reading, shared by
the pass, the resync, the schedule timeout and the commands.

The gate is the JobSet: the policy holds it (``spec.suspend: true`` and ``kai-fn/held``), kai_fn decides it
(``kai-fn/podgroup`` or ``kai-fn/skipped`` on the JobSet) and the gang's later marks (``kai-fn/bound``,
``kai-fn/timed-out``) go on the main PodGroup, so a gang that binds costs its TrainJob no write. TrainJobs decided
before the gate moved carry those marks on themselves, and are still read so.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from kai_fn.core import keys


# Times kai_fn reads from annotations anyone may have written: outside these years a mark is no mark, so that no
# arithmetic on it (a deadline, an age) can overflow.
_YEARS = range(1970, 3000)


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text or not isinstance(text, str) or len(text) > 40:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo and moment.year in _YEARS else None


def meta(obj: dict[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("metadata") or {}


def notes(obj: dict[str, Any] | None) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return meta(obj).get("labels") or {}


def deleting(obj: dict[str, Any] | None) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def suspended(obj: dict[str, Any] | None) -> bool:
    spec = (obj or {}).get("spec")  # an event's body, not yet parsed: any JSON
    return isinstance(spec, dict) and spec.get("suspend") is True


def controlled_by(jobset: dict[str, Any], uid: str | None) -> bool:
    return any(o.get("uid") == uid and o.get("controller") for o in meta(jobset).get("ownerReferences") or [])


def hold_reason(trainjob: dict[str, Any]) -> str | None:
    """Why kai_fn must leave a held JobSet held even once its gang exists: its TrainJob asks to wait."""
    if notes(trainjob).get(keys.HOLD_ANNOTATION) == "true":
        return f"{keys.HOLD_ANNOTATION} is true"
    return None


def queued_by_kueue(trainjob: dict[str, Any]) -> str | None:
    if keys.KUEUE_QUEUE_LABEL in labels(trainjob):
        return f"Kueue admits it ({keys.KUEUE_QUEUE_LABEL})"
    return None


def resumed_at(jobset: dict[str, Any] | None) -> datetime.datetime | None:
    """When JobSet's controller last resumed it (its ``Suspended`` condition turned False), or when kai_fn did."""
    for condition in ((jobset or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Suspended" and condition.get("status") == "False":
            if (moment := parse_time(condition.get("lastTransitionTime"))) is not None:
                return moment
    return parse_time(notes(jobset).get(keys.RELEASED_AT_ANNOTATION))


@dataclass(frozen=True)
class Marks:
    """A TrainJob's markers, wherever they live. ``jobset`` None: Trainer has not made it (or it is another's)."""

    podgroup: str | None = None  # the main gang kai_fn made
    skipped: str | None = None  # released without a gang, and why
    held: bool = False  # the policy holds its JobSet and kai_fn has not decided it
    legacy_owed: bool = False  # suspended by the earlier TrainJob policy, still suspended: kai_fn owes a release
    has_jobset: bool = False
    jobset_suspended: bool = False
    suspended: bool = False  # the TrainJob's own spec.suspend
    deleting: bool = False
    bound: datetime.datetime | None = None
    timed_out: datetime.datetime | None = None
    resumed: datetime.datetime | None = None  # when the JobSet last started running
    reserves: str | None = None  # the decision holds places for later waves (`launcher=1`, kai_fn/core/reserve.py)

    @property
    def decided(self) -> bool:
        return self.podgroup is not None or self.skipped is not None

    @property
    def running(self) -> bool:
        return self.has_jobset and not self.jobset_suspended and not self.suspended

    @property
    def wait_started(self) -> datetime.datetime | None:
        """When the current wait for the gang began: the JobSet runs, is not bound, and has not timed out since it
        last resumed. A resume after a timeout (its user's, after ``KAI_FN_ON_TIMEOUT=suspend``) starts a new wait."""
        if self.podgroup is None or self.deleting or not self.running or self.bound is not None:
            return None
        if self.resumed is None or (self.timed_out is not None and self.timed_out >= self.resumed):
            return None
        return self.resumed


def marks(trainjob: dict[str, Any], jobset: dict[str, Any] | None = None,
          podgroup: dict[str, Any] | None = None) -> Marks:
    """Read the markers of ``trainjob``: decisions on its JobSet (``jobset`` must be the one it controls), the gang's
    marks on its main PodGroup, each falling back to the TrainJob's own (written before the gate moved). A JobSet
    the policy holds is decided by its own annotations alone: a TrainJob's author can write its TrainJob's, and a
    hold is never skipped for them."""
    job_notes, set_notes, pg_notes = notes(trainjob), notes(jobset), notes(podgroup)
    held_label = jobset is not None and labels(jobset).get(keys.HELD_LABEL) == "true"
    legacy_notes = {} if held_label else job_notes
    legacy = job_notes.get("kai-fn/auto-suspended") == "true" and suspended(trainjob)
    podgroup_name = set_notes.get(keys.MARKER_PODGROUP) or legacy_notes.get(keys.MARKER_PODGROUP)
    skipped = set_notes.get(keys.MARKER_SKIPPED) or legacy_notes.get(keys.MARKER_SKIPPED)
    return Marks(
        podgroup=podgroup_name,
        skipped=None if podgroup_name else skipped,
        held=held_label and keys.MARKER_PODGROUP not in set_notes and keys.MARKER_SKIPPED not in set_notes,
        legacy_owed=legacy,
        has_jobset=jobset is not None,
        jobset_suspended=suspended(jobset),
        suspended=suspended(trainjob),
        deleting=deleting(trainjob),
        bound=parse_time(pg_notes.get(keys.GANG_BOUND_ANNOTATION) or job_notes.get(keys.GANG_BOUND_ANNOTATION)),
        timed_out=parse_time(pg_notes.get(keys.TIMED_OUT_ANNOTATION) or job_notes.get(keys.TIMED_OUT_ANNOTATION)),
        reserves=set_notes.get(keys.RESERVES_ANNOTATION) if podgroup_name else None,
        resumed=max(filter(None, (resumed_at(jobset), parse_time(job_notes.get(keys.RELEASED_AT_ANNOTATION)))),
                    default=None),
    )
