"""A gang's state from its PodGroup and pods: bound per leaf subgroup, members by the scheduler's own link, and
KAI's reasons as it writes them."""
from __future__ import annotations

import pytest

from kai_fn.core import gang

PG = "pg-job-1"


def podgroup(spec, api="scheduling.run.ai/v2alpha2", status=None):
    return {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": PG}, "spec": spec, "status": status or {}}


def pod(bound=True, subgroup=None, rj="node", group=PG, sp=False, deleting=False):
    meta = {"labels": {"jobset.sigs.k8s.io/replicatedjob-name": rj}, "annotations": {}}
    if sp:
        meta["labels"]["scheduling.x-k8s.io/pod-group"] = group
    else:
        meta["annotations"]["pod-group-name"] = group
    if subgroup:
        meta["labels"]["kai.scheduler/subgroup-name"] = subgroup
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "n1"} if bound else {}}


STAGED = {"minSubGroup": 1, "subGroups": [{"name": "init", "minMember": 1}, {"name": "node", "minMember": 2}]}
SP = "scheduling.x-k8s.io/v1alpha1"

BOUND = {
    "flat, all minMember on nodes": ({"minMember": 2}, [pod(), pod()], True),
    "flat, one short": ({"minMember": 2}, [pod(), pod(bound=False)], False),
    "flat, more pods than minMember": ({"minMember": 2}, [pod(), pod(), pod(bound=False)], True),
    "a pod being deleted does not count": ({"minMember": 2}, [pod(), pod(deleting=True)], False),
    "a pod of another gang does not count": ({"minMember": 2}, [pod(), pod(group="pg-other")], False),
    "staged, every subgroup at its minMember": (STAGED, [pod(subgroup="init"), pod(subgroup="node"),
                                                         pod(subgroup="node")], True),
    "staged, one subgroup short": (STAGED, [pod(subgroup="init"), pod(subgroup="node")], False),
    "minMember 0 needs one pod": ({"minMember": 0}, [], False),
    "nested subgroups: only leaves count": (
        {"subGroups": [{"name": "all"}, {"name": "a", "parent": "all", "minMember": 1},
                       {"name": "b", "parent": "all", "minMember": 1}]},
        [pod(subgroup="a"), pod(subgroup="b")], True),
}


@pytest.mark.parametrize("spec, pods, bound", BOUND.values(), ids=list(BOUND))
def test_a_gang_is_bound_when_each_leaf_has_its_min_member_on_nodes(spec, pods, bound):
    assert gang.count(podgroup(spec), pods).bound is bound


def test_scheduler_plugins_members_are_found_by_their_pod_group_label():
    counted = gang.count(podgroup({"minMember": 2}, api=SP), [pod(sp=True), pod(sp=True), pod()])
    assert counted.bound and counted.bound_pods == 2


def test_the_summary_names_subgroups_when_there_are_some():
    assert gang.count(podgroup({"minMember": 4}), [pod()] * 3).summary() == "3 of minMember 4 pods bound"
    assert gang.count(podgroup(STAGED), [pod(subgroup="init")]).summary() == "init 1/1, node 0/2 pods bound"


def test_pods_per_replicated_job_split_bound_and_waiting():
    pods = [pod(rj="init"), pod(rj="node"), pod(rj="node", bound=False), pod(rj="node", deleting=True)]
    assert gang.per_replicated_job(pods) == {"init": (1, 0), "node": (1, 1)}


REASONS = {
    "reasons with a queue": (
        [{"type": "UnschedulableOnNodePool", "reasons": [
            {"reason": "OverLimit", "message": "gpu over", "details": {"queueDetails": {"name": "q"}}}]}],
        "OverLimit (queue q): gpu over"),
    "the queue already in the message is not repeated": (
        [{"reasons": [{"reason": "OverLimit", "message": "queue q: gpu over",
                       "details": {"queueDetails": {"name": "q"}}}]}], "OverLimit: queue q: gpu over"),
    "the deprecated reason and message when no reasons": (
        [{"reason": "Unschedulable", "message": "no nodes"}], "Unschedulable: no nodes"),
    "duplicates across node pools once": (
        [{"nodePool": "a", "reasons": [{"reason": "X", "message": "m"}]},
         {"nodePool": "b", "reasons": [{"reason": "X", "message": "m"}]}], "X: m"),
    "no conditions": ([], ""),
    "junk entries are skipped": ([5, {"reasons": ["x", {"reason": "Y"}]}], "Y"),
}


@pytest.mark.parametrize("conditions, text", REASONS.values(), ids=list(REASONS))
def test_kais_reasons_read_as_kai_writes_them(conditions, text):
    assert gang.describe(gang.unschedulable(podgroup({}, status={"schedulingConditions": conditions}))) == text
