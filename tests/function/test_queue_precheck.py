"""The queue pre-check through the real function server: a gang that can never run in its queue is not made, and
its JobSet stays held (the admission policy's hold: suspended, ``kai-fn/held``) until the queue can take it."""
from __future__ import annotations

import copy

import pytest

from tests.ce import ping, resource, send
from tests.conftest import JOBSET, KAI_PG, TRAINER, opt_in_read, sample_object, seed
from tests.builders import held_by_0_2

# Each test seeds the samples' uids again, and a process remembers the uids whose JobSet it decided.
pytestmark = pytest.mark.usefixtures("forgetful")

NS, NAME = "team-a", "llama-finetune"
UID = "6f1c2b9e-3d4a-4e5f-8a7b-9c0d1e2f3a4b"
PG = f"pg-{NAME}-{UID}"
QUEUE = "scheduling.run.ai/v2"


def team_a(**resources):
    """The sample leaf queue, with some of its resources replaced: ``gpu={"quota": 4, "limit": 4}``."""
    queue = sample_object("queue-team-a")
    queue["spec"]["resources"].update(copy.deepcopy(resources))
    return queue


def seed_llama(api, *queues, trainjob=None):
    seed(api, sample_object("queue-default-parent"), *queues, sample_object("clustertrainingruntime-torch-kai"),
         trainjob or sample_object("trainjob-llama-finetune"), held_by_0_2(sample_object("jobset-llama-finetune")))
    return api.get(TRAINER, "TrainJob", NS, NAME)


def events_of(api, reason):
    return [e for e in api.list("v1", "Event", NS) if e["reason"] == reason]


def released(api):
    """Its JobSet decided (the gang's PodGroup named), no longer held, resumed; its TrainJob never written."""
    js = api.get(JOBSET, "JobSet", NS, NAME)
    assert [c for c in api.writes() if c.resource == "trainjobs"] == []
    return (js["spec"]["suspend"] is False and "kai-fn/podgroup" in (js["metadata"].get("annotations") or {})
            and "kai-fn/held" not in (js["metadata"].get("labels") or {}))


def still_held(api):
    js = api.get(JOBSET, "JobSet", NS, NAME)
    return (js["spec"]["suspend"] is True and (js["metadata"].get("labels") or {}).get("kai-fn/held") == "true"
            and "kai-fn/podgroup" not in (js["metadata"].get("annotations") or {}))


def assert_refused_untouched(api, jobset_before):
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    assert "suspend" not in tj["spec"] and not (tj["metadata"].get("annotations") or {})
    assert still_held(api)
    assert api.list(KAI_PG, "PodGroup", NS) == []
    assert api.get(JOBSET, "JobSet", NS, NAME) == jobset_before
    assert [(c.verb, c.resource) for c in api.writes()] == [("create", "events")]


CHILD = {"apiVersion": QUEUE, "kind": "Queue", "metadata": {"name": "team-a-interns"}, "spec": {"parentQueue": "team-a"}}

REFUSED = {
    "no such queue": ((), "QueueNotFound", "Queue team-a does not exist"),
    "a parent queue": ((team_a(), CHILD), "QueueNotFound", "Queue team-a is a parent queue (of team-a-interns)"),
    "over the gpu limit": ((team_a(gpu={"quota": 4, "limit": 4}),), "GangExceedsQueue",
                           "request gpu 8 GPUs, over the limit 4 GPUs of Queue team-a"),
    "over an ancestor's memory limit": (
        (team_a(), {**sample_object("queue-default-parent"),
                    "spec": {"resources": {"gpu": {"limit": -1}, "cpu": {"limit": -1}, "memory": {"limit": 64000}}}}),
        "GangExceedsQueue",
        "request memory 68719.477 MB, over the limit 64000 MB of Queue default-parent-queue (an ancestor of team-a)"),
    "a cpu limit left unset": ((team_a(cpu={"quota": -1}),), "GangExceedsQueue",
                               "request cpu 16000 millicores, over the limit 0 millicores"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_a_gang_that_can_never_run_in_its_queue_is_refused_and_its_jobset_left_held(api, function, case):
    queues, reason, words = REFUSED[case]
    tj = seed_llama(api, *queues)
    jobset_before = api.get(JOBSET, "JobSet", NS, NAME)
    api.reset_calls()
    answer = send(function.url, resource(tj))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "blocked")
    (warning,) = events_of(api, reason)
    assert warning["type"] == "Warning" and words in warning["message"], warning["message"]
    assert "no PodGroup is made" in warning["message"]
    assert_refused_untouched(api, jobset_before)


def test_a_non_preemptible_gang_is_held_to_its_queues_quota_a_preemptible_one_is_not(api, function):
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"]["labels"]["kai.scheduler/preemptibility"] = "non-preemptible"
    tj = seed_llama(api, team_a(gpu={"quota": 4, "limit": -1}), trainjob=tj)
    assert send(function.url, resource(tj)).status == 200
    (warning,) = events_of(api, "GangExceedsQueue")
    assert "over the quota 4 GPUs of Queue team-a; a non-preemptible gang may not exceed quota" in warning["message"]
    assert not released(api) and still_held(api)

    other = sample_object("trainjob-llama-finetune")  # the same gang, preemptible: the quota does not bind it
    api.delete(TRAINER, "TrainJob", NS, NAME)
    (other,) = seed(api, other)
    assert send(function.url, resource(other)).status == 200
    assert released(api)


def test_a_refused_gang_proceeds_at_the_resync_once_its_queue_is_fixed(api, function):
    tj = seed_llama(api, team_a(gpu={"quota": 4, "limit": 4}))
    assert send(function.url, resource(tj)).status == 200
    assert not released(api) and still_held(api)
    api.put(team_a())  # the admin raises the limit
    assert send(function.url, ping()).status == 200  # the resync lists it: its JobSet still held
    assert released(api)
    assert len(api.list(KAI_PG, "PodGroup", NS)) == 1


def test_a_refusal_from_the_cache_is_confirmed_on_a_fresh_list_so_a_fix_counts_at_once(api, functions):
    fn = functions(KAI_FN_RUNTIME_CACHE_SECONDS="300")
    tj = seed_llama(api, team_a(gpu={"quota": 4, "limit": 4}))
    assert send(fn.url, resource(tj)).status == 200  # the refusing list is now cached
    api.put(team_a())
    api.reset_calls()
    assert send(fn.url, resource(tj, "update")).status == 200
    assert released(api)
    assert [c.resource for c in api.calls].count("queues") == 1


def test_warn_posts_the_warning_then_makes_the_gang_anyway(api, functions):
    fn = functions(KAI_FN_QUEUE_CHECK="warn")
    tj = seed_llama(api, team_a(gpu={"quota": 4, "limit": 4}))
    assert send(fn.url, resource(tj)).status == 200
    (warning,) = events_of(api, "GangExceedsQueue")
    assert "over the limit 4 GPUs" in warning["message"] and "KAI_FN_QUEUE_CHECK=warn: released anyway" in warning["message"]
    assert released(api) and len(events_of(api, "GangCreated")) == 1


def test_off_makes_the_gang_without_reading_queues(api, functions):
    fn = functions(KAI_FN_QUEUE_CHECK="off")
    tj = seed_llama(api)  # no team-a Queue at all
    api.reset_calls()
    assert send(fn.url, resource(tj)).status == 200
    assert released(api)
    assert "queues" not in {c.resource for c in api.calls}
    assert events_of(api, "QueueNotFound") == []


def test_the_scheduler_plugins_flavor_has_no_kai_queue_to_check(api, functions):
    fn = functions(KAI_PODGROUP_FLAVOR="scheduler-plugins")
    tj = seed_llama(api)
    api.reset_calls()
    assert send(fn.url, resource(tj)).status == 200
    assert released(api) and "queues" not in {c.resource for c in api.calls}


def test_a_new_trainjob_costs_five_calls_with_warm_caches(api, functions):
    """The TrainJob is read whoever sent its event (authenticated here): its body never decides a gang.

    Its two first reads run at once, so they may reach the server in either order."""
    fn = functions(KAI_FN_RUNTIME_CACHE_SECONDS="30", KAI_FN_AUDIENCE="kai-fn")
    token = api.issue_token("kai-fn", "kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource", ["kai-fn"])
    tj = seed_llama(api, team_a())
    second = copy.deepcopy(sample_object("trainjob-llama-finetune"))
    second["metadata"].update(name="gpt-small", uid="5e0b7f4a-1c6d-4e9b-a2f3-8d7c6b5a4e3f")
    js = held_by_0_2(sample_object("jobset-llama-finetune"))
    js["metadata"]["name"] = "gpt-small"
    js["metadata"]["ownerReferences"][0].update(name="gpt-small", uid=second["metadata"]["uid"])
    seed(api, second, js)
    assert send(fn.url, resource(tj), token=token).status == 200  # warms the runtime, Queue and token caches
    api.reset_calls()
    assert send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, "gpt-small")), token=token).status == 200
    calls = [(c.verb, c.resource) for c in api.calls if not opt_in_read(c)]
    assert sorted(calls[:2]) == [("get", "jobsets"), ("get", "trainjobs")]  # read at once, in either order
    assert calls[2:] == [("create", "podgroups"), ("patch", "jobsets"), ("create", "events")]


def test_a_duplicate_of_a_refused_trainjob_or_of_its_held_jobset_writes_no_second_warning(api, function):
    tj = seed_llama(api, team_a(gpu={"quota": 4, "limit": 4}))
    js = api.get(JOBSET, "JobSet", NS, NAME)
    answers = [send(function.url, event) for event in (resource(tj), resource(js), resource(tj, "update"))]
    assert [(a.status, a.headers.get("X-Kai-Fn-Outcome")) for a in answers] == [(200, "blocked")] * 3
    assert len(events_of(api, "GangExceedsQueue")) == 1 and still_held(api)
    assert [c.status for c in api.writes()] == [201, 409, 409]


@pytest.mark.parametrize("verb, kind, settings", [
    ("list", "queues", {}),
    ("create", "podgroups", {"KAI_FN_QUEUE_CHECK": "off"}),
], ids=["queue-api-missing", "podgroup-api-missing"])
def test_kai_not_installed_is_one_clear_warning_not_a_retry_for_ever(api, functions, verb, kind, settings):
    """404 on KAI's own kinds: their CRDs are not installed. The JobSet stays held with one Warning, and each
    later event repeats the same one (deduplicated by name) instead of answering 503 for ever."""
    from kai_fn.local.emulator import Fault

    fn = functions(**settings)
    tj = seed_llama(api)
    jobset_before = api.get(JOBSET, "JobSet", NS, NAME)
    api.faults = lambda call: Fault(status=404) if (call.verb, call.resource) == (verb, kind) else None
    answers = [send(fn.url, resource(tj)) for _ in range(2)]
    api.faults = None
    assert [(a.status, a.headers.get("X-Kai-Fn-Outcome")) for a in answers] == [(200, "blocked")] * 2
    (warning,) = events_of(api, "SchedulerNotInstalled")
    assert "is KAI Scheduler installed" in warning["message"] and "No PodGroup is made" in warning["message"]
    assert api.get(TRAINER, "TrainJob", NS, NAME) == tj and api.get(JOBSET, "JobSet", NS, NAME) == jobset_before
    assert api.list(KAI_PG, "PodGroup", NS) == []
