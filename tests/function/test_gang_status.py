"""The gang's status on the TrainJob: PodGroup updates in, GangUnschedulable / GangBound Events out, each once.

Real function server, kmock emulator. KAI's part is played by the test: it writes ``status.schedulingConditions``
on the PodGroup and creates the gang's pods, bound (``spec.nodeName``) or not, as the scheduler and Trainer would.
"""
from __future__ import annotations

import copy
import json

import pytest

from tests.ce import ping, ref, resource, send
from tests.conftest import KAI_PG, SP_PG, TRAINER, sample_object, seed
from tests.function.test_function import NAME, NS, PG, UID, seed_llama, verbs

OVER_LIMIT = {"reason": "OverLimit", "message": "gpu limit 4, the gang needs 8",
              "details": {"queueDetails": {"name": "team-a"}}}
NO_ROOM = {"reason": "Unschedulable", "message": "4 pods need 2 GPUs each; the nodes have 4 free"}


def released(api, url) -> dict:
    """llama-finetune, made into a gang and released by the function; its PodGroup as it is now."""
    assert send(url, resource(seed_llama(api))).status == 200
    return api.get(KAI_PG, "PodGroup", NS, PG)


def kai_says(api, *reasons, name=PG, api_version=KAI_PG) -> dict:
    """The scheduler writes (or, with no reasons, clears) its scheduling conditions on the PodGroup."""
    pg = api.get(api_version, "PodGroup", NS, name)
    pg["status"] = {"schedulingConditions": [{"type": "UnschedulableOnNodePool", "nodePool": "default",
                                              "status": "True", "reasons": list(reasons)}]} if reasons else {}
    return api.put(pg)


def pod(index: int, bound: bool, *, trainjob=NAME, podgroup=PG, rj="node", subgroup=None, sp=False) -> dict:
    labels = {"jobset.sigs.k8s.io/jobset-name": trainjob, "jobset.sigs.k8s.io/replicatedjob-name": rj}
    annotations = {}
    if sp:
        labels["scheduling.x-k8s.io/pod-group"] = podgroup
    else:
        annotations["pod-group-name"] = podgroup
    if subgroup:
        labels["kai.scheduler/subgroup-name"] = subgroup
    spec = {"containers": [{"name": "node", "image": "busybox"}]}
    if bound:
        spec["nodeName"] = f"gpu-node-{index}"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{trainjob}-{rj}-0-{index}", "namespace": NS, "labels": labels, "annotations": annotations},
        "spec": spec}


def place(api, total: int, bound: int, **kw) -> None:
    seed(api, *(pod(i, i < bound, **kw) for i in range(total)))


def events_of(api, reason=None):
    return [e for e in api.list("v1", "Event", NS) if reason in (None, e["reason"])]


def status_events(api):
    return sorted(e["reason"] for e in events_of(api) if e["reason"] in ("GangUnschedulable", "GangBound"))


def bound_mark(api, name=NAME):
    return (api.get(TRAINER, "TrainJob", NS, name)["metadata"].get("annotations") or {}).get("kai-fn/bound")


# -- what a PodGroup update reports -----------------------------------------------------------------------------

REPORTS = {
    "KAI's reasons while no pod is on a node: GangUnschedulable with them": dict(
        live=[OVER_LIMIT], bound=0, events=["GangUnschedulable"], outcome="blocked"),
    "every pod on a node: GangBound, and the TrainJob marked": dict(
        live=[], bound=4, events=["GangBound"], outcome="done"),
    "some pods on a node: nothing yet": dict(live=[], bound=3, events=[], outcome="skipped"),
    "no reasons and nothing bound (KAI is still deciding): nothing": dict(live=[], bound=0, events=[], outcome="skipped"),
    "an update with reasons KAI has cleared since: nothing": dict(
        seen=[OVER_LIMIT], live=[], bound=0, events=[], outcome="skipped"),
    "an update with reasons, but pods are on nodes since: nothing": dict(
        seen=[OVER_LIMIT], live=[OVER_LIMIT], bound=2, events=[], outcome="skipped"),
}


@pytest.mark.parametrize("case", REPORTS.values(), ids=list(REPORTS))
def test_a_podgroup_update_reports_the_gang_as_it_is_now(api, function, case):
    released(api, function.url)
    live = kai_says(api, *case["live"])
    seen = copy.deepcopy(live)
    if "seen" in case:  # the event carries an older status than the PodGroup has now
        seen["status"] = {"schedulingConditions": [{"type": "UnschedulableOnNodePool", "reasons": case["seen"]}]}
    place(api, 4, case["bound"])
    answer = send(function.url, resource(seen, "update"))
    assert answer.status == 200 and answer.body == ""
    assert answer.headers["X-Kai-Fn-Outcome"] == case["outcome"]
    assert status_events(api) == case["events"]
    assert (bound_mark(api) is not None) == ("GangBound" in case["events"])


def test_gang_unschedulable_carries_kais_reasons_and_messages(api, function):
    released(api, function.url)
    pg = kai_says(api, OVER_LIMIT, NO_ROOM)
    place(api, 4, 0)
    send(function.url, resource(pg, "update"))
    (event,) = events_of(api, "GangUnschedulable")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "TrainJob" and event["involvedObject"]["uid"] == UID
    assert event["message"] == (f"PodGroup {PG}: OverLimit (queue team-a): gpu limit 4, the gang needs 8."
                                " Unschedulable: 4 pods need 2 GPUs each; the nodes have 4 free.")


def test_gang_bound_is_a_normal_event_naming_the_podgroup(api, function):
    pg = released(api, function.url)
    place(api, 4, 4)
    send(function.url, resource(pg, "update"))
    (event,) = events_of(api, "GangBound")
    assert event["type"] == "Normal" and PG in event["message"] and "4 of minMember 4" in event["message"]


# -- once, whatever the order ----------------------------------------------------------------------------------

@pytest.mark.parametrize("live, bound, reason", [([OVER_LIMIT], 0, "GangUnschedulable"), ([], 4, "GangBound")])
def test_the_same_report_delivered_again_is_one_event(api, function, live, bound, reason):
    released(api, function.url)
    pg = kai_says(api, *live)
    place(api, 4, bound)
    for _ in range(3):
        assert send(function.url, resource(pg, "update")).status == 200
    assert status_events(api) == [reason]


def test_an_old_unschedulable_update_arriving_after_bound_posts_nothing_and_costs_one_get_at_most(api, functions):
    """The TrainJob's bound mark says so (one GET, in a replica that did not see it bound); the process that
    reported it bound remembers the PodGroup and answers with no call."""
    function, replica = functions(), functions(KAI_FN_MAX_BODY_BYTES="4194303")
    released(api, function.url)
    stale = kai_says(api, OVER_LIMIT)
    cleared = kai_says(api)
    place(api, 4, 4)
    send(function.url, resource(cleared, "update"))
    api.reset_calls()
    assert send(replica.url, resource(stale, "update")).status == 200
    assert verbs(api) == [("get", "trainjobs")]
    api.reset_calls()
    assert send(function.url, resource(stale, "update")).headers["X-Kai-Fn-Outcome"] == "skipped"
    assert api.calls == []
    assert status_events(api) == ["GangBound"]


def test_new_reasons_are_a_new_event_and_the_old_ones_are_not_repeated(api, function):
    released(api, function.url)
    first = kai_says(api, NO_ROOM)
    place(api, 4, 0)
    send(function.url, resource(first, "update"))
    second = kai_says(api, OVER_LIMIT)
    send(function.url, resource(second, "update"))
    send(function.url, resource(first, "update"))  # the first update, redelivered late: KAI says otherwise now
    assert sorted(e["message"] for e in events_of(api, "GangUnschedulable")) == [
        f"PodGroup {PG}: OverLimit (queue team-a): {OVER_LIMIT['message']}.",
        f"PodGroup {PG}: Unschedulable: {NO_ROOM['message']}.",
    ]


# -- what is not ours, or not reportable, costs nothing or one read --------------------------------------------

def _not_managed(pg):
    pg["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "kai-scheduler-podgrouper"


def _no_owner(pg):
    pg["metadata"]["ownerReferences"] = []


IGNORED = {"not kai_fn's PodGroup": ("update", _not_managed), "no TrainJob owns it": ("update", _no_owner),
           "a delete": ("delete", lambda pg: None)}


@pytest.mark.parametrize("action, change", IGNORED.values(), ids=list(IGNORED))
def test_updates_of_podgroups_that_are_not_kai_fns_gangs_cost_nothing(api, function, action, change):
    pg = released(api, function.url)
    change(pg)
    api.reset_calls()
    answer = send(function.url, resource(pg, action))
    assert answer.status == 200 and answer.headers["X-Kai-Fn-Outcome"] == "ignored"
    assert api.calls == []


def test_the_add_of_a_podgroup_kai_fn_just_made_costs_nothing_and_a_later_add_with_kais_status_reports(api, function):
    pg = released(api, function.url)
    api.reset_calls()
    answer = send(function.url, resource(pg, "add"))
    assert answer.headers["X-Kai-Fn-Outcome"] == "skipped" and api.calls == []
    place(api, 4, 0)
    pg = kai_says(api, OVER_LIMIT)  # an add after the source restarted: the PodGroup as it is now
    answer = send(function.url, resource(pg, "add"))
    assert answer.headers["X-Kai-Fn-Outcome"] == "blocked" and status_events(api) == ["GangUnschedulable"]


def test_a_reference_mode_podgroup_event_is_ignored(api, function):
    from tests.ce import _event, _sample
    data = {"kind": "PodGroup", "namespace": NS, "name": PG, "apiVersion": KAI_PG}
    sample = _sample(_event("dev.knative.apiserver.ref.update", NS, PG, data, None, KAI_PG, "PodGroup"), False)
    answer = send(function.url, sample)
    assert answer.status == 200 and answer.headers["X-Kai-Fn-Outcome"] == "ignored" and api.calls == []


def _suspend_again(api):
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    tj["spec"]["suspend"] = True
    api.put(tj)


def _replace_trainjob(api):
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    api.delete(TRAINER, "TrainJob", NS, NAME)
    tj["metadata"]["uid"] = "99999999-8888-4777-8666-555555555555"
    api.put(tj)


@pytest.mark.parametrize("change, outcome", [(_suspend_again, "skipped"), (_replace_trainjob, "ignored")],
                         ids=["suspended again", "replaced by another TrainJob of that name"])
def test_no_report_for_a_trainjob_that_is_not_running_this_gang(api, function, change, outcome):
    released(api, function.url)
    pg = kai_says(api, OVER_LIMIT)
    place(api, 4, 4)
    change(api)
    api.reset_calls()
    answer = send(function.url, resource(pg, "update"))
    assert answer.headers["X-Kai-Fn-Outcome"] == outcome
    assert status_events(api) == [] and api.writes() == []


def test_malformed_podgroup_events_are_400_with_no_api_call(api, function):
    pg = released(api, function.url)
    api.reset_calls()
    for change in (lambda p: p["metadata"].pop("uid"), lambda p: p.update(status=[1]),
                   lambda p: p.update(apiVersion="scheduling.run.ai/v1")):
        broken = copy.deepcopy(pg)
        change(broken)
        assert send(function.url, resource(broken, "update")).status == 400
    assert api.calls == []


# -- shapes: staged gangs, the scheduler-plugins flavor --------------------------------------------------------

BERT, BERT_UID = "bert-pretrain", "2b7e4c1d-8f3a-4b6e-9d2c-5a1f0e3b7c8d"
BERT_PG = f"pg-{BERT}-{BERT_UID}"


STAGE_PG = f"{BERT_PG}-stage-0"  # the initializers' PodGroup; BERT_PG is the trainer's, the main gang


@pytest.mark.parametrize("bound, updated, reasons, expect", [
    ({"dataset-initializer": 1, "model-initializer": 1}, STAGE_PG, [], []),
    ({"dataset-initializer": 1, "model-initializer": 1, "node": 3}, BERT_PG, [], ["GangBound"]),
    ({"dataset-initializer": 1, "model-initializer": 1, "node": 2}, BERT_PG, [], []),
    ({}, STAGE_PG, [OVER_LIMIT], ["GangUnschedulable"]),
], ids=["the initializers' stage bound: no GangBound yet", "the trainer's gang bound: GangBound",
        "trainer nodes short: nothing", "KAI's reasons on a stage: GangUnschedulable"])
def test_a_staged_gang_is_bound_when_its_main_podgroup_is_and_every_stage_reports_reasons(api, function, bound,
                                                                                         updated, reasons, expect):
    seed(api, sample_object("queue-team-a"), sample_object("trainingruntime-torch-llm-kai"),
         sample_object("trainjob-bert-pretrain"), sample_object("jobset-bert-pretrain"))
    assert send(function.url, ref(NS, BERT)).status == 200
    size = {"dataset-initializer": 1, "model-initializer": 1, "node": 3}
    for group, placed in bound.items():
        place(api, size[group], placed, trainjob=BERT, podgroup=BERT_PG if group == "node" else STAGE_PG, rj=group)
    pg = kai_says(api, *reasons, name=updated) if reasons else api.get(KAI_PG, "PodGroup", NS, updated)
    send(function.url, resource(pg, "update"))
    assert status_events(api) == expect


def test_scheduler_plugins_gang_is_bound_by_its_pod_group_label(api, functions):
    fn = functions(KAI_PODGROUP_FLAVOR="scheduler-plugins")
    assert send(fn.url, resource(seed_llama(api))).status == 200
    place(api, 4, 4, podgroup=NAME, sp=True)
    place(api, 1, 1, podgroup="someone-else", sp=True, rj="other")  # same JobSet label, other gang: not counted
    assert send(fn.url, resource(api.get(SP_PG, "PodGroup", NS, NAME), "update")).status == 200
    assert status_events(api) == ["GangBound"]


# -- the resync: binding changes no PodGroup, so no event may ever say it ---------------------------------------

def test_the_resync_reports_a_released_gang_that_got_bound_without_any_podgroup_event(api, function):
    released(api, function.url)
    place(api, 4, 4)
    api.reset_calls()
    assert send(function.url, ping()).status == 200
    assert status_events(api) == ["GangBound"] and bound_mark(api)
    assert ("get", "podgroups") in verbs(api) and ("list", "pods") in verbs(api)
    api.reset_calls()
    assert send(function.url, ping()).status == 200
    # A bound gang costs the resync nothing; the heartbeat is the resync's own.
    assert verbs(api) == [("list", "trainjobs"), ("patch", "leases")]


def test_the_shipped_podgroup_samples_get_their_documented_answer(api, function):
    from kai_fn.commands.invoke import load_sample, post
    from kai_fn.local.process import REPO

    def shipped(name):
        return load_sample(REPO / "samples" / "events" / f"{name}.json")

    released(api, function.url)
    body = json.loads(shipped("podgroup-unschedulable").body)
    assert body["metadata"]["name"] == PG
    kai_says(api, *body["status"]["schedulingConditions"][0]["reasons"])
    place(api, 4, 0)
    answer = post(function.url, shipped("podgroup-unschedulable"))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"], answer.body) == (200, "blocked", "")
    kai_says(api)
    place(api, 4, 4)
    answer = post(function.url, shipped("podgroup-scheduled"))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"], answer.body) == (200, "done", "")
    assert status_events(api) == ["GangBound", "GangUnschedulable"]
