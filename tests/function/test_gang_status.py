"""The gang's status on the TrainJob: PodGroup updates in, GangUnschedulable / GangBound Events out, each once.

Real function server, kmock emulator. The TrainJob is submitted plainly and its JobSet held by the admission policy
(as the samples are seeded); kai_fn's pass decides the JobSet. KAI's part is played by the test: it writes
``status.schedulingConditions`` on the PodGroup and creates the gang's pods, bound (``spec.nodeName``) or not, as the
scheduler and Trainer would. In the JobSet gate the gang's bound mark (``kai-fn/bound``) goes on its main PodGroup:
the TrainJob is never written. Each test its own TrainJob uid (``fresh``): a function process remembers the
TrainJobs whose JobSet it decided, by uid.
"""
from __future__ import annotations

import copy
import json
import uuid

import pytest

from tests.builders import owned_by, job_owner
from tests.ce import ping, ref, resource, send
from tests.conftest import JOBSET, KAI_PG, SP_PG, TRAINER, resync_lists, sample_object, seed
from tests.function.test_function import NAME, NS, PG, UID, verbs
from tests.builders import held_by_0_2

OVER_LIMIT = {"reason": "OverLimit", "message": "gpu limit 4, the gang needs 8",
              "details": {"queueDetails": {"name": "team-a"}}}
NO_ROOM = {"reason": "Unschedulable", "message": "4 pods need 2 GPUs each; the nodes have 4 free"}
BOUND = "kai-fn/bound"


def fresh() -> str:
    """A TrainJob uid of this test's own."""
    return str(uuid.uuid4())


def uid_of(api, name=NAME) -> str:
    return api.get(TRAINER, "TrainJob", NS, name)["metadata"]["uid"]


def pg_of(api, name=NAME) -> str:
    """The main PodGroup kai_fn names for the TrainJob ``name`` as it is now."""
    return f"pg-{name}-{uid_of(api, name)}"


def seed_held_llama(api, uid=UID, runtime=None) -> dict:
    """llama-finetune submitted plainly with the uid ``uid``, its JobSet held by the admission policy."""
    seed(api, sample_object("queue-team-a"), runtime or sample_object("clustertrainingruntime-torch-kai"),
         owned_by(sample_object("trainjob-llama-finetune"), uid),
         owned_by(held_by_0_2(sample_object("jobset-llama-finetune")), uid))
    return api.get(TRAINER, "TrainJob", NS, NAME)


def released(api, url, uid=UID) -> dict:
    """llama-finetune (the sample's uid unless told), its held JobSet decided and released by the function; its
    PodGroup as it is now."""
    assert send(url, resource(seed_held_llama(api, uid))).headers["X-Kai-Fn-Outcome"] == "done"
    js = api.get(JOBSET, "JobSet", NS, NAME)
    assert js["spec"]["suspend"] is False and js["metadata"]["annotations"]["kai-fn/podgroup"] == f"pg-{NAME}-{uid}"
    return api.get(KAI_PG, "PodGroup", NS, f"pg-{NAME}-{uid}")


def kai_says(api, *reasons, name=None, api_version=KAI_PG) -> dict:
    """The scheduler writes (or, with no reasons, clears) its scheduling conditions on the PodGroup (``name``: the
    llama's main one unless told)."""
    pg = api.get(api_version, "PodGroup", NS, name or pg_of(api))
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
        "name": f"{trainjob}-{rj}-0-{index}", "namespace": NS, "labels": labels, "annotations": annotations,
        "ownerReferences": job_owner(trainjob, rj)},
        "spec": spec}


def place(api, total: int, bound: int, **kw) -> None:
    """Trainer's pods of the gang, ``bound`` of them on nodes; ``podgroup``: the main PodGroup of ``trainjob`` as it
    is now unless told."""
    if "podgroup" not in kw:
        kw["podgroup"] = pg_of(api, kw.get("trainjob", NAME))
    seed(api, *(pod(i, i < bound, **kw) for i in range(total)))


def events_of(api, reason=None):
    return [e for e in api.list("v1", "Event", NS) if reason in (None, e["reason"])]


def status_events(api):
    return sorted(e["reason"] for e in events_of(api) if e["reason"] in ("GangUnschedulable", "GangBound"))


def bound_mark(api, name=None, api_version=KAI_PG):
    """The gang's bound mark, on its main PodGroup."""
    pg = api.get(api_version, "PodGroup", NS, name or pg_of(api))
    return (pg["metadata"].get("annotations") or {}).get(BOUND)


def trainjob_writes(api):
    return [(c.verb, c.resource) for c in api.writes() if c.resource == "trainjobs"]


# -- what a PodGroup update reports -----------------------------------------------------------------------------

REPORTS = {
    "KAI's reasons while no pod is on a node: GangUnschedulable with them": dict(
        live=[OVER_LIMIT], bound=0, events=["GangUnschedulable"], outcome="blocked"),
    "every pod on a node: GangBound, and its PodGroup marked": dict(
        live=[], bound=4, events=["GangBound"], outcome="done"),
    "some pods on a node: nothing yet": dict(live=[], bound=3, events=[], outcome="skipped"),
    "no reasons and nothing bound (KAI is still deciding): nothing": dict(live=[], bound=0, events=[], outcome="skipped"),
    "an update with reasons KAI has cleared since: nothing": dict(
        seen=[OVER_LIMIT], live=[], bound=0, events=[], outcome="skipped"),
    "an update with reasons, but pods are on nodes since: nothing": dict(
        seen=[OVER_LIMIT], live=[OVER_LIMIT], bound=2, events=[], outcome="skipped"),
}


@pytest.mark.parametrize("case", REPORTS.values(), ids=list(REPORTS))
def test_a_podgroup_update_reports_the_gang_as_it_is_now_and_never_writes_the_trainjob(api, function, case):
    released(api, function.url, fresh())
    live = kai_says(api, *case["live"])
    seen = copy.deepcopy(live)
    if "seen" in case:  # the event carries an older status than the PodGroup has now
        seen["status"] = {"schedulingConditions": [{"type": "UnschedulableOnNodePool", "reasons": case["seen"]}]}
    place(api, 4, case["bound"])
    api.reset_calls()
    answer = send(function.url, resource(seen, "update"))
    assert answer.status == 200 and answer.body == ""
    assert answer.headers["X-Kai-Fn-Outcome"] == case["outcome"]
    assert status_events(api) == case["events"]
    assert (bound_mark(api) is not None) == ("GangBound" in case["events"])
    assert trainjob_writes(api) == []


def test_gang_unschedulable_carries_kais_reasons_and_messages(api, function):
    uid = fresh()
    released(api, function.url, uid)
    pg = kai_says(api, OVER_LIMIT, NO_ROOM)
    place(api, 4, 0)
    send(function.url, resource(pg, "update"))
    (event,) = events_of(api, "GangUnschedulable")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "TrainJob" and event["involvedObject"]["uid"] == uid
    assert event["message"] == (f"PodGroup {pg_of(api)}: OverLimit (queue team-a): gpu limit 4, the gang needs 8."
                                " Unschedulable: 4 pods need 2 GPUs each; the nodes have 4 free.")


def test_gang_bound_is_a_normal_event_on_the_trainjob_naming_the_podgroup_and_the_mark_is_on_the_podgroup(api,
                                                                                                        function):
    uid = fresh()
    pg = released(api, function.url, uid)
    place(api, 4, 4)
    api.reset_calls()
    send(function.url, resource(pg, "update"))
    (event,) = events_of(api, "GangBound")
    assert event["type"] == "Normal" and event["involvedObject"]["uid"] == uid
    assert pg_of(api) in event["message"] and "4 of minMember 4" in event["message"]
    assert [(c.verb, c.resource) for c in api.writes()] == [("create", "events"), ("patch", "podgroups")]
    assert bound_mark(api).endswith("Z")
    assert BOUND not in (api.get(TRAINER, "TrainJob", NS, NAME)["metadata"].get("annotations") or {})


# -- once, whatever the order ----------------------------------------------------------------------------------

@pytest.mark.parametrize("live, bound, reason", [([OVER_LIMIT], 0, "GangUnschedulable"), ([], 4, "GangBound")])
def test_the_same_report_delivered_again_is_one_event(api, function, live, bound, reason):
    released(api, function.url, fresh())
    pg = kai_says(api, *live)
    place(api, 4, bound)
    answers = [send(function.url, resource(pg, "update")).status for _ in range(3)]
    assert answers == [200] * 3
    assert status_events(api) == [reason]


def test_an_old_unschedulable_update_arriving_after_bound_posts_nothing_and_writes_nothing(api, functions):
    """The bound mark is on the PodGroup: a replica that did not see it bound reads the PodGroup (which carries the
    mark), writes nothing and remembers it; the process that reported it bound remembers the PodGroup and answers
    with no call; later updates cost nothing in either."""
    function, replica = functions(), functions(KAI_FN_MAX_BODY_BYTES="4194303")
    released(api, function.url, fresh())
    stale = kai_says(api, OVER_LIMIT)
    cleared = kai_says(api)
    place(api, 4, 4)
    assert send(function.url, resource(cleared, "update")).headers["X-Kai-Fn-Outcome"] == "done"
    marked = api.get(KAI_PG, "PodGroup", NS, pg_of(api))
    api.reset_calls()
    assert send(replica.url, resource(stale, "update")).headers["X-Kai-Fn-Outcome"] == "skipped"
    assert verbs(api) == [("get", "podgroups")]
    api.reset_calls()
    assert send(function.url, resource(stale, "update")).headers["X-Kai-Fn-Outcome"] == "skipped"
    assert send(replica.url, resource(marked, "update")).headers["X-Kai-Fn-Outcome"] == "skipped"
    assert api.calls == []
    assert status_events(api) == ["GangBound"] and bound_mark(api) == marked["metadata"]["annotations"][BOUND]


def test_new_reasons_are_a_new_event_and_the_old_ones_are_not_repeated(api, function):
    released(api, function.url, fresh())
    pg = pg_of(api)
    first = kai_says(api, NO_ROOM)
    place(api, 4, 0)
    send(function.url, resource(first, "update"))
    second = kai_says(api, OVER_LIMIT)
    send(function.url, resource(second, "update"))
    send(function.url, resource(first, "update"))  # the first update, redelivered late: KAI says otherwise now
    assert sorted(e["message"] for e in events_of(api, "GangUnschedulable")) == [
        f"PodGroup {pg}: OverLimit (queue team-a): {OVER_LIMIT['message']}.",
        f"PodGroup {pg}: Unschedulable: {NO_ROOM['message']}.",
    ]


# -- what is not ours, or not reportable, costs nothing or one read --------------------------------------------

def _not_managed(pg):
    pg["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "kai-scheduler-podgrouper"


def _no_owner(pg):
    pg["metadata"]["ownerReferences"] = []


IGNORED = {"not kai_fn's PodGroup": ("update", _not_managed), "a delete": ("delete", lambda pg: None)}


@pytest.mark.parametrize("action, change", IGNORED.values(), ids=list(IGNORED))
def test_updates_of_podgroups_that_are_not_kai_fns_gangs_cost_nothing(api, function, action, change):
    pg = released(api, function.url, fresh())
    change(pg)
    api.reset_calls()
    answer = send(function.url, resource(pg, action))
    assert answer.status == 200 and answer.headers["X-Kai-Fn-Outcome"] == "ignored"
    assert api.calls == []


def test_a_body_that_disowns_a_podgroup_is_not_believed_and_one_that_is_disowned_live_is_ignored(api, function):
    pg = released(api, function.url, fresh())
    place(api, 4, 0)
    lying = kai_says(api, OVER_LIMIT)
    _no_owner(lying)
    assert send(function.url, resource(lying, "update")).headers["X-Kai-Fn-Outcome"] == "blocked"
    live = api.get(KAI_PG, "PodGroup", NS, pg_of(api))
    _no_owner(live)
    _write(api, live)
    api.reset_calls()
    answer = send(function.url, resource(pg, "update"))
    assert answer.headers["X-Kai-Fn-Outcome"] == "ignored" and verbs(api) == [("get", "podgroups")]


def test_the_add_of_a_podgroup_kai_fn_just_made_costs_no_read_and_a_later_add_with_kais_status_reports(api, function):
    pg = released(api, function.url, fresh())
    api.reset_calls()
    answer = send(function.url, resource(pg, "add"))
    assert answer.headers["X-Kai-Fn-Outcome"] == "skipped" and verbs(api) == []
    place(api, 4, 0)
    pg = kai_says(api, OVER_LIMIT)  # an add after the source restarted: the PodGroup as it is now
    answer = send(function.url, resource(pg, "add"))
    assert answer.headers["X-Kai-Fn-Outcome"] == "blocked" and status_events(api) == ["GangUnschedulable"]


def kai_counts(api, allocated: dict) -> dict:
    """KAI's podgroupcontroller counts the gang's pods on its PodGroup: requested, and allocated once scheduled."""
    pg = api.get(KAI_PG, "PodGroup", NS, pg_of(api))
    pg["status"] = {"resourcesStatus": {"requested": {"nvidia.com/gpu": "8"}} | (
        {"allocated": allocated} if allocated else {})}
    return api.put(pg)


def test_an_update_where_kai_placed_nothing_and_gives_no_reason_costs_no_read_and_the_allocating_one_reports(
        api, function):
    released(api, function.url, fresh())
    place(api, 4, 0)
    counted = kai_counts(api, {})
    api.reset_calls()
    answer = send(function.url, resource(counted, "update"))
    assert (answer.headers["X-Kai-Fn-Outcome"], verbs(api)) == ("skipped", [])
    place(api, 4, 4)
    allocated = kai_counts(api, {"nvidia.com/gpu": "8"})
    answer = send(function.url, resource(allocated, "update"))
    assert answer.headers["X-Kai-Fn-Outcome"] == "done" and status_events(api) == ["GangBound"]


def test_a_body_that_says_kai_placed_nothing_skips_a_look_but_never_makes_a_report(api, function):
    """A forged or stale body may cost the gang a look (the next write of its PodGroup, or the resync, makes it);
    it cannot make a report: every report comes from the PodGroup and pods read now."""
    released(api, function.url, fresh())
    place(api, 4, 4)
    live = kai_counts(api, {"nvidia.com/gpu": "8"})
    forged = copy.deepcopy(live)
    forged["status"]["resourcesStatus"].pop("allocated")
    assert send(function.url, resource(forged, "update")).headers["X-Kai-Fn-Outcome"] == "skipped"
    assert status_events(api) == [] and bound_mark(api) is None
    assert send(function.url, resource(live, "update")).headers["X-Kai-Fn-Outcome"] == "done"


def test_a_reference_mode_podgroup_event_is_ignored(api, function):
    from tests.ce import _event, _sample
    data = {"kind": "PodGroup", "namespace": NS, "name": PG, "apiVersion": KAI_PG}
    sample = _sample(_event("dev.knative.apiserver.ref.update", NS, PG, data, None, KAI_PG, "PodGroup"), False)
    answer = send(function.url, sample)
    assert answer.status == 200 and answer.headers["X-Kai-Fn-Outcome"] == "ignored" and api.calls == []


def _write(api, obj):
    del obj["metadata"]["resourceVersion"]
    api.put(obj)


def _suspend_trainjob_again(api):
    """Its author (or Kueue) suspends the TrainJob; Trainer suspends the JobSet with it."""
    for api_version, kind in ((TRAINER, "TrainJob"), (JOBSET, "JobSet")):
        obj = api.get(api_version, kind, NS, NAME)
        obj["spec"]["suspend"] = True
        _write(api, obj)


def _suspend_jobset_only(api):
    js = api.get(JOBSET, "JobSet", NS, NAME)
    js["spec"]["suspend"] = True
    _write(api, js)


def _replace_trainjob(api):
    tj = api.get(TRAINER, "TrainJob", NS, NAME)
    api.delete(TRAINER, "TrainJob", NS, NAME)
    tj["metadata"]["uid"] = fresh()
    _write(api, tj)


def _replace_jobset(api):
    """The JobSet of that name is another's now (its controller is not this TrainJob): no gang of it runs."""
    js = api.get(JOBSET, "JobSet", NS, NAME)
    api.delete(JOBSET, "JobSet", NS, NAME)
    js["metadata"]["ownerReferences"][0]["uid"] = fresh()
    _write(api, js)


NOT_RUNNING = {
    "the TrainJob suspended again": (_suspend_trainjob_again, "skipped"),
    "its JobSet suspended": (_suspend_jobset_only, "skipped"),
    "its JobSet replaced by another's": (_replace_jobset, "skipped"),
    "replaced by another TrainJob of that name": (_replace_trainjob, "ignored"),
}


@pytest.mark.parametrize("change, outcome", NOT_RUNNING.values(), ids=list(NOT_RUNNING))
def test_no_report_for_a_trainjob_that_is_not_running_this_gang(api, function, change, outcome):
    pg = released(api, function.url, fresh())
    pg = kai_says(api, OVER_LIMIT, name=pg["metadata"]["name"])
    place(api, 4, 4, podgroup=pg["metadata"]["name"])
    change(api)
    api.reset_calls()
    answer = send(function.url, resource(pg, "update"))
    assert answer.headers["X-Kai-Fn-Outcome"] == outcome
    assert status_events(api) == [] and api.writes() == []


def test_malformed_podgroup_events_are_400_with_no_api_call(api, function):
    pg = released(api, function.url, fresh())
    api.reset_calls()
    answers = []
    for change in (lambda p: p["metadata"].pop("uid"), lambda p: p.update(status=[1]),
                   lambda p: p.update(apiVersion="scheduling.run.ai/v1")):
        broken = copy.deepcopy(pg)
        change(broken)
        answers.append(send(function.url, resource(broken, "update")).status)
    assert answers == [400] * 3
    assert api.calls == []


# -- shapes: staged gangs, the scheduler-plugins flavor --------------------------------------------------------

BERT = "bert-pretrain"


@pytest.mark.parametrize("bound, stage, reasons, expect", [
    ({"dataset-initializer": 1, "model-initializer": 1}, True, [], []),
    ({"dataset-initializer": 1, "model-initializer": 1, "node": 3}, False, [], ["GangBound"]),
    ({"dataset-initializer": 1, "model-initializer": 1, "node": 2}, False, [], []),
    ({}, True, [OVER_LIMIT], ["GangUnschedulable"]),
], ids=["the initializers' stage bound: no GangBound yet", "the trainer's gang bound: GangBound",
        "trainer nodes short: nothing", "KAI's reasons on a stage: GangUnschedulable"])
def test_a_staged_gang_is_bound_when_its_main_podgroup_is_and_every_stage_reports_reasons(api, function, bound,
                                                                                         stage, reasons, expect):
    uid = fresh()
    main = f"pg-{BERT}-{uid}"  # the trainer's PodGroup, the main gang; the initializers' is its stage 0
    seed(api, sample_object("queue-team-a"), sample_object("trainingruntime-torch-llm-kai"),
         owned_by(sample_object("trainjob-bert-pretrain"), uid),
         owned_by(held_by_0_2(sample_object("jobset-bert-pretrain")), uid))
    assert send(function.url, ref(NS, BERT)).headers["X-Kai-Fn-Outcome"] == "done"
    assert api.get(JOBSET, "JobSet", NS, BERT)["metadata"]["annotations"]["kai-fn/podgroup"] == main
    size = {"dataset-initializer": 1, "model-initializer": 1, "node": 3}
    for group, placed in bound.items():
        place(api, size[group], placed, trainjob=BERT, podgroup=main if group == "node" else f"{main}-stage-0",
              rj=group)
    updated = f"{main}-stage-0" if stage else main
    pg = kai_says(api, *reasons, name=updated) if reasons else api.get(KAI_PG, "PodGroup", NS, updated)
    send(function.url, resource(pg, "update"))
    assert status_events(api) == expect
    assert (bound_mark(api, main) is not None) == ("GangBound" in expect)


def test_scheduler_plugins_gang_is_bound_by_its_pod_group_label_and_marked_on_it(api, functions):
    fn = functions(KAI_PODGROUP_FLAVOR="scheduler-plugins")
    assert send(fn.url, resource(seed_held_llama(api, fresh()))).headers["X-Kai-Fn-Outcome"] == "done"
    place(api, 4, 4, podgroup=NAME, sp=True)
    place(api, 1, 1, podgroup="someone-else", sp=True, rj="other")  # same JobSet label, other gang: not counted
    assert send(fn.url, resource(api.get(SP_PG, "PodGroup", NS, NAME), "update")).status == 200
    assert status_events(api) == ["GangBound"]
    assert bound_mark(api, NAME, SP_PG) is not None


# -- the resync: binding changes no PodGroup, so no event may ever say it ---------------------------------------

def test_the_resync_reports_a_released_gang_that_got_bound_without_any_podgroup_event(api, function):
    released(api, function.url, fresh())
    place(api, 4, 4)
    api.reset_calls()
    assert send(function.url, ping()).status == 200
    assert status_events(api) == ["GangBound"] and bound_mark(api)
    assert ("list", "pods") in verbs(api) and ("patch", "podgroups") in verbs(api)
    assert trainjob_writes(api) == []
    api.reset_calls()
    assert send(function.url, ping()).status == 200
    # A bound gang costs the resync nothing but its LISTs (verbs leaves out the namespaces'); the heartbeat is its own.
    assert verbs(api) == [*resync_lists()[1:], ("patch", "leases")]


def test_the_shipped_podgroup_samples_get_their_documented_answer(api, functions):
    """The samples name the sample TrainJob's PodGroup (its uid), so a process of this test's own decides it."""
    from kai_fn.commands.invoke import load_sample, post
    from kai_fn.local.process import REPO

    def shipped(name):
        return load_sample(REPO / "samples" / "events" / f"{name}.json")

    function = functions(KAI_FN_MAX_BODY_BYTES="4194301")
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
