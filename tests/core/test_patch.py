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


# -- the decision, and a caller's own ops after it (the migration's) ----------------------------------------------------

GANG = {"kai-fn/podgroup": "pg-main"}
SKIP = {"kai-fn/skipped": "out-of-scope"}
AT = {"kai-fn/released-at": "2026-12-03T06:00:00Z"}
RESUME = {"op": "replace", "path": "/spec/suspend", "value": False}
GATE = "example.com/gate"  # a label a caller's op removes
UNGATE = {"op": "remove", "path": "/metadata/labels/example.com~1gate"}

DECIDE = {
    # name: (with a plan, decision, the caller's ops, expected: suspend after, template ops)
    "a gang: templates and decision, left suspended": (True, GANG, (), True, True),
    "told to wait (kai-fn/hold): templates only": (True, None, (), True, True),
    "out of scope: skipped, templates untouched": (False, SKIP, (), True, False),
    "a caller's ops after the decision, resumed under the suspension guard": (True, {**GANG, **AT}, (UNGATE, RESUME),
                                                                               False, True),
    "a caller's resume of one let go without a gang": (False, SKIP, (UNGATE, RESUME), False, False),
}


@pytest.mark.parametrize("case", DECIDE, ids=list(DECIDE))
def test_one_guarded_patch_decides_a_suspended_jobset(case):
    with_plan, decision, extra, suspend_after, templates = DECIDE[case]
    job = trainjob()
    result = plan(*typed(job, FLAT)) if with_plan else None
    live = jobset_for(job, FLAT, suspend=True)
    live["metadata"].update(resourceVersion="7", labels={GATE: "true"})
    ops = jobset_patch(result, live, decision, list(extra))
    patched = jsonpatch.apply_patch(live, ops)
    crds.validate(patched)
    assert patched["metadata"]["labels"] == ({} if extra else {GATE: "true"})
    assert patched["spec"]["suspend"] is suspend_after
    assert (decision or {}).items() <= patched["metadata"].get("annotations", {}).items()
    template_ops = [op for op in ops if op["path"].startswith("/spec/replicatedJobs/") and op["op"] != "test"]
    assert bool(template_ops) is templates
    guards = [op for op in ops if op["op"] == "test"]
    assert guards[:2] == [{"op": "test", "path": "/metadata/uid", "value": live["metadata"]["uid"]},
                          {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}]
    assert ops[: len(guards)] == guards  # guards first: a failed one changes nothing
    # A template change or a resume needs the JobSet still suspended (JobSet's webhook; a resume happens once).
    assert ({"op": "test", "path": "/spec/suspend", "value": True} in guards) is (templates or RESUME in extra)
    assert jobset_patch(result, patched, decision) == []  # decided: the same pass again has nothing to do


def test_a_callers_ops_are_the_last_after_the_decision():
    job = trainjob()
    live = jobset_for(job, FLAT)
    live["metadata"]["labels"] = {GATE: "true"}
    ops = jobset_patch(plan(*typed(job, FLAT)), live, {**GANG, **AT}, [UNGATE, RESUME])
    assert ops[-2:] == [UNGATE, RESUME]
    assert {"op": "add", "path": "/metadata/annotations",
            "value": {"kai.scheduler/skip-podgrouper": "true", **GANG, **AT}} in ops
    assert not [op for op in jobset_patch(plan(*typed(job, FLAT)), live, GANG) if op["op"] in ("remove", "replace")]


def test_a_running_jobset_can_be_marked_without_a_suspension_guard():
    """The TooLate mark: a JobSet that was never named and runs gets ``kai-fn/skipped: running`` only."""
    job = trainjob()
    running = jobset_for(job, FLAT, suspend=False)
    ops = jobset_patch(None, running, {"kai-fn/skipped": "running"})
    assert ops == [{"op": "test", "path": "/metadata/uid", "value": running["metadata"]["uid"]},
                   {"op": "add", "path": "/metadata/annotations", "value": {"kai-fn/skipped": "running"}}]


@pytest.mark.parametrize("mutate, error", [
    # resumed meanwhile (its TrainJob's owner, an operator): the suspension guard
    (lambda js: js["spec"].__setitem__("suspend", False), "is not equal to tested value True"),
    # a caller's op that no longer applies: the label it removes is gone
    (lambda js: js["metadata"]["labels"].pop(GATE), "gate"),
], ids=["resumed-meanwhile", "label-gone"])
def test_a_stale_decision_fails_and_changes_nothing(mutate, error):
    job = trainjob()
    live = jobset_for(job, FLAT)
    live["metadata"]["labels"] = {GATE: "true"}
    ops = jobset_patch(None, live, SKIP, [UNGATE, RESUME])
    changed = copy.deepcopy(live)
    mutate(changed)
    with pytest.raises(jsonpatch.JsonPatchException, match=error):
        jsonpatch.apply_patch(changed, ops)
