"""The schedule timeout's state on the TrainJob: which waits run, which are overdue, when a new one starts."""
from __future__ import annotations

import datetime

import pytest

from kai_fn.core import gang, keys
from kai_fn.core.schedule_timeout import (Wait, main_stage_wait, new_wait, overdue, parse_seconds, placed,
                                         seconds_problem, stamp)

UID = "11111111-2222-4333-8444-555555555555"
PG = f"pg-job-{UID}"
T0 = datetime.datetime(2026, 12, 3, 6, 0, 0, tzinfo=datetime.UTC)


def at(seconds: int) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def trainjob(suspend=False, **notes):
    annotations = {keys.MARKER_PODGROUP: PG, keys.RELEASED_AT_ANNOTATION: stamp(T0)}
    annotations.update({k: v for k, v in notes.items() if v is not None})
    for k in [k for k, v in notes.items() if v is None]:
        annotations.pop(k, None)
    return {"metadata": {"name": "job", "namespace": "ns", "uid": UID, "annotations": annotations},
            "spec": {"suspend": suspend}}


def podgroup(timeout="60", subgroups=None, min_member=4, conditions=None):
    meta = {"name": PG, "namespace": "ns", "labels": {keys.TRAINJOB_UID_LABEL: UID}, "annotations": {}}
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


OVERRIDE = keys.SCHEDULE_TIMEOUT_ANNOTATION


@pytest.mark.parametrize("job, pg, now, expected", [
    (trainjob(), podgroup(), at(59), None),
    (trainjob(), podgroup(), at(60), 60),
    (trainjob(**{OVERRIDE: "10"}), podgroup(), at(10), 10),  # the TrainJob's annotation wins
    (trainjob(**{OVERRIDE: "600"}), podgroup(), at(60), None),
    (trainjob(**{OVERRIDE: "soon"}), podgroup(), at(60), 60),  # an unusable override is ignored
    (trainjob(**{OVERRIDE: "0"}), podgroup(), at(10**6), None),  # 0: no timeout
    (trainjob(), podgroup(timeout=None), at(10**6), None),  # no policy, no setting: no timeout
    (trainjob(**{OVERRIDE: "5"}), podgroup(timeout=None), at(5), 5),
    (trainjob(**{keys.GANG_BOUND_ANNOTATION: stamp(at(3))}), podgroup(), at(600), None),
    (trainjob(**{keys.TIMED_OUT_ANNOTATION: stamp(at(60))}), podgroup(), at(600), None),  # reported already
    (trainjob(**{keys.TIMED_OUT_ANNOTATION: stamp(at(-1))}), podgroup(), at(60), 60),  # an earlier wait's
    (trainjob(suspend=True), podgroup(), at(600), None),
    (trainjob(**{keys.RELEASED_AT_ANNOTATION: None}), podgroup(), at(600), None),  # never released by kai_fn
    (trainjob(**{keys.RELEASED_AT_ANNOTATION: "yesterday"}), podgroup(), at(600), None),
    (trainjob(**{keys.MARKER_PODGROUP: "pg-other"}), podgroup(), at(600), None),
], ids=["before", "at-the-deadline", "override", "longer-override", "bad-override-ignored", "zero-is-none",
        "none", "override-without-default", "bound", "timed-out", "earlier-timeout", "suspended", "not-released",
        "bad-time", "other-podgroup"])
def test_which_waits_are_overdue(job, pg, now, expected):
    wait = overdue(job, pg, now)
    assert (wait.timeout if wait else None) == expected


def test_a_podgroup_of_an_earlier_trainjob_of_that_name_is_not_its_wait():
    pg = podgroup()
    pg["metadata"]["labels"][keys.TRAINJOB_UID_LABEL] = "another-uid"
    assert overdue(trainjob(), pg, at(600)) is None


def test_a_deleted_trainjob_does_not_wait():
    job = trainjob()
    job["metadata"]["deletionTimestamp"] = stamp(T0)
    assert overdue(job, podgroup(), at(600)) is None


# -- a new wait after a resume -------------------------------------------------------------------------------------

SUSPENDED_BY_TIMEOUT = {keys.RELEASED_AT_ANNOTATION: None, keys.TIMED_OUT_ANNOTATION: stamp(at(60))}


@pytest.mark.parametrize("job, expected", [
    (trainjob(suspend=False, **SUSPENDED_BY_TIMEOUT), stamp(at(120))),
    (trainjob(suspend=True, **SUSPENDED_BY_TIMEOUT), None),  # still suspended: nothing to wait for
    (trainjob(suspend=False), None),  # a running wait: duplicates cost nothing
    (trainjob(suspend=False, **{keys.TIMED_OUT_ANNOTATION: stamp(at(60))}), None),  # timed out in event mode
    (trainjob(suspend=False, **{keys.RELEASED_AT_ANNOTATION: None}), None),  # held, resumed by someone else
    (trainjob(suspend=False, **{**SUSPENDED_BY_TIMEOUT, keys.MARKER_PODGROUP: None}), None),
], ids=["resumed", "still-suspended", "running-wait", "event-mode", "never-timed-out", "unmarked"])
def test_a_resume_after_a_timeout_starts_a_new_wait_and_nothing_else_does(job, expected):
    assert new_wait(job, at(120)) == expected


def test_the_new_wait_starts_strictly_after_the_timeout_even_with_a_fast_resume():
    job = trainjob(suspend=False, **SUSPENDED_BY_TIMEOUT)
    started = new_wait(job, at(60))
    assert started == stamp(at(61))
    job["metadata"]["annotations"][keys.RELEASED_AT_ANNOTATION] = started
    assert overdue(job, podgroup(), at(121)) is not None and overdue(job, podgroup(), at(120)) is None


# -- placed ------------------------------------------------------------------------------------------------------

def pod(node="n1", subgroup=None, deleting=False, created=None, podgroup=PG):
    meta = {"labels": {keys.KAI_SUBGROUP_LABEL: subgroup} if subgroup else {},
            "annotations": {keys.KAI_POD_GROUP_ANNOTATION: podgroup}}
    if created is not None:
        meta["creationTimestamp"] = stamp(at(created))
    if deleting:
        meta["deletionTimestamp"] = stamp(T0)
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}}


@pytest.mark.parametrize("pg, pods, expected", [
    (podgroup(min_member=2), [pod(), pod()], True),
    (podgroup(min_member=2), [pod(), pod(node=None)], False),
    (podgroup(min_member=2), [pod(), pod(deleting=True)], False),
    (podgroup(min_member=2), [], False),
    (podgroup(subgroups=[("init", 1), ("node", 2)]), [pod(subgroup="init")], True),
    (podgroup(subgroups=[("init", 1), ("node", 2)]), [pod(subgroup="node"), pod(node=None, subgroup="node")], False),
], ids=["all-on-nodes", "one-pending", "one-terminating", "no-pods", "one-subgroup-placed", "no-subgroup-complete"])
def test_a_wait_ends_when_kai_placed_the_gang_or_with_subgroups_one_stage_of_it(pg, pods, expected):
    assert placed(gang.count(pg, pods)) is expected


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
