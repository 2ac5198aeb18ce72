"""The schedule timeout's state, read by kai_fn/core/state.py from the JobSet (when it started running) and the main
PodGroup (bound, timed out): which waits run, which are overdue, and that a resume after a timeout starts a new one
by itself."""
from __future__ import annotations

import datetime

import pytest

from kai_fn.core import keys
from kai_fn.core.objects import stamp
from kai_fn.core.schedule_timeout import Wait, main_stage_wait, overdue
from kai_fn.core.scope import parse_seconds, seconds_problem
from kai_fn.core.state import facts as marks

UID = "11111111-2222-4333-8444-555555555555"
PG = f"pg-job-{UID}"
T0 = datetime.datetime(2026, 12, 3, 6, 0, 0, tzinfo=datetime.UTC)
OVERRIDE = keys.SCHEDULE_TIMEOUT_ANNOTATION
BOUND, TIMED_OUT, RELEASED = keys.GANG_BOUND_ANNOTATION, keys.TIMED_OUT_ANNOTATION, keys.RELEASED_AT_ANNOTATION


def at(seconds: int) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def trainjob(suspend=False, **notes):
    return {"metadata": {"name": "job", "namespace": "ns", "uid": UID, "annotations": dict(notes)},
            "spec": {"suspend": suspend}}


def jobset(suspend=False, resumed=0, podgroup=PG, **notes):
    """The TrainJob's JobSet, decided (``kai-fn/podgroup``) and, with ``resumed``, started by JobSet's controller
    that many seconds after T0 (its ``Suspended`` condition False)."""
    annotations = {keys.MARKER_PODGROUP: podgroup} if podgroup else {}
    out = {"metadata": {"name": "job", "namespace": "ns", "annotations": {**annotations, **notes}},
           "spec": {"suspend": suspend}}
    if resumed is not None:
        out["status"] = {"conditions": [{"type": "Suspended", "status": "False", "reason": "ResumeJobs",
                                         "lastTransitionTime": stamp(at(resumed))}]}
    return out


def podgroup(timeout="60", subgroups=None, min_member=4, conditions=None, **notes):
    meta = {"name": PG, "namespace": "ns", "labels": {keys.TRAINJOB_UID_LABEL: UID}, "annotations": dict(notes)}
    if timeout is not None:
        meta["annotations"][keys.SCHEDULE_TIMEOUT_ANNOTATION] = timeout
    spec = {"queue": "team-a"}
    if subgroups:
        spec |= {"minSubGroup": 1, "subGroups": [{"name": n, "minMember": m} for n, m in subgroups]}
    else:
        spec["minMember"] = min_member
    out = {"metadata": meta, "spec": spec}
    if conditions is not None:
        out["status"] = {"schedulingConditions": conditions}
    return out


def due(job, js, pg, now):
    """What the resync's timeout check computes: the marks from all three, then the overdue wait."""
    return overdue(job, marks(job, js, pg), pg, now)


@pytest.mark.parametrize("job, js, pg, now, expected", [
    (trainjob(), jobset(), podgroup(), at(59), None),
    (trainjob(), jobset(), podgroup(), at(60), 60),
    (trainjob(**{OVERRIDE: "10"}), jobset(), podgroup(), at(10), 10),  # the TrainJob's annotation wins
    (trainjob(**{OVERRIDE: "600"}), jobset(), podgroup(), at(60), None),
    (trainjob(**{OVERRIDE: "soon"}), jobset(), podgroup(), at(60), 60),  # an unusable override is ignored
    (trainjob(**{OVERRIDE: "0"}), jobset(), podgroup(), at(10**6), None),  # 0: no timeout
    (trainjob(), jobset(), podgroup(timeout=None), at(10**6), None),  # no policy, no setting: no timeout
    (trainjob(**{OVERRIDE: "5"}), jobset(), podgroup(timeout=None), at(5), 5),
    (trainjob(), jobset(), podgroup(**{BOUND: stamp(at(3))}), at(600), None),
    (trainjob(), jobset(), podgroup(**{TIMED_OUT: stamp(at(60))}), at(600), None),  # reported already
    (trainjob(), jobset(), podgroup(**{TIMED_OUT: stamp(at(-1))}), at(60), 60),  # an earlier wait's
    (trainjob(suspend=True), jobset(), podgroup(), at(600), None),  # its TrainJob suspended (Trainer follows)
    (trainjob(), jobset(suspend=True, resumed=None), podgroup(), at(600), None),  # decided, still suspended
    (trainjob(), jobset(resumed=None), podgroup(), at(600), None),  # running, but never seen started
    (trainjob(), jobset(resumed=None, **{RELEASED: stamp(T0)}), podgroup(), at(60), 60),  # kai_fn's release time
    (trainjob(), jobset(resumed=None, **{RELEASED: "yesterday"}), podgroup(), at(600), None),
    (trainjob(), jobset(podgroup=None), podgroup(), at(600), None),  # no gang decided
    (trainjob(), jobset(podgroup="pg-other"), podgroup(), at(600), None),
    (trainjob(), None, podgroup(), at(600), None),  # no JobSet (deleted, or an earlier TrainJob's)
], ids=["before", "at-the-deadline", "override", "longer-override", "bad-override-ignored", "zero-is-none",
        "none", "override-without-default", "bound", "timed-out", "earlier-timeout", "trainjob-suspended",
        "jobset-suspended", "never-started", "released-at-on-the-jobset", "bad-time", "undecided", "other-podgroup",
        "no-jobset"])
def test_which_waits_are_overdue(job, js, pg, now, expected):
    wait = due(job, js, pg, now)
    assert (wait.timeout if wait else None) == expected


def test_a_podgroup_of_an_earlier_trainjob_of_that_name_is_not_its_wait():
    pg = podgroup()
    pg["metadata"]["labels"][keys.TRAINJOB_UID_LABEL] = "another-uid"
    assert due(trainjob(), jobset(), pg, at(600)) is None


def test_a_deleted_trainjob_does_not_wait():
    job = trainjob()
    job["metadata"]["deletionTimestamp"] = stamp(T0)
    assert due(job, jobset(), podgroup(), at(600)) is None


def test_the_wait_names_its_trainjob_gang_start_and_deadline():
    wait = due(trainjob(**{OVERRIDE: "30"}), jobset(resumed=5), podgroup(), at(35))
    assert wait == Wait("ns", "job", UID, PG, at(5), 30) and wait.deadline == at(35)


# -- a new wait after a resume -------------------------------------------------------------------------------------
# KAI_FN_ON_TIMEOUT=suspend suspends the TrainJob (Trainer suspends its JobSet); when its user resumes it, JobSet's
# controller resumes the JobSet and its Suspended condition turns False again, after the timeout's mark: that alone
# starts the new wait (no write of kai_fn's).

TIMED_OUT_AT_60 = podgroup(**{TIMED_OUT: stamp(at(60))})


@pytest.mark.parametrize("job, js, now, expected", [
    (trainjob(), jobset(resumed=120), at(180), at(120)),  # resumed after the timeout: a new wait, overdue 60 s on
    (trainjob(), jobset(resumed=120), at(179), None),  # ...not before
    (trainjob(suspend=True), jobset(suspend=True, resumed=None), at(600), None),  # still suspended: no wait
    (trainjob(), jobset(suspend=True, resumed=120), at(600), None),  # the TrainJob resumed, its JobSet not yet
    (trainjob(), jobset(resumed=0), at(600), None),  # KAI_FN_ON_TIMEOUT=event: never suspended, the wait is over
    (trainjob(), jobset(resumed=60), at(600), None),  # resumed in the second of the timeout's mark: not after it
    (trainjob(), jobset(resumed=61), at(121), at(61)),  # a second after it is
], ids=["resumed", "resumed-not-yet-due", "still-suspended", "jobset-not-yet-resumed", "event-mode", "same-second",
        "next-second"])
def test_a_resume_after_a_timeout_starts_a_new_wait_and_nothing_else_does(job, js, now, expected):
    wait = due(job, js, TIMED_OUT_AT_60, now)
    assert (wait.started if wait else None) == expected


def test_a_new_wait_once_bound_is_over_for_good():
    pg = podgroup(**{TIMED_OUT: stamp(at(60)), BOUND: stamp(at(150))})
    assert due(trainjob(), jobset(resumed=120), pg, at(600)) is None


# -- a staged gang's pods ---------------------------------------------------------------------------------------

def pod(node="n1", subgroup=None, deleting=False, created=None, podgroup=PG):
    meta = {"labels": {keys.KAI_SUBGROUP_LABEL: subgroup} if subgroup else {},
            "annotations": {keys.KAI_POD_GROUP_ANNOTATION: podgroup}}
    if created is not None:
        meta["creationTimestamp"] = stamp(at(created))
    if deleting:
        meta["deletionTimestamp"] = stamp(T0)
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}}


# -- a staged gang: the main wave's wait starts with its pods ---------------------------------------------------

def staged(pg):
    pg["metadata"]["annotations"][keys.STAGE_ANNOTATION] = "node"
    return pg


WAIT = Wait("ns", "job", UID, PG, T0, 60)


@pytest.mark.parametrize("pg, pods, started", [
    (podgroup(), [], T0),
    (staged(podgroup()), [pod(node=None, created=30, podgroup=f"{PG}-stage-0")], None),
    (staged(podgroup()), [pod(node=None, created=300), pod(node=None, created=290)], at(290)),
    (staged(podgroup()), [pod(node=None, created=-5)], T0),
], ids=["flat-from-the-release", "staged-none-of-its-pods-yet", "staged-from-its-first-pod", "never-before-the-release"])
def test_a_staged_gangs_wait_starts_when_its_main_wave_has_pods(pg, pods, started):
    wait = main_stage_wait(WAIT, pg, pods)
    assert (wait.started if wait else None) == started


@pytest.mark.parametrize("text, seconds, problem", [
    ("60", 60, False), ("0", 0, False), ("-1", None, True), ("1.5", None, True), ("1m", None, True),
    ("", None, True), (None, None, False),
])
def test_timeout_annotation_values(text, seconds, problem):
    assert parse_seconds(text) == seconds
    notes = {} if text is None else {keys.SCHEDULE_TIMEOUT_ANNOTATION: text}
    assert (seconds_problem(notes) is not None) is problem
