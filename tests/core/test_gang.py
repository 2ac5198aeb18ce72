"""A gang's state from its PodGroup and pods: bound against the plan's minMember, counting only the pods of its own
Jobs that name it (issue 39, attack 6: forged pods and an edited minMember), members by the scheduler's own link,
and KAI's reasons as it writes them."""
from __future__ import annotations

import pytest

from kai_fn.core import gang

PG = "pg-job-1"


def podgroup(spec, api="scheduling.run.ai/v2alpha2", status=None):
    return {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": PG}, "spec": spec, "status": status or {}}


JOBS = frozenset({"job-init-0", "job-node-0"})


def pod(bound=True, subgroup=None, rj="node", group=PG, sp=False, deleting=False, job="default", owner=None):
    """A pod JobSet's Job made (controller ``job-<rj>-0``), unless ``job`` names another Job (None: no controller)
    or ``owner`` gives the whole reference."""
    meta = {"labels": {"jobset.sigs.k8s.io/replicatedjob-name": rj}, "annotations": {}}
    job = f"job-{rj}-0" if job == "default" else job
    if owner is not None:
        meta["ownerReferences"] = [owner]
    elif job is not None:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "j",
                                    "controller": True}]
    if sp:
        meta["labels"]["scheduling.x-k8s.io/pod-group"] = group
    else:
        meta["annotations"]["pod-group-name"] = group
    if subgroup:
        meta["labels"]["kai.scheduler/subgroup-name"] = subgroup
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "n1"} if bound else {}}


def planned(min_member, jobs=JOBS, name=PG):
    return gang.Planned(name, min_member, jobs)


STAGED = {"minSubGroup": 1, "subGroups": [{"name": "init", "minMember": 1}, {"name": "node", "minMember": 2}]}
SP = "scheduling.x-k8s.io/v1alpha1"
NOT_CONTROLLER = {"apiVersion": "batch/v1", "kind": "Job", "name": "job-node-0", "uid": "j"}
A_JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "job-node-0", "uid": "j",
            "controller": True}

# (the PodGroup's spec as it is now, the plan's minMember, the pods, bound?)
BOUND = {
    "flat, the plan's minMember on nodes": ({"minMember": 2}, planned(2), [pod(), pod()], True),
    "flat, one short": ({"minMember": 2}, planned(2), [pod(), pod(bound=False)], False),
    "flat, more pods than minMember": ({"minMember": 2}, planned(2), [pod(), pod(), pod(bound=False)], True),
    "a pod being deleted does not count": ({"minMember": 2}, planned(2), [pod(), pod(deleting=True)], False),
    "a pod of another gang does not count": ({"minMember": 2}, planned(2), [pod(), pod(group="pg-other")], False),
    "the stages' pods together": (STAGED, planned(3), [pod(rj="init", subgroup="init"), pod(subgroup="node"),
                                                        pod(subgroup="node")], True),
    "one subgroup placed is not the gang": (STAGED, planned(3), [pod(rj="init", subgroup="init"),
                                                                 pod(subgroup="node")], False),
    "no plan: never bound": ({"minMember": 1}, None, [pod(), pod()], False),
    "a plan of another PodGroup: never bound": ({"minMember": 1}, planned(1, name="pg-other"), [pod()], False),
    # issue 39, attack 6: a tenant's pods with nodeName, the gang's labels and pod-group-name
    "forged: no ownerReference": ({"minMember": 2}, planned(2), [pod(), pod(job=None)], False),
    "forged: a Job the plan does not make": ({"minMember": 2}, planned(2), [pod(), pod(job="job-node-7")], False),
    "forged: a Job of another JobSet": ({"minMember": 2}, planned(2), [pod(), pod(job="other-node-0")], False),
    "forged: the Job named, not as controller": ({"minMember": 2}, planned(2), [pod(), pod(owner=NOT_CONTROLLER)],
                                                False),
    "forged: a controller of the Job's name, not a Job": ({"minMember": 2}, planned(2),
                                                          [pod(), pod(owner=A_JOBSET)], False),
    "forged: the gang's labels, another pod-group-name": ({"minMember": 2}, planned(2),
                                                          [pod(), pod(group="pg-forged")], False),
    "the PodGroup's minMember edited down to 1": ({"minMember": 1}, planned(4), [pod()], False),
    "the PodGroup's subgroups edited down": ({"subGroups": [{"name": "node", "minMember": 1}]}, planned(4),
                                             [pod(subgroup="node")], False),
}


@pytest.mark.parametrize("spec, plan, pods, bound", BOUND.values(), ids=list(BOUND))
def test_a_gang_is_bound_when_the_plans_min_member_pods_of_its_own_jobs_are_on_nodes(spec, plan, pods, bound):
    assert gang.judge(plan, podgroup(spec), pods).bound is bound


def test_scheduler_plugins_members_are_found_by_their_pod_group_label():
    counted = gang.judge(planned(2), podgroup({"minMember": 2}, api=SP), [pod(sp=True), pod(sp=True), pod()])
    assert counted.bound and counted.bound_pods == 2


def test_the_summary_counts_against_the_plan_and_names_subgroups_when_there_are_some():
    assert gang.judge(planned(4), podgroup({"minMember": 1}), [pod()] * 3).summary() == "3 of minMember 4 pods bound"
    assert gang.judge(planned(3), podgroup(STAGED), [pod(rj="init", subgroup="init")]).summary() == \
        "init 1/1, node 0/2 pods bound"


def test_pods_per_replicated_job_split_bound_and_waiting():
    pods = [pod(rj="init"), pod(rj="node"), pod(rj="node", bound=False), pod(rj="node", deleting=True)]
    assert gang.per_replicated_job(pods) == {"init": (1, 0), "node": (1, 1)}


REASONS = {
    "reasons with a queue": (
        [{"type": "UnschedulableOnNodePool", "reasons": [
            {"reason": "OverLimit", "message": "gpu over", "details": {"queueDetails": {"name": "q"}}}]}],
        "OverLimit (queue q): gpu over."),
    "the queue already in the message is not repeated": (
        [{"reasons": [{"reason": "OverLimit", "message": "queue q: gpu over",
                       "details": {"queueDetails": {"name": "q"}}}]}], "OverLimit: queue q: gpu over."),
    "the deprecated reason and message when no reasons": (
        [{"reason": "Unschedulable", "message": "no nodes"}], "Unschedulable: no nodes."),
    "duplicates across node pools once": (
        [{"nodePool": "a", "reasons": [{"reason": "X", "message": "m"}]},
         {"nodePool": "b", "reasons": [{"reason": "X", "message": "m"}]}], "X: m."),
    "each reason a sentence of its own": (
        [{"reasons": [{"reason": "X", "message": "m"}, {"reason": "Y", "message": "n."}, {"reason": "Z"}]}],
        "X: m. Y: n. Z."),
    "no conditions": ([], ""),
    "junk entries are skipped": ([5, {"reasons": ["x", {"reason": "Y"}]}], "Y."),
}


@pytest.mark.parametrize("conditions, text", REASONS.values(), ids=list(REASONS))
def test_kais_reasons_read_as_kai_writes_them(conditions, text):
    assert gang.describe(gang.unschedulable(podgroup({}, status={"schedulingConditions": conditions}))) == text


# As KAI v0.17.0 wrote them on the chain (tests/chain): a queue at its GPU limit, and a gang of 2 x 8 GPUs on 3 full
# nodes of a pool (4 more nodes outside its nodeSelector). A reason's message has no final stop; the deprecated
# message and the pods' PodScheduled message join per-node findings with ". \n" and may end "..".
OVER_LIMIT = {
    "lastTransitionTime": "2026-12-03T19:56:43Z", "nodePool": "default", "reason": "Unschedulable", "status": "True",
    "transitionID": "1", "type": "UnschedulableOnNodePool",
    "message": "OverLimit: team-a quota has reached the allowable limit of GPUs. Limit is 24 GPUs, currently 24 GPUs "
               "allocated and workload requested 8 GPUs.",
    "reasons": [{"reason": "OverLimit", "details": {"queueDetails": {"name": "team-a", "queueResourceLimits": {
                     "cpu": "-1m", "memory": "-1", "nvidia.com/gpu": "24"}}},
                 "message": "team-a quota has reached the allowable limit of GPUs. Limit is 24 GPUs, currently 24 "
                            "GPUs allocated and workload requested 8 GPUs"}]}
NO_NODES = {
    "nodePool": "default", "reason": "Unschedulable", "status": "True", "type": "UnschedulableOnNodePool",
    "message": "PodSchedulingErrors: Resources were found for 0 pods while 2 are required for gang scheduling. "
               "Additional pods cannot be scheduled due to: no nodes with enough resources were found: 3 node(s) "
               "didn't have enough resources: GPUs. \n4 node(s) didn't match Pod's node affinity/selector..",
    "reasons": [{"reason": "PodSchedulingErrors",
                 "message": "Resources were found for 0 pods while 2 are required for gang scheduling. Additional "
                            "pods cannot be scheduled due to: no nodes with enough resources were found: 3 node(s) "
                            "didn't have enough resources: GPUs. \n4 node(s) didn't match Pod's node "
                            "affinity/selector."}]}


def test_kais_real_messages_read_as_whole_sentences_on_one_line():
    text = gang.describe(gang.unschedulable(podgroup({}, status={"schedulingConditions": [OVER_LIMIT, NO_NODES]})))
    assert text == (
        "OverLimit: team-a quota has reached the allowable limit of GPUs. Limit is 24 GPUs, currently 24 GPUs "
        "allocated and workload requested 8 GPUs. PodSchedulingErrors: Resources were found for 0 pods while 2 are "
        "required for gang scheduling. Additional pods cannot be scheduled due to: no nodes with enough resources "
        "were found: 3 node(s) didn't have enough resources: GPUs. 4 node(s) didn't match Pod's node "
        "affinity/selector.")


SENTENCES = {
    "a final stop added": ("requested 8 GPUs", "requested 8 GPUs."),
    "lines joined by KAI become one line": ("GPUs. \n4 node(s) didn't match.", "GPUs. 4 node(s) didn't match."),
    "a line without a stop ends its sentence": ("requested 8 GPUs\nNo nodes", "requested 8 GPUs. No nodes."),
    "a doubled stop once": ("selector..", "selector."),
    "an ellipsis kept": ("and more...", "and more..."),
    "runs of spaces as one": ("  a   b \r\n\n c ", "a b. c."),
    "nothing": (None, ""),
}


@pytest.mark.parametrize("message, text", SENTENCES.values(), ids=list(SENTENCES))
def test_a_kai_message_becomes_one_line_of_sentences(message, text):
    assert gang.sentences(message) == text


REQUESTED = {"cpu": "2", "nvidia.com/gpu": "2"}
SAID_NOTHING = {"resourcesStatus": {"requested": REQUESTED}}
NOTHING_TO_TELL = {
    "KAI counted the pods and placed none, no reason": (SAID_NOTHING, {}, True),
    "KAI's zero quantities count as nothing placed": (
        {"resourcesStatus": {"requested": REQUESTED, "allocated": {"cpu": "0", "nvidia.com/gpu": "0m"}}}, {}, True),
    "a pod placed: a look counts the gang": (
        {"resourcesStatus": {"requested": REQUESTED, "allocated": {"nvidia.com/gpu": "1"}}}, {}, False),
    "KAI's reasons: a look reports them": (
        {"resourcesStatus": {"requested": REQUESTED}, "schedulingConditions": [{"reasons": [{"reason": "X"}]}]}, {},
        False),
    "no status at all (not KAI's, or not yet): looked at": ({}, {}, False),
    "nothing requested yet: looked at": ({"resourcesStatus": {}}, {}, False),
    "a spec edited since it was made: looked at (PodGroupEdited)": (SAID_NOTHING, {"generation": 2}, False),
    "generation unknown: looked at": (SAID_NOTHING, {"generation": None}, False),
    "places held for a later wave: looked at (its hand-over)": (
        SAID_NOTHING, {"annotations": {"kai-fn/reserves": "launcher"}}, False),
    "an allocation KAI could not have written: looked at": (
        {"resourcesStatus": {"requested": REQUESTED, "allocated": {"cpu": "lots"}}}, {}, False),
}


@pytest.mark.parametrize("status, meta, quiet", NOTHING_TO_TELL.values(), ids=list(NOTHING_TO_TELL))
def test_a_look_is_skipped_only_while_kai_has_placed_nothing_and_given_no_reason(status, meta, quiet):
    pg = podgroup({"minMember": 2}, status=status)
    pg["metadata"] |= {"generation": 1} | meta
    assert gang.nothing_to_tell(pg) is quiet
