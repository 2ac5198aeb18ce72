"""A tenant's forgeries of its own gang, through the real function server and the API emulator (issue 39).

Attack 6: the tenant lowers kai_fn's PodGroup to ``minMember: 1`` (the real API server refuses that edit:
tests/testbed/test_podgroup_spec_policy.py) and makes pods with ``nodeName``, the JobSet's labels and the gang's
``pod-group-name``: bound without any scheduler. kai_fn counts only pods its Jobs control against its plan, so it
posts no ``GangBound``, writes no ``kai-fn/bound``, and the schedule timeout still fires.

Attack 9: a JobSet under the TrainJob's ownerReference, named at admission, whose ``node`` job runs 64 pods where the
plan has 4, beside a replicatedJob on ``default-scheduler``: kai_fn makes no PodGroup and posts ``JobSetMismatch``.

The edit itself is told (``PodGroupEdited``), never put back: docs/how-it-decides.md, "Bound", says why.
"""
from __future__ import annotations

import pytest

from kai_fn.core import keys
from tests.builders import job_owner, named_jobset_for
from tests.ce import ping, resource, send
from tests.conftest import KAI_PG, TRAINER, sample_object, seed
from tests.function import test_timeout_on_resync as timeouts
from tests.function.test_timeout_on_resync import NAME, NS, jobset_runs, kai_says, released_llama, write
from tests.function.test_timeout_on_resync import fresh_uids  # noqa: F401  (autouse: each test its own uids)


def forged_pod(i: int, owner: list[dict] | None, podgroup: str) -> dict:
    """A tenant's pod, bound by its own ``nodeName``, with everything of the gang's a pod's creator may write."""
    meta = {"name": f"forged-{i}", "namespace": NS, "annotations": {keys.KAI_POD_GROUP_ANNOTATION: podgroup},
            "labels": {keys.JOBSET_NAME_LABEL: NAME, keys.REPLICATED_JOB_LABEL: "node"}}
    if owner is not None:
        meta["ownerReferences"] = owner
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": f"gpu-{i}", "containers": [{"name": "node", "image": "pytorch"}]}}


def events(api, reason):
    return [e for e in api.list("v1", "Event", NS) if e.get("reason") == reason]


def test_a_tenants_pods_on_nodes_under_a_min_member_edited_to_one_post_no_gang_bound_and_the_timeout_fires(
        api, function):
    released_llama(api, function.url, runtime_timeout=60)
    pg_name = timeouts.PG
    jobset_runs(api, 61)
    kai_says(api)
    pg = api.get(KAI_PG, "PodGroup", NS, pg_name)
    pg["spec"]["minMember"] = 1  # the tenant's edit, which the emulator runs no admission to refuse
    write(api, pg)
    seed(api, forged_pod(0, None, pg_name),  # no controller at all
         forged_pod(1, job_owner(NAME, "node", 7), pg_name),  # a Job the plan's replicatedJobs never make
         forged_pod(2, job_owner("other", "node"), pg_name))  # a Job of another JobSet
    answer = send(function.url, resource(api.get(KAI_PG, "PodGroup", NS, pg_name), "update"))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "blocked")  # GangUnschedulable, KAI says why
    assert events(api, "GangBound") == []
    assert keys.GANG_BOUND_ANNOTATION not in api.get(KAI_PG, "PodGroup", NS, pg_name)["metadata"]["annotations"]
    (edited,) = events(api, "PodGroupEdited")  # told, not put back (docs/how-it-decides.md, "Bound")
    assert f"PodGroup {pg_name}: spec.minMember is 1, not 4" in edited["message"]
    assert api.get(KAI_PG, "PodGroup", NS, pg_name)["spec"]["minMember"] == 1

    assert send(function.url, ping()).status == 200  # the resync: the gang-status sweep, then the timeout
    (warning,) = events(api, "ScheduleTimeout")
    assert f"PodGroup {pg_name} is not bound 60s after the wait began" in warning["message"]
    notes = api.get(KAI_PG, "PodGroup", NS, pg_name)["metadata"]["annotations"]
    assert keys.TIMED_OUT_ANNOTATION in notes and keys.GANG_BOUND_ANNOTATION not in notes
    assert events(api, "GangBound") == []


@pytest.mark.usefixtures("forgetful")
@pytest.mark.parametrize("trigger", ["the TrainJob's add", "the named JobSet's add"])
def test_a_named_jobset_of_64_pods_where_the_plan_has_4_and_a_default_scheduler_job_gets_no_podgroup(
        api, function, trigger):
    tj, runtime = sample_object("trainjob-llama-finetune"), sample_object("clustertrainingruntime-torch-kai")
    js = named_jobset_for(tj, runtime)
    node = js["spec"]["replicatedJobs"][0]
    node["template"]["spec"]["parallelism"] = node["template"]["spec"]["completions"] = 64
    js["spec"]["replicatedJobs"].append({"name": "side", "replicas": 1, "template": {"spec": {
        "parallelism": 60, "completions": 60,
        "template": {"spec": {"containers": [{"name": "side", "image": "pytorch"}]}}}}})
    seed(api, sample_object("queue-team-a"), runtime, tj, js)
    event = resource(api.get(TRAINER, "TrainJob", NS, NAME)) if trigger == "the TrainJob's add" else resource(js)
    answer = send(function.url, event)
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "blocked")
    (warning,) = events(api, "JobSetMismatch")
    assert "replicatedJob 'node' has parallelism 64, where Trainer's arithmetic gives 4" in warning["message"]
    assert "replicatedJob 'side' (pods on default-scheduler) is not in the runtime" in warning["message"]
    assert api.list(KAI_PG, "PodGroup", NS) == []


@pytest.mark.usefixtures("forgetful")
def test_a_gang_made_before_its_jobset_is_kept_and_a_jobset_unlike_its_plan_seen_later_gets_one_warning(
        api, function):
    tj, runtime = sample_object("trainjob-llama-finetune"), sample_object("clustertrainingruntime-torch-kai")
    seed(api, sample_object("queue-team-a"), runtime, tj)
    assert send(function.url, resource(api.get(TRAINER, "TrainJob", NS, NAME))).headers["X-Kai-Fn-Outcome"] == "done"
    js = named_jobset_for(tj, runtime)
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 64
    seed(api, js)
    answer = send(function.url, resource(js))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "skipped")  # the gang stays, as made
    (warning,) = events(api, "JobSetMismatch")
    assert "replicatedJob 'node' has parallelism 64, where Trainer's arithmetic gives 4" in warning["message"]
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    assert pg["spec"]["minMember"] == 4
    api.reset_calls()
    assert send(function.url, resource(js, "update")).headers["X-Kai-Fn-Outcome"] == "skipped"
    assert api.writes() == []  # told once: this process remembers the JobSet
