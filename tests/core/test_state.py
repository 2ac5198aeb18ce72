"""Where a TrainJob stands with kai_fn (kai_fn/core/state.py): the facts (the marks on its JobSet and main PodGroup,
when the current wait for its gang began), its phase with its reason and since when, and the gang it shows."""
from __future__ import annotations

import dataclasses
import datetime
import re
from typing import Any

import pytest

from kai_fn.core import keys, objects, state
from kai_fn.core.plan import Plan, PodSetSummary, StageSummary
from kai_fn.core.reasons import Refusal
from kai_fn.core.objects import stamp

UID = "11111111-2222-4333-8444-555555555555"
PG = f"pg-job-{UID}"
T0 = datetime.datetime(2026, 12, 3, 6, 0, 0, tzinfo=datetime.UTC)


def at(seconds: int) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def trainjob(suspend: bool | None = None, labels: dict[str, str] | None = None, deleting: bool = False,
             **notes: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "job", "namespace": "ns", "uid": UID, "annotations": dict(notes)}
    if labels:
        meta["labels"] = labels
    if deleting:
        meta["deletionTimestamp"] = stamp(T0)
    return {"metadata": meta, "spec": {} if suspend is None else {"suspend": suspend}}


def jobset(suspend: bool = True, resumed: int | None = None, condition: str = "False",
           **notes: str) -> dict[str, Any]:
    """``resumed``: JobSet's ``Suspended`` condition, with its status ``condition``, that many seconds after T0."""
    meta: dict[str, Any] = {"name": "job", "namespace": "ns", "uid": "js-uid", "annotations": dict(notes),
                            "ownerReferences": [{"kind": "TrainJob", "name": "job", "uid": UID, "controller": True}]}
    out: dict[str, Any] = {"metadata": meta, "spec": {"suspend": suspend}}
    if resumed is not None:
        out["status"] = {"conditions": [{"type": "Suspended", "status": condition,
                                         "lastTransitionTime": stamp(at(resumed))}]}
    return out


def podgroup(**notes: str) -> dict[str, Any]:
    return {"metadata": {"name": PG, "namespace": "ns", "labels": {keys.TRAINJOB_UID_LABEL: UID},
                         "annotations": dict(notes)}}


def named(created: int = 0, *, suspend: bool = False) -> dict[str, Any]:
    """The JobSet as the admission policy named it, created ``created`` seconds after T0: nothing held."""
    out = jobset(suspend=suspend)
    out["metadata"]["labels"] = {keys.NAMED_LABEL: "true"}
    out["metadata"]["creationTimestamp"] = stamp(at(created))
    return out


def made(created: int = 0, **notes: str) -> dict[str, Any]:
    """The main PodGroup as kai_fn makes it (its identity labels), made ``created`` seconds after T0."""
    out = podgroup(**notes)
    out["metadata"]["labels"][keys.MANAGED_BY_LABEL] = keys.MANAGED_BY
    out["metadata"]["creationTimestamp"] = stamp(at(created))
    return out


PODGROUP = {keys.MARKER_PODGROUP: PG}
SKIPPED = {keys.MARKER_SKIPPED: "out-of-scope"}
BOUND, TIMED_OUT, RELEASED = keys.GANG_BOUND_ANNOTATION, keys.TIMED_OUT_ANNOTATION, keys.RELEASED_AT_ANNOTATION


# -- the decision ----------------------------------------------------------------------------------------------

DECISIONS = {
    # name: (trainjob, jobset, expected (podgroup, skipped, decided))
    "no JobSet yet: nothing decided": (trainjob(), None, (None, None, False)),
    "suspended, undecided": (trainjob(), jobset(), (None, None, False)),
    "decided with a gang on the JobSet": (trainjob(), jobset(suspend=False, **PODGROUP), (PG, None, True)),
    "a gang decided, left suspended (kai-fn/hold)": (trainjob(), jobset(**PODGROUP), (PG, None, True)),
    "let go without a gang on the JobSet": (trainjob(), jobset(suspend=False, **SKIPPED), (None, "out-of-scope", True)),
    "a gang wins over a skip": (trainjob(), jobset(**PODGROUP, **SKIPPED), (PG, None, True)),
    "decisions on the TrainJob itself are not read: its metadata is its author's": (
        trainjob(**PODGROUP), jobset(), (None, None, False)),
}


@pytest.mark.parametrize("case", DECISIONS, ids=list(DECISIONS))
def test_the_decision_is_read_from_the_jobset(case):
    job, js, expected = DECISIONS[case]
    marks = state.facts(job, js)
    assert (marks.podgroup, marks.skipped, marks.decided) == expected
    assert marks.has_jobset is (js is not None)


# -- running, and the gang's marks on its PodGroup ---------------------------------------------------------------

RUNNING = {
    "no JobSet": (trainjob(suspend=False), None, False),
    "the JobSet suspended": (trainjob(suspend=False), jobset(suspend=True), False),
    "the TrainJob suspended": (trainjob(suspend=True), jobset(suspend=False), False),
    "both running": (trainjob(suspend=False), jobset(suspend=False), True),
    "suspend absent on the TrainJob": (trainjob(), jobset(suspend=False), True),
}


@pytest.mark.parametrize("case", RUNNING, ids=list(RUNNING))
def test_running_means_the_jobset_and_the_trainjob_both_run(case):
    job, js, running = RUNNING[case]
    marks = state.facts(job, js)
    assert marks.running is running
    assert (marks.suspended, marks.jobset_suspended) == (objects.suspended(job), objects.suspended(js))


GANG_MARKS = {
    # name: (trainjob notes, podgroup notes or None, expected (bound, timed_out))
    "none": ({}, {}, (None, None)),
    "on the PodGroup": ({}, {BOUND: stamp(at(5)), TIMED_OUT: stamp(at(9))}, (at(5), at(9))),
    "an unreadable time is no mark": ({}, {BOUND: "yesterday", TIMED_OUT: "2026-12-03T06:00:00"}, (None, None)),
}


@pytest.mark.parametrize("case", GANG_MARKS, ids=list(GANG_MARKS))
def test_the_gangs_marks_are_read_from_its_podgroup(case):
    job_notes, pg_notes, expected = GANG_MARKS[case]
    marks = state.facts(trainjob(**job_notes), jobset(**PODGROUP), None if pg_notes is None else podgroup(**pg_notes))
    assert (marks.bound, marks.timed_out) == expected


# -- when the JobSet last started running ------------------------------------------------------------------------

RESUMED = {
    # name: (trainjob, jobset, expected)
    "never": (trainjob(), jobset(suspend=False), None),
    "JobSet's Suspended condition turned False": (trainjob(), jobset(suspend=False, resumed=30), at(30)),
    "a Suspended condition True is not a resume": (trainjob(), jobset(resumed=30, condition="True"), None),
    "kai_fn's released-at on the JobSet": (trainjob(), jobset(suspend=False, **{RELEASED: stamp(at(10))}), at(10)),
    "the condition wins over the JobSet's released-at": (
        trainjob(), jobset(suspend=False, resumed=30, **{RELEASED: stamp(at(10))}), at(30)),
    "an unreadable time is no resume": (trainjob(), jobset(suspend=False, **{RELEASED: "soon"}), None),
}


@pytest.mark.parametrize("case", RESUMED, ids=list(RESUMED))
def test_the_resume_is_when_the_jobset_last_started_running(case):
    job, js, expected = RESUMED[case]
    assert state.facts(job, js).resumed == expected


# -- the current wait -------------------------------------------------------------------------------------------

def running_gang(resumed: int = 0, **pg_notes: str) -> tuple[dict, dict, dict]:
    return trainjob(suspend=False), jobset(suspend=False, resumed=resumed, **PODGROUP), podgroup(**pg_notes)


WAITS = {
    # name: ((trainjob, jobset, podgroup), expected wait_started)
    "released and running: waits since the resume": (running_gang(0), T0),
    "bound: no wait": (running_gang(0, **{BOUND: stamp(at(5))}), None),
    "timed out since the resume: that wait is over": (running_gang(0, **{TIMED_OUT: stamp(at(60))}), None),
    "timed out at the very moment of the resume: over": (running_gang(60, **{TIMED_OUT: stamp(at(60))}), None),
    "resumed after a timeout (KAI_FN_ON_TIMEOUT=suspend, then its user): a new wait": (
        running_gang(120, **{TIMED_OUT: stamp(at(60))}), at(120)),
    "resumed a second after the timeout: a new wait": (running_gang(61, **{TIMED_OUT: stamp(at(60))}), at(61)),
    "no gang decided: no wait": ((trainjob(suspend=False), jobset(suspend=False, resumed=0), podgroup()), None),
    "decided but still held (suspended): no wait": (
        (trainjob(suspend=False), jobset(suspend=True, **PODGROUP), podgroup()), None),
    "the TrainJob suspended again: no wait": (
        (trainjob(suspend=True), jobset(suspend=False, resumed=0, **PODGROUP), podgroup()), None),
    "running but never seen resumed: no wait": ((trainjob(suspend=False), jobset(suspend=False, **PODGROUP),
                                                 podgroup()), None),
    "the TrainJob being deleted: no wait": (
        (trainjob(suspend=False, deleting=True), jobset(suspend=False, resumed=0, **PODGROUP), podgroup()), None),
}


@pytest.mark.parametrize("case", WAITS, ids=list(WAITS))
def test_a_wait_starts_when_the_gangs_jobset_starts_running_and_ends_bound_or_timed_out(case):
    (job, js, pg), expected = WAITS[case]
    assert state.facts(job, js, pg).wait_started == expected


# -- small readings --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("owner, expected", [
    ({"uid": UID, "controller": True}, True),
    ({"uid": UID}, False),  # owned but not controlled
    ({"uid": "another", "controller": True}, False),  # an earlier TrainJob of that name
], ids=["controller", "not-controller", "another-uid"])
def test_a_jobset_counts_only_when_the_trainjob_controls_it(owner, expected):
    js = jobset()
    js["metadata"]["ownerReferences"] = [owner]
    assert objects.controlled_by(js, UID) is expected


@pytest.mark.parametrize("job, hold, kueue", [
    (trainjob(), None, None),
    (trainjob(**{keys.HOLD_ANNOTATION: "true"}), "kai-fn/hold is true", None),
    (trainjob(**{keys.HOLD_ANNOTATION: "false"}), None, None),
    (trainjob(labels={keys.KUEUE_QUEUE_LABEL: "lq"}), None, "Kueue admits it (kueue.x-k8s.io/queue-name)"),
], ids=["plain", "hold", "hold-false", "kueue"])
def test_why_a_gang_must_not_start_yet(job, hold, kueue):
    assert (objects.hold_reason(job), objects.queued_by_kueue(job)) == (hold, kueue)


@pytest.mark.parametrize("text, expected", [
    ("2026-12-03T06:00:00Z", T0), ("2026-12-03T06:00:00+00:00", T0), ("2026-12-03T06:00:00", None),
    ("soon", None), ("", None), (None, None),
], ids=["zulu", "offset", "no-zone", "words", "empty", "absent"])
def test_times_are_read_only_with_a_zone(text, expected):
    assert objects.parse_time(text) == expected


# -- the phase, its reason and since when ------------------------------------------------------------------------

def refusal(reason: str = "GangExceedsQueue", seconds: int = 30) -> Refusal:
    return Refusal.model_validate({"involvedObject": {"uid": UID}, "reason": reason, "message": "too big",
                                   "firstTimestamp": stamp(at(seconds))})


HOLD = {keys.HOLD_ANNOTATION: "true"}
KUEUE = {keys.KUEUE_QUEUE_LABEL: "lq"}
OPERATOR = {keys.MARKER_SKIPPED: keys.SKIPPED_BY_OPERATOR}

PHASES = {
    # name: (trainjob, jobset, main PodGroup or None, refusals, expected phase, reason pattern, since)
    "its JobSet suspended while it runs (the previous version's hold)": (
        trainjob(), jobset(), None, [], "held", "waits suspended while its TrainJob runs", None),
    "named, its gang not made: its pods wait": (trainjob(), named(), None, [], "held", "wait unbound for their PodGroup",
                                                None),
    "named and refused: blocked": (trainjob(), named(), None, [refusal("QueueNotFound")], "blocked",
                                   "^QueueNotFound", at(30)),
    "named, kai-fn/hold: none made": (trainjob(**HOLD), named(), None, [], "suspended", "^kai-fn/hold is true$", None),
    "named, its gang made: waiting since the later": (trainjob(), named(10), made(40), [], "waiting",
                                                      "not placed it yet", at(40)),
    "named, made before the JobSet: since the JobSet": (trainjob(), named(10), made(2), [], "waiting",
                                                        "not placed it yet", at(10)),
    "named, made and bound": (trainjob(), named(10), made(2, **{BOUND: stamp(at(50))}), [], "bound", "every pod",
                              at(50)),
    "named, a PodGroup of that name kai_fn did not make": (trainjob(), named(), podgroup(), [], "held",
                                                           "wait unbound", None),
    "made before Trainer made the JobSet": (trainjob(), None, made(2), [], "waiting", "has not made its JobSet", None),
    "its JobSet suspended, kai-fn/hold: kept suspended": (trainjob(**HOLD), jobset(), None, [], "suspended",
                                          "^kai-fn/hold is true$", None),
    "its JobSet suspended, refused: blocked since the first refusal": (
        trainjob(), jobset(), None, [refusal(seconds=30), refusal("PlanBlocked", 90)], "blocked",
        "^PlanBlocked: too big$", at(30)),
    "kai-fn/hold wins over a refusal": (trainjob(**HOLD), jobset(), None, [refusal()], "suspended",
                                        "kai-fn/hold", None),
    "no JobSet yet": (trainjob(), None, None, [], "held", "Trainer has not made its JobSet yet", None),
    "no JobSet, refused (no runtime)": (trainjob(), None, None, [refusal("RuntimeNotFound")], "blocked",
                                        "^RuntimeNotFound", at(30)),
    "suspended by its author, never held": (trainjob(suspend=True), jobset(), None, [], "suspended",
                                            "suspended by its user", None),
    "suspended for Kueue, never held": (trainjob(labels=KUEUE), jobset(), None, [], "suspended", "Kueue admits it",
                                        None),
    "ran without being held": (trainjob(), jobset(suspend=False), None, [], "running-without-gang",
                               "ran without being named", None),
    "running, a refusal does not make it blocked": (trainjob(), jobset(suspend=False), None, [refusal()],
                                                    "running-without-gang", "ran without being named", None),
    "skipped: out of scope": (trainjob(), jobset(suspend=False, **SKIPPED), None, [], "running-without-gang",
                              "does not ask for KAI", None),
    "skipped by an operator, even with a refusal": (trainjob(), jobset(suspend=False, **OPERATOR), None, [refusal()],
                                                    "running-without-gang", "by an operator", None),
    "marked bound: bound since the mark": (trainjob(), jobset(suspend=False, resumed=0, **PODGROUP),
                                           podgroup(**{BOUND: stamp(at(5))}), [], "bound", "every pod", at(5)),
    "bound wins over timed out": (trainjob(), jobset(suspend=False, resumed=0, **PODGROUP),
                                  podgroup(**{BOUND: stamp(at(90)), TIMED_OUT: stamp(at(60))}), [], "bound",
                                  "every pod", at(90)),
    "timed out, still waiting": (trainjob(), jobset(suspend=False, resumed=0, **PODGROUP),
                                 podgroup(**{TIMED_OUT: stamp(at(60))}), [], "timed-out", "still waiting$", at(60)),
    "timed out, suspended again": (trainjob(suspend=True), jobset(suspend=True, resumed=0, **PODGROUP),
                                   podgroup(**{TIMED_OUT: stamp(at(60))}), [], "timed-out", "suspended again", at(60)),
    "resumed after its timeout: waiting again": (trainjob(), jobset(suspend=False, resumed=120, **PODGROUP),
                                                 podgroup(**{TIMED_OUT: stamp(at(60))}), [], "waiting",
                                                 "not placed it yet", at(120)),
    "gang made, kai-fn/hold keeps it suspended": (trainjob(**HOLD), jobset(**PODGROUP), podgroup(), [],
                                                  "suspended", "^gang made, left suspended: kai-fn/hold", None),
    "gang made, left for Kueue": (trainjob(suspend=True, labels=KUEUE), jobset(**PODGROUP), podgroup(), [],
                                  "suspended", "left suspended: Kueue admits it", None),
    "released, waiting for the scheduler": (trainjob(), jobset(suspend=False, resumed=10, **PODGROUP), podgroup(),
                                            [], "waiting", r"not placed it yet \(0 of", at(10)),
    "released, its PodGroup gone": (trainjob(), jobset(suspend=False, resumed=10, **PODGROUP), None, [], "waiting",
                                    "is gone", at(10)),
}


@pytest.mark.parametrize("case", PHASES, ids=list(PHASES))
def test_each_phase_has_its_reason_and_since(case):
    job, js, main, refused, phase, reason, since = PHASES[case]
    job["metadata"]["creationTimestamp"] = stamp(T0)
    reading = state.read(job, js, [main] if main is not None else [], [], refused)
    assert reading.phase == phase and re.search(reason, reading.reason), reading
    assert reading.since == (since or T0)  # the TrainJob's creation when the phase has no moment of its own


def test_every_phase_is_covered_and_they_come_in_the_order_an_operator_looks():
    assert {case[4] for case in PHASES.values()} == set(state.Phase)
    assert [str(p) for p in state.PHASES] == ["held", "blocked", "timed-out", "waiting", "suspended",
                                              "running-without-gang", "bound"]


def gang_pg(name: str = PG, kai: str | None = None) -> dict:
    """A PodGroup of minMember 2, KAI's reason in its status when ``kai``."""
    pg = podgroup()
    pg["metadata"]["name"] = name
    pg["spec"] = {"minMember": 2}
    if kai:
        pg["status"] = {"schedulingConditions": [{"reasons": [{"reason": kai, "message": "gpu limit 4",
                                                                "details": {"queueDetails": {"name": "team-a"}}}]}]}
    return pg


def pods(bound: int, total: int = 2) -> list[dict]:
    return [{"metadata": {"name": f"p{i}", "annotations": {keys.KAI_POD_GROUP_ANNOTATION: PG},
                          "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "job-node-0",
                                               "uid": "j", "controller": True}]},
             "spec": {"nodeName": "n1"} if i < bound else {}} for i in range(total)]


# The plan of the gang: 2 pods of the replicatedJob `node` (Job job-node-0) in PodGroup PG.
PLAN = Plan(namespace="ns", trainjob="job", uid=UID, flavor="kai", stages=(StageSummary(PG, ("node",), 2, True),),
            pod_sets=(PodSetSummary("node", 2, {}),))


RELEASED_GANG = trainjob(), jobset(suspend=False, resumed=10, **PODGROUP)
FROM_PODS = {
    # name: (trainjob, jobset, the TrainJob's PodGroups, pods, expected phase, reason pattern)
    "every pod on a node, not yet marked: bound": (*RELEASED_GANG, [gang_pg()], pods(2), "bound", "every pod"),
    "one pod of two on a node: waiting": (*RELEASED_GANG, [gang_pg()], pods(1), "waiting", r"\(1 of minMember 2"),
    "its PodGroup's minMember edited down to 1, one pod on a node: waiting, as planned": (
        *RELEASED_GANG, [{**gang_pg(), "spec": {"minMember": 1}}], pods(1, total=1), "waiting", r"\(1 of minMember 2"),
    "its pods on nodes but its TrainJob suspended again: not bound": (
        trainjob(suspend=True), jobset(suspend=False, resumed=10, **PODGROUP), [gang_pg()], pods(2), "suspended",
        "gang made, left suspended"),
    "KAI says why": (*RELEASED_GANG, [gang_pg(kai="OverLimit")], pods(0), "waiting", r"^KAI: OverLimit \(queue team-a\)"),
    "KAI says why on a stage's PodGroup": (*RELEASED_GANG, [gang_pg(), gang_pg(f"{PG}-init", kai="Unschedulable")], pods(0),
                                           "waiting", "^KAI: Unschedulable"),
    "another TrainJob's PodGroup is not read": (
        *RELEASED_GANG, [gang_pg(), {**gang_pg(f"{PG}-x", kai="OverLimit"), "metadata": {"name": "x", "labels": {}}}],
        pods(0), "waiting", "not placed it yet"),
}


@pytest.mark.parametrize("case", FROM_PODS, ids=list(FROM_PODS))
def test_the_pods_and_kais_reasons_place_a_released_gang(case):
    job, js, podgroups, listed, phase, reason = FROM_PODS[case]
    reading = state.read(job, js, podgroups, listed, plan=PLAN)
    assert reading.phase == phase and re.search(reason, reading.reason), reading


# -- the gang shown ----------------------------------------------------------------------------------------------

def made(min_member: int = 4, resources: str = "nvidia.com/gpu=8,cpu=16") -> dict:
    pg = podgroup(**{keys.MIN_RESOURCES_ANNOTATION: resources})
    pg["spec"] = {"minMember": min_member, "queue": "team-a"}
    return pg


@dataclasses.dataclass
class FakePlan:  # the fields of kai_fn.core.plan.Plan the gang reads
    podgroup: dict | None = dataclasses.field(default_factory=lambda: {"metadata": {"name": PG}})
    ignored: str | None = None
    queue: str | None = "team-b"
    min_member: int = 2
    min_resources: dict = dataclasses.field(default_factory=lambda: {"nvidia.com/gpu": "4"})
    podgroup_name: str = PG


GANGS = {
    "made: the PodGroup's": (made(), FakePlan(), state.Gang("team-a", 4, "8", PG)),
    "before it is made: the plan's, said so": (None, FakePlan(), state.Gang("team-b", 2, "4", PG, planned=True)),
    "no plan: the queue label alone": (None, None, state.Gang("q")),
    "a plan that ignores it: the queue label alone": (None, FakePlan(ignored="no KAI"), state.Gang("q")),
}


@pytest.mark.parametrize("case", GANGS, ids=list(GANGS))
def test_the_gang_is_the_made_one_else_the_planned_one(case):
    main, plan, expected = GANGS[case]
    assert state.gang_of(trainjob(labels={keys.KAI_QUEUE_LABEL: "q"}), main, plan) == expected  # type: ignore[arg-type]
