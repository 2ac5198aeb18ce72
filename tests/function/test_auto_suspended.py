"""TrainJobs the admission policy suspended (``kai-fn/auto-suspended``): kai_fn owes each of them a release.

In scope: the gang flow, then released. Out of scope: released at once, without a gang, and marked so later events
cost nothing. Runtime missing or plan blocked: left suspended with the Warning Event, and released by the next
change or resync once that is fixed. TrainJobs their authors suspended keep the old rules.
"""
from __future__ import annotations

import pytest

from tests import crds
from tests.ce import ping, resource, send
from tests.conftest import KAI_PG, TRAINER, sample_object, seed

NS = "team-a"
AUTO = {"kai-fn/auto-suspended": "true"}


def auto_suspended(name: str) -> dict:
    """A sample TrainJob as the policy leaves it: suspended and annotated."""
    tj = sample_object(name)
    tj["metadata"].setdefault("annotations", {}).update(AUTO)
    tj["spec"]["suspend"] = True
    return tj


def live(api, name: str) -> dict:
    return api.get(TRAINER, "TrainJob", NS, name)


def writes(api) -> list[tuple[str, str]]:
    """Writes but the resync's heartbeat (tests/function/test_heartbeat.py)."""
    return [(c.verb, c.resource) for c in api.writes() if c.resource != "leases"]


def warnings(api, reason: str) -> list[dict]:
    return [e for e in api.list("v1", "Event", NS) if e["reason"] == reason and e["type"] == "Warning"]


def test_in_scope_it_gets_its_gang_and_is_released(api, function):
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         auto_suspended("trainjob-llama-finetune"), sample_object("jobset-llama-finetune"))
    assert send(function.url, resource(live(api, "llama-finetune"))).status == 200
    tj = live(api, "llama-finetune")
    assert tj["spec"]["suspend"] is False and "kai-fn/podgroup" in tj["metadata"]["annotations"]
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    crds.validate(pg)
    assert writes(api) == [("create", "podgroups"), ("patch", "jobsets"), ("patch", "trainjobs"), ("create", "events")]


def test_out_of_scope_it_is_released_without_a_gang_and_later_events_cost_nothing(api, function):
    seed(api, sample_object("clustertrainingruntime-torch"), auto_suspended("trainjob-resnet-eval"))
    answer = send(function.url, resource(live(api, "resnet-eval")))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "done")
    tj = live(api, "resnet-eval")
    assert tj["spec"]["suspend"] is False
    assert tj["metadata"]["annotations"]["kai-fn/skipped"] == "out-of-scope"
    assert writes(api) == [("patch", "trainjobs")]
    crds.validate(tj)
    api.reset_calls()
    assert send(function.url, resource(tj, "update")).status == 200
    assert api.calls == []


def test_suspended_by_its_author_and_out_of_scope_it_stays_suspended(api, function):
    seed(api, sample_object("clustertrainingruntime-torch"), sample_object("trainjob-resnet-eval"))
    assert send(function.url, resource(live(api, "resnet-eval"))).status == 200
    assert writes(api) == [] and live(api, "resnet-eval")["spec"]["suspend"] is True


@pytest.mark.parametrize("annotation,label", [({"kai-fn/hold": "true"}, {}), ({}, {"kueue.x-k8s.io/queue-name": "lq"})],
                         ids=["held", "kueue"])
def test_out_of_scope_but_held_it_stays_suspended(api, function, annotation, label):
    tj = auto_suspended("trainjob-resnet-eval")
    tj["metadata"]["annotations"].update(annotation)
    tj["metadata"].setdefault("labels", {}).update(label)
    seed(api, sample_object("clustertrainingruntime-torch"), tj)
    assert send(function.url, resource(live(api, "resnet-eval"))).status == 200
    assert writes(api) == [] and live(api, "resnet-eval")["spec"]["suspend"] is True


def _runtime_missing(api):
    seed(api, sample_object("queue-team-a"), auto_suspended("trainjob-llama-finetune"),
         sample_object("jobset-llama-finetune"))
    return "RuntimeNotFound", lambda: seed(api, sample_object("clustertrainingruntime-torch-kai"))


def _plan_blocked(api):
    rt = sample_object("clustertrainingruntime-torch-kai")
    pod = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    del pod["schedulerName"]
    seed(api, sample_object("queue-team-a"), rt, auto_suspended("trainjob-llama-finetune"),
         sample_object("jobset-llama-finetune"))
    return "PlanBlocked", lambda: seed(api, sample_object("clustertrainingruntime-torch-kai"))


@pytest.mark.parametrize("setup", [_runtime_missing, _plan_blocked], ids=["runtime-missing", "plan-blocked"])
def test_blocked_it_waits_suspended_with_a_warning_and_the_resync_releases_it_once_fixed(api, function, setup):
    reason, fix = setup(api)
    assert send(function.url, resource(live(api, "llama-finetune"))).status == 200
    assert live(api, "llama-finetune")["spec"]["suspend"] is True
    assert len(warnings(api, reason)) == 1
    assert [w for w in writes(api) if w != ("create", "events")] == []
    fix()
    assert send(function.url, ping()).status == 200
    tj = live(api, "llama-finetune")
    assert tj["spec"]["suspend"] is False and "kai-fn/podgroup" in tj["metadata"]["annotations"]
    assert len(api.list(KAI_PG, "PodGroup", NS)) == 1


@pytest.mark.parametrize("by", ["event", "resync"])
def test_outside_the_namespace_allowlist_it_is_released_without_a_gang(api, functions, by):
    fn = functions(KAI_FN_NAMESPACES="team-b")
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         auto_suspended("trainjob-llama-finetune"), sample_object("jobset-llama-finetune"))
    event = resource(live(api, "llama-finetune")) if by == "event" else ping()
    assert send(fn.url, event).status == 200
    tj = live(api, "llama-finetune")
    assert tj["spec"]["suspend"] is False and tj["metadata"]["annotations"]["kai-fn/skipped"] == "out-of-scope"
    assert writes(api) == [("patch", "trainjobs")]
