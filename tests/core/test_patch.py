"""The JobSet JSON Patch: guarded, minimal, schema-valid once applied, and a no-op the second time."""
from __future__ import annotations

import copy

import jsonpatch
import pytest

from kai_fn.core.patch import MissingReplicatedJob, escape, jobset_patch
from kai_fn.core.plan import plan
from tests import crds
from tests.builders import jobset_for, rjob, runtime, trainjob, typed

STAGED = runtime(rjob("dataset-initializer", ancestor="dataset-initializer"),
                 rjob("node", depends_on=["dataset-initializer"]), ml_policy={"numNodes": 2, "torch": {}})
FLAT = runtime(ml_policy={"numNodes": 2, "torch": {}})


@pytest.mark.parametrize("rt", [FLAT, STAGED], ids=["flat", "staged"])  # scheduler-plugins gangs only "node" of STAGED
@pytest.mark.parametrize("flavor", ["kai", "scheduler-plugins"])
def test_patched_jobset_carries_the_plan_fits_the_crd_and_keeps_everything_else(rt, flavor):
    job = trainjob()
    result = plan(*typed(job, rt), flavor=flavor)
    live = jobset_for(job, rt)
    crds.validate(live)
    ops = jobset_patch(result, live)
    patched = jsonpatch.apply_patch(live, ops)
    crds.validate(patched)
    by_name = {rj["name"]: rj["template"]["spec"]["template"].get("metadata", {})
               for rj in patched["spec"]["replicatedJobs"]}
    for change in result.pod_templates:
        meta = by_name.pop(change.replicated_job)
        assert change.labels.items() <= meta["labels"].items()
        assert change.annotations.items() <= meta.get("annotations", {}).items()
    assert all(not meta for meta in by_name.values())  # a stage outside the gang is left as it was
    assert result.jobset_annotations.items() <= patched["metadata"].get("annotations", {}).items()
    # Nothing but the added metadata changed: strip it and the original comes back.
    for rj, original in zip(patched["spec"]["replicatedJobs"], live["spec"]["replicatedJobs"], strict=True):
        assert rj["template"]["spec"]["template"]["spec"] == original["template"]["spec"]["template"]["spec"]
        assert rj["template"]["metadata"] == original["template"]["metadata"]
    assert patched["spec"]["suspend"] is True
    assert {k: v for k, v in patched["metadata"].items() if k != "annotations"} == live["metadata"]
    assert jobset_patch(result, patched) == [] and ops != []
    assert jsonpatch.apply_patch(patched, ops) == patched  # applying the same patch twice is a no-op


def test_patch_guards_uid_suspension_and_every_index_it_touches():
    job = trainjob()
    live = jobset_for(job, STAGED)
    ops = jobset_patch(plan(*typed(job, STAGED)), live)
    tests_ops = [op for op in ops if op["op"] == "test"]
    assert tests_ops == [
        {"op": "test", "path": "/metadata/uid", "value": live["metadata"]["uid"]},
        {"op": "test", "path": "/spec/suspend", "value": True},
        {"op": "test", "path": "/spec/replicatedJobs/0/name", "value": "dataset-initializer"},
        {"op": "test", "path": "/spec/replicatedJobs/1/name", "value": "node"},
    ]
    assert ops[: len(tests_ops)] == tests_ops  # guards come first, so a failed one changes nothing


@pytest.mark.parametrize("mutate, why, guard", [
    (lambda js: js["spec"].__setitem__("suspend", False), "resumed meanwhile",
     r"^False \(<class 'bool'>\) is not equal to tested value True "),
    (lambda js: js["spec"]["replicatedJobs"].reverse(), "reordered",
     r"^node \(<class 'str'>\) is not equal to tested value dataset-initializer "),
    (lambda js: js["metadata"].__setitem__("uid", "another-jobset"), "replaced by a new JobSet of the same name",
     r"^another-jobset \(<class 'str'>\) is not equal to tested value 99999999-"),
])
def test_a_stale_patch_fails_its_guards_and_changes_nothing(mutate, why, guard):
    job = trainjob()
    live = jobset_for(job, STAGED)
    ops = jobset_patch(plan(*typed(job, STAGED)), live)
    changed = copy.deepcopy(live)
    mutate(changed)
    with pytest.raises(jsonpatch.JsonPatchTestFailed, match=guard):
        jsonpatch.apply_patch(changed, ops)


def test_keys_with_slashes_are_escaped_and_existing_maps_are_extended_not_replaced():
    job = trainjob()
    live = jobset_for(job, FLAT)
    pod_meta = live["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod_meta["metadata"] = {"labels": {"team": "vision"}, "annotations": {"owner": "alice"}}
    live["metadata"]["annotations"] = {"keep": "me"}
    ops = jobset_patch(plan(*typed(job, FLAT)), live)
    assert {"op": "add", "path": "/metadata/annotations/kai.scheduler~1skip-podgrouper", "value": "true"} in ops
    assert {"op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/metadata/labels/kai.scheduler~1queue",
            "value": "rt-queue"} in ops
    patched = jsonpatch.apply_patch(live, ops)
    meta = patched["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
    assert meta["labels"]["team"] == "vision" and meta["annotations"]["owner"] == "alice"
    assert patched["metadata"]["annotations"]["keep"] == "me"


def test_a_wrong_value_is_corrected_in_place():
    job = trainjob(labels={"kai.scheduler/queue": "new-q"})
    live = jobset_for(job, FLAT)
    live["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {"labels": {"kai.scheduler/queue": "old"}}
    ops = jobset_patch(plan(*typed(job, FLAT)), live)
    assert jsonpatch.apply_patch(live, ops)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"][
        "labels"]["kai.scheduler/queue"] == "new-q"


def test_a_jobset_without_the_runtimes_replicated_job_is_not_patched():
    job = trainjob()
    live = jobset_for(job, FLAT)
    live["spec"]["replicatedJobs"][0]["name"] = "something-else"
    result = plan(*typed(job, FLAT))
    with pytest.raises(MissingReplicatedJob, match="^node$"):
        jobset_patch(result, live)


@pytest.mark.parametrize("key, escaped", [("a/b", "a~1b"), ("a~b", "a~0b"), ("~/", "~0~1"), ("plain", "plain")])
def test_json_pointer_escaping(key, escaped):
    assert escape(key) == escaped


def test_a_patch_read_at_one_resource_version_fails_on_a_newer_one():
    """Another writer's map created between the read and the patch must not be replaced by an 'add'."""
    job = trainjob()
    live = jobset_for(job, FLAT)
    live["metadata"]["resourceVersion"] = "41"
    ops = jobset_patch(plan(*typed(job, FLAT)), live)
    assert {"op": "test", "path": "/metadata/resourceVersion", "value": "41"} in ops
    newer = copy.deepcopy(live)
    newer["metadata"].update(resourceVersion="42", annotations={"example.com/late": "kept"})
    with pytest.raises(jsonpatch.JsonPatchTestFailed, match=r"^42 \(<class 'str'>\) is not equal to tested value 41 "):
        jsonpatch.apply_patch(newer, ops)


# -- the decision and the resume (the gate on the JobSet) -----------------------------------------------------------

GANG = {"kai-fn/podgroup": "pg-main"}
SKIP = {"kai-fn/skipped": "out-of-scope"}
AT = {"kai-fn/released-at": "2026-12-03T06:00:00Z"}
HELD = "kai-fn/held"

DECIDE = {
    # name: (with a plan, held, suspended, decision, resume,
    #        expected: labels after, suspend after, the decision's keys after, template ops)
    "a gang that may start: decided, let go and resumed in one patch": (
        True, True, True, {**GANG, **AT}, True, {}, False, True),
    "a gang whose TrainJob is suspended: decided and let go, left suspended": (
        True, True, True, GANG, False, {}, True, True),
    "told to wait (kai-fn/hold): templates only, still held": (True, True, True, None, False, {HELD: "true"}, True, True),
    "out of scope: skipped, let go and resumed, templates untouched": (
        False, True, True, {**SKIP}, True, {}, False, False),
    "a legacy JobSet (never held): decided, no label to remove": (True, False, True, {**GANG, **AT}, True, {}, False, True),
}


@pytest.mark.parametrize("case", DECIDE, ids=list(DECIDE))
def test_one_patch_decides_a_held_jobset(case):
    with_plan, held, suspended, decision, resume, labels, suspend_after, templates = DECIDE[case]
    job = trainjob()
    result = plan(*typed(job, FLAT)) if with_plan else None
    live = jobset_for(job, FLAT, suspend=suspended, held=held)
    live["metadata"]["resourceVersion"] = "7"
    ops = jobset_patch(result, live, decision, resume)
    patched = jsonpatch.apply_patch(live, ops)
    crds.validate(patched)
    assert patched["metadata"].get("labels", {}) == labels
    assert patched["spec"]["suspend"] is suspend_after
    assert (decision or {}).items() <= patched["metadata"].get("annotations", {}).items()
    template_ops = [op for op in ops if op["path"].startswith("/spec/replicatedJobs/") and op["op"] != "test"]
    assert bool(template_ops) is templates
    guards = [op for op in ops if op["op"] == "test"]
    assert guards[:2] == [{"op": "test", "path": "/metadata/uid", "value": live["metadata"]["uid"]},
                          {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}]
    assert ops[: len(guards)] == guards  # guards first: a failed one changes nothing
    # A template change or a resume needs the JobSet still suspended (JobSet's webhook; a resume happens once).
    assert ({"op": "test", "path": "/spec/suspend", "value": True} in guards) is (templates or resume)
    assert jobset_patch(result, patched, decision, resume) == []  # decided: the same pass again has nothing to do


def test_the_decision_and_the_resume_are_the_last_ops_and_only_a_held_jobset_loses_its_label():
    job = trainjob()
    live = jobset_for(job, FLAT, held=True)
    ops = jobset_patch(plan(*typed(job, FLAT)), live, {**GANG, **AT}, resume=True)
    assert ops[-2:] == [{"op": "remove", "path": "/metadata/labels/kai-fn~1held"},
                        {"op": "replace", "path": "/spec/suspend", "value": False}]
    assert {"op": "add", "path": "/metadata/annotations",
            "value": {"kai.scheduler/skip-podgrouper": "true", **GANG, **AT}} in ops
    unheld = jobset_for(job, FLAT)
    assert not [op for op in jobset_patch(plan(*typed(job, FLAT)), unheld, GANG) if op["op"] == "remove"]


def test_a_running_jobset_can_be_marked_without_a_suspension_guard():
    """The TooLate mark: a JobSet that was never held and runs gets ``kai-fn/skipped: running`` only."""
    job = trainjob()
    running = jobset_for(job, FLAT, suspend=False)
    ops = jobset_patch(None, running, {"kai-fn/skipped": "running"})
    assert ops == [{"op": "test", "path": "/metadata/uid", "value": running["metadata"]["uid"]},
                   {"op": "add", "path": "/metadata/annotations", "value": {"kai-fn/skipped": "running"}}]
    assert jobset_patch(None, running, {"kai-fn/skipped": "running"}, resume=True) == ops  # nothing to resume


@pytest.mark.parametrize("mutate, error", [
    # resumed meanwhile (its TrainJob's owner, an operator): the suspension guard
    (lambda js: js["spec"].__setitem__("suspend", False), "is not equal to tested value True"),
    # decided meanwhile by another pass: the label's removal
    (lambda js: js["metadata"]["labels"].pop(HELD), "held"),
], ids=["resumed-meanwhile", "label-gone"])
def test_a_stale_decision_fails_and_changes_nothing(mutate, error):
    job = trainjob()
    live = jobset_for(job, FLAT, held=True)
    ops = jobset_patch(None, live, SKIP, resume=True)
    changed = copy.deepcopy(live)
    mutate(changed)
    with pytest.raises(jsonpatch.JsonPatchException, match=error):
        jsonpatch.apply_patch(changed, ops)
