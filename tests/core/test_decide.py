"""The pass's decision, from the TrainJob's state, the facts read and the plan: each action, with no cluster."""
from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import jsonpatch
import pytest

from kai_fn.core import decide, state
from kai_fn.core.decide import (Context, Ignore, InvalidRuntime, InvalidTrainJob, LetGo, MakeGang, MarkTooLate, Refuse,
                                RuntimeMissing, SettleReservation, Skip, Wait)
from kai_fn.core.plan import plan
from kai_fn.core.scope import Problem
from tests.builders import jobset_for, runtime, trainjob, typed

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
RT = runtime(ml_policy={"numNodes": 2, "torch": {}})
PLAN = plan(*typed(trainjob(), RT))


def case(*, suspend: bool = False, jobset: bool = True, running: bool = False,
         annotations: dict[str, str] | None = None, jobset_notes: dict[str, str] | None = None,
         labels: dict[str, str] | None = None, deleting: bool = False, watched: bool = True, resume: bool = True,
         precheck: bool = False) -> tuple[state.Facts, Context]:
    """A TrainJob and its JobSet as read: the state the decision reads, and the facts beside it."""
    job = trainjob(suspend=suspend, annotations=annotations, labels=labels)
    if deleting:
        job["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    js: dict[str, Any] | None = None
    if jobset:
        js = jobset_for(job, RT, suspend=not running)
        js["metadata"]["resourceVersion"] = "7"
        if jobset_notes:
            js["metadata"]["annotations"] = dict(jobset_notes)
    context = Context(job, js, NOW, watched=watched, resume=resume, precheck=precheck)
    return state.facts(job, js), context


def patched(context: Context, ops: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    assert context.jobset is not None
    return jsonpatch.apply_patch(context.jobset, list(ops))


@pytest.mark.parametrize("given, expected", [
    (dict(deleting=True), Ignore("the TrainJob is being deleted")),
    (dict(jobset_notes={"kai-fn/podgroup": "pg"}), Skip("already gang-scheduled", "pg")),
    (dict(jobset_notes={"kai-fn/podgroup": "pg", "kai-fn/reserves": "launcher=1"}), SettleReservation("pg", "launcher=1")),
    (dict(jobset_notes={"kai-fn/skipped": "running"}), Skip("skipped earlier (running)")),
    (dict(watched=False), LetGo("namespace not in KAI_FN_NAMESPACES")),
    (dict(), None),
], ids=["deleting", "decided", "decided-with-places-held", "skipped", "unwatched", "to-plan"])
def test_before_the_plan(given, expected):
    assert decide.before_plan(*case(**given)) == expected


@pytest.mark.parametrize("planned, expected", [
    (InvalidTrainJob("spec: bad"), Refuse("InvalidTrainJob", "spec: bad")),
    (RuntimeMissing("ClusterTrainingRuntime rt"),
     Refuse("RuntimeNotFound", "ClusterTrainingRuntime rt does not exist; a retry cannot help until it does",
            result="ignored")),
    (InvalidRuntime("ClusterTrainingRuntime rt", "bad"), Refuse("InvalidRuntime", "ClusterTrainingRuntime rt: bad")),
    (dataclasses.replace(PLAN, problems=(Problem("spec", "no"), Problem("x", "y"))),
     Refuse("PlanBlocked", f"{Problem('spec', 'no')}; {Problem('x', 'y')}")),
], ids=["invalid-trainjob", "runtime-missing", "invalid-runtime", "blocked"])
def test_without_a_plan_a_warning(planned, expected):
    assert decide.with_plan(*case(), planned) == expected


def test_a_plan_that_ignores_the_trainjob_leaves_its_jobset_alone():
    assert decide.with_plan(*case(), dataclasses.replace(PLAN, ignored="not KAI's")) == LetGo("not KAI's")


def named(job: dict[str, Any], *, names: dict[str, str] | None = None, running: bool = True) -> dict[str, Any]:
    """The JobSet as the admission policy names it at CREATE (knative/components/admission-policy)."""
    js = jobset_for(job, RT, suspend=not running)
    js["metadata"]["labels"] = {**(js["metadata"].get("labels") or {}), "kai-fn/named": "true"}
    for rj in js["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]
        want = (names or {}).get(rj["name"], PLAN.podgroup_name)
        pod.setdefault("metadata", {}).setdefault("annotations", {})["pod-group-name"] = want
    return js


def named_case(*, jobset: bool = True, names: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
               suspend: bool = False, resume: bool = True) -> tuple[state.Facts, Context]:
    job = trainjob(annotations=annotations, suspend=suspend)
    js = named(job, names=names, running=not suspend) if jobset else None
    return state.facts(job, js), Context(job, js, NOW, watched=True, resume=resume)


NAMED = {
    "named at admission: the gang is made, nothing written": (named_case(), "make"),
    "not made by Trainer yet: the gang is made first": (named_case(jobset=False), "make"),
    "suspended (Kueue, its user): made, ready for the resume": (named_case(suspend=True), "make"),
    "kai-fn/hold: none made yet": (named_case(annotations={"kai-fn/hold": "true"}), Wait(decide.HELD_BY_ITS_AUTHOR)),
    "KAI_FN_RESUME=false: none made yet": (named_case(resume=False), Wait(decide.RESUME_OFF)),
    "named otherwise than planned: none made": (named_case(names={"node": "pg-someone-else"}), "JobSetMismatch"),
}


@pytest.mark.parametrize("seen,expected", NAMED.values(), ids=NAMED.keys())
def test_a_gang_named_at_admission_is_made_and_its_jobset_never_written(seen, expected):
    action = decide.with_plan(*seen, PLAN)
    if expected == "make":
        assert isinstance(action, MakeGang) and action.ops == () and action.plan is PLAN
    elif isinstance(expected, str):
        assert isinstance(action, Refuse) and action.reason == expected and "pg-someone-else" in action.message
    else:
        assert action == expected


def reshaped(change) -> tuple[state.Facts, Context]:
    """A named JobSet changed by ``change(replicatedJobs)`` from what Trainer makes of the plan."""
    seen, context = named_case()
    assert context.jobset is not None
    change(context.jobset["spec"]["replicatedJobs"])
    return seen, context


def _set(field: str, value: int):
    """``replicas`` on the replicatedJob, ``parallelism`` or ``completions`` on its Job template."""
    def change(rjs):
        (rjs[0] if field == "replicas" else rjs[0]["template"]["spec"])[field] = value
    return change


def _extra(scheduler: str | None):
    def change(rjs):
        extra = {**rjs[0], "name": "sidecar-job"}
        extra["template"] = {"spec": {"parallelism": 60, "template": {"spec": {"containers": [{"name": "x"}]}}}}
        if scheduler:
            extra["template"]["spec"]["template"]["spec"]["schedulerName"] = scheduler
        rjs.append(extra)
    return change


# issue 39, attack 9: a JobSet under the TrainJob's ownerReference unlike the plan (node: 2 pods, 1 replica)
UNLIKE = {
    "more pods in the gang's job than planned (parallelism 64)": (
        _set("parallelism", 64), "replicatedJob 'node' has parallelism 64, where Trainer's arithmetic gives 2"),
    "completions other than Trainer's": (
        _set("completions", 64), "replicatedJob 'node' has completions 64, where Trainer's arithmetic gives 2"),
    "more replicas than planned": (_set("replicas", 3), "replicatedJob 'node' has replicas 3, where"),
    "a KAI job the plan lacks": (_extra("kai-scheduler"), "replicatedJob 'sidecar-job' (pods on kai-scheduler) is not in"),
    "a job on default-scheduler the plan lacks": (
        _extra(None), "replicatedJob 'sidecar-job' (pods on default-scheduler) is not in the runtime"),
}


@pytest.mark.parametrize("change, says", UNLIKE.values(), ids=UNLIKE.keys())
def test_a_named_jobset_unlike_its_plan_gets_no_gang_and_a_jobset_mismatch_naming_the_difference(change, says):
    action = decide.with_plan(*reshaped(change), PLAN)
    assert isinstance(action, Refuse) and action.reason == "JobSetMismatch" and says in action.message, action


@pytest.mark.parametrize("change, says", UNLIKE.values(), ids=UNLIKE.keys())
def test_a_suspended_jobset_kai_fn_names_itself_unlike_its_plan_is_refused_too(change, says):
    seen, context = case()
    assert context.jobset is not None
    change(context.jobset["spec"]["replicatedJobs"])
    action = decide.with_plan(seen, context, PLAN)
    assert isinstance(action, Refuse) and action.reason == "JobSetMismatch" and says in action.message, action


@pytest.mark.parametrize("change, says", [(lambda rjs: None, None), *UNLIKE.values()],
                         ids=["like its plan", *UNLIKE.keys()])
def test_a_gang_made_before_its_jobset_is_kept_and_a_jobset_unlike_its_plan_is_told(change, says):
    seen, context = reshaped(change)
    made = state.facts(context.trainjob, context.jobset, PLAN.podgroup)
    assert decide.before_plan(made, context) == Skip("already gang-scheduled", PLAN.podgroup_name)
    told = decide.made_before_its_jobset(made, context, PLAN)
    assert (told is None) if says is None else (told is not None and told.reason == "JobSetMismatch"
                                                 and says in told.message)


def test_a_named_jobset_whose_gang_kai_fn_made_is_decided():
    job = trainjob()
    js = named(job)
    made = PLAN.podgroup
    assert state.facts(job, js, made).podgroup == PLAN.podgroup_name
    assert decide.before_plan(state.facts(job, js, made), Context(job, js, NOW, watched=True)) == Skip(
        "already gang-scheduled", PLAN.podgroup_name)


def test_a_podgroup_of_that_name_kai_fn_did_not_make_decides_nothing():
    job = trainjob()
    forged = {**PLAN.podgroup, "metadata": {**PLAN.podgroup["metadata"], "labels": {}}}
    assert state.facts(job, named(job), forged).podgroup is None


def test_a_running_undecided_jobset_is_marked_too_late():
    seen, context = case(running=True)
    action = decide.with_plan(seen, context, PLAN)
    assert isinstance(action, MarkTooLate)
    assert patched(context, action.ops)["metadata"]["annotations"] == {"kai-fn/skipped": "running"}


def test_a_jobset_without_the_runtimes_replicated_job_is_refused():
    seen, context = case()
    assert context.jobset is not None
    context.jobset["spec"]["replicatedJobs"][0]["name"] = "other"
    action = decide.with_plan(seen, context, PLAN)
    assert isinstance(action, Refuse) and action.reason == "JobSetMismatch"


@pytest.mark.parametrize("given, waits, decided, remember", [
    (dict(), None, True, True),
    (dict(suspend=True), "the TrainJob is suspended: it starts when it is resumed", True, True),
    (dict(suspend=True, labels={"kueue.x-k8s.io/queue-name": "lq"}),
     "Kueue admits it (kueue.x-k8s.io/queue-name)", True, True),
    (dict(annotations={"kai-fn/hold": "true"}), "kai-fn/hold is true", False, False),
    (dict(resume=False), "KAI_FN_RESUME is false", False, False),
    (dict(resume=False, suspend=True), "KAI_FN_RESUME is false", True, True),
], ids=["its-trainjob-runs", "suspended", "kueue", "hold", "resume-off", "resume-off-suspended"])
def test_a_suspended_jobset_admission_did_not_name_gets_its_gang_and_a_decision_and_stays_suspended(
        given, waits, decided, remember):
    seen, context = case(**given)
    action = decide.with_plan(seen, context, PLAN)
    assert isinstance(action, MakeGang)
    assert (action.waits, action.remember, action.plan, action.placeholders) == (waits, remember, PLAN, ())
    after = patched(context, action.ops)
    notes = after["metadata"].get("annotations", {})
    assert (notes.get("kai-fn/podgroup") == PLAN.podgroup_name) is decided
    assert after["spec"]["suspend"] is True and "kai-fn/released-at" not in notes
    pods = [rj["template"]["spec"]["template"]["metadata"]["annotations"] for rj in after["spec"]["replicatedJobs"]]
    assert {p.get("pod-group-name") for p in pods} == {PLAN.podgroup_name}


def test_a_jobset_that_carries_the_gang_already_has_nothing_to_patch():
    seen, context = case()
    first = decide.with_plan(seen, context, PLAN)
    assert isinstance(first, MakeGang)
    done = dataclasses.replace(context, jobset=patched(context, first.ops))
    assert decide.before_plan(state.facts(context.trainjob, done.jobset), done) == Skip("already gang-scheduled",
                                                                                        PLAN.podgroup_name)
    assert decide.gang(seen, done, PLAN) == dataclasses.replace(first, ops=())  # a patch that found it so


@pytest.mark.parametrize("precheck, queue, checked", [(True, "team-a", True), (True, None, False),
                                                      (False, "team-a", False)])
def test_the_queue_is_checked_first_only_when_asked_and_the_plan_names_one(precheck, queue, checked):
    seen, context = case(precheck=precheck)
    action = decide.with_plan(seen, context, dataclasses.replace(PLAN, queue=queue))
    assert isinstance(action, MakeGang) and action.precheck is checked
