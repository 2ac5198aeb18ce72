"""The function over real HTTP, against the kmock API emulator through the real kubernetes client.

The gate is the JobSet: TrainJobs are submitted plainly, and the admission policy (not run by the emulator) holds
each JobSet a TrainJob in scope controls: the tests seed those JobSets as it made them (suspended, ``kai-fn/held``).
kai_fn makes the gang, then decides the JobSet in one JSON Patch; the TrainJob is never written on that path.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import tempfile
import threading
import urllib.request
from pathlib import Path

import pytest

from kai_fn.local.emulator import Fault
from kai_fn.commands.invoke import load_sample, post
from kai_fn.local.process import REPO, FunctionProcess
from tests import crds
from tests.builders import jobset_for
from tests.ce import ping, ref, resource, send
from tests.conftest import JOBSET, KAI_PG, SP_PG, TRAINER, OPTED_IN, opt_in_read, sample_object, seed
from tests.builders import held_by_0_2

# Each test seeds the samples' uids again, and a process remembers the uids whose JobSet it decided.
pytestmark = pytest.mark.usefixtures("forgetful")

NS, NAME = "team-a", "llama-finetune"
UID = "6f1c2b9e-3d4a-4e5f-8a7b-9c0d1e2f3a4b"
PG = f"pg-{NAME}-{UID}"
HELD = "kai-fn/held"
TRAINJOBS_SOURCE = ("kai-fn", "kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource")


def seed_llama(api, *, trainjob=None, jobset=True, runtime=True, held=True):
    """llama-finetune as submitted (plainly), with its JobSet as the admission policy held it (``held``), or as
    Trainer made it without the policy."""
    objects = [sample_object("queue-team-a")]
    if runtime:
        objects.append(sample_object("clustertrainingruntime-torch-kai"))
    objects.append(trainjob or sample_object("trainjob-llama-finetune"))
    if jobset:
        js = held_by_0_2(sample_object("jobset-llama-finetune"))
        if not held:
            del js["metadata"]["labels"][HELD]
        objects.append(js)
    seed(api, *objects)
    return api.get(TRAINER, "TrainJob", NS, NAME)


def llama_jobset(api):
    return api.get(JOBSET, "JobSet", NS, NAME)


def state(api):
    return (api.get(TRAINER, "TrainJob", NS, NAME), llama_jobset(api),
            api.list(KAI_PG, "PodGroup", NS) + api.list(SP_PG, "PodGroup", NS))


def notes(obj):
    return obj["metadata"].get("annotations") or {}


def labels(obj):
    return obj["metadata"].get("labels") or {}


def pod_meta(jobset):
    return [rj["template"]["spec"]["template"].get("metadata") or {} for rj in jobset["spec"]["replicatedJobs"]]


def events_of(api, reason=None):
    return [e for e in api.list("v1", "Event", NS) if reason is None or e["reason"] == reason]


def trainjob_writes(api):
    return [c for c in api.writes() if c.resource == "trainjobs"]


def assert_trainjob_untouched(api, name=NAME):
    """The TrainJob is never written on the path of a gang: no call wrote it, and it carries no kai_fn marker."""
    assert trainjob_writes(api) == []
    tj = api.get(TRAINER, "TrainJob", NS, name)
    assert [k for k in notes(tj) if k.startswith("kai-fn/") and k != "kai-fn/hold"] == []
    return tj


def assert_still_held(jobset):
    """As the admission policy left it: suspended, labelled, undecided."""
    assert jobset["spec"]["suspend"] is True and labels(jobset).get(HELD) == "true"
    assert "kai-fn/podgroup" not in notes(jobset) and "kai-fn/skipped" not in notes(jobset)


def assert_done(api, podgroup=PG, pg_api=KAI_PG, *, suspended=False):
    """The gang exists and the JobSet carries the decision, without the hold's label; it runs unless ``suspended``
    (its TrainJob is)."""
    tj, js, pgs = state(api)
    assert [p["metadata"]["name"] for p in pgs] == [podgroup]
    assert pgs[0]["apiVersion"] == pg_api
    assert notes(js)["kai-fn/podgroup"] == podgroup and HELD not in labels(js)
    assert js["spec"]["suspend"] is suspended
    assert ("kai-fn/released-at" in notes(js)) is not suspended
    assert_trainjob_untouched(api)
    for obj in (tj, js, pgs[0]):
        crds.validate(obj)
    return tj, js, pgs[0]


def verbs(api):
    """The calls made since the log was reset, but the opted-in namespaces' LIST (made once per TTL)."""
    return [(c.verb, c.resource) for c in api.calls if not opt_in_read(c)]


def jobset_patches(api):
    return [c for c in api.calls if c.verb == "patch" and c.resource == "jobsets"]


def annotations_added(ops):
    """The JobSet annotations a JSON Patch adds, whether it adds the map whole or key by key."""
    added = {}
    for op in ops:
        if op["op"] == "add" and op["path"] == "/metadata/annotations":
            added.update(op["value"])
        elif op["op"] == "add" and op["path"].startswith("/metadata/annotations/"):
            added[op["path"].rsplit("/", 1)[1].replace("~1", "/").replace("~0", "~")] = op["value"]
    return added


def waiting_metric(fn, reason):
    with urllib.request.urlopen(fn.url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    prefix = f'kai_fn_waiting_events_total{{reason="{reason}"}} '
    return next((float(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix)), 0.0)


# -- the happy paths ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["resource", "ref", "structured"])
def test_a_plain_trainjob_gets_its_podgroup_and_its_held_jobset_is_decided_with_labelled_pods(api, function, mode):
    tj = seed_llama(api)
    assert "suspend" not in tj["spec"]  # submitted as a user writes it
    event = ref(NS, NAME) if mode == "ref" else resource(tj, structured=mode == "structured")
    answer = send(function.url, event)
    assert (answer.status, answer.body, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "", "done")
    _, js, pg = assert_done(api)
    assert pg["spec"] == {"queue": "team-a", "minMember": 4, "stalenessGracePeriod": "-1s", "priorityClassName": "train"}
    assert pg["metadata"]["ownerReferences"][0]["uid"] == UID
    assert pod_meta(js) and all(m["annotations"]["pod-group-name"] == PG
                                and m["labels"]["kai.scheduler/queue"] == "team-a" for m in pod_meta(js))
    assert notes(js)["kai.scheduler/skip-podgrouper"] == "true"
    assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["name"] == "node"
    (event_obj,) = events_of(api, "GangCreated")
    assert event_obj["involvedObject"]["kind"] == "TrainJob" and event_obj["involvedObject"]["uid"] == UID
    assert event_obj["type"] == "Normal" and PG in event_obj["message"] and "minMember 4" in event_obj["message"]
    assert "queue team-a" in event_obj["message"] and "nvidia.com/gpu=8" in event_obj["message"]
    assert event_obj["message"].endswith("released")
    # Unauthenticated delivery (no KAI_FN_AUDIENCE): the TrainJob is read first, whatever the event carried.
    assert verbs(api) == [("get", "trainjobs"), ("get", "jobsets"), ("get", "clustertrainingruntimes"),
                          ("list", "queues"), ("create", "podgroups"), ("patch", "jobsets"), ("create", "events")]


def test_pods_are_labelled_and_the_jobset_resumed_only_after_the_podgroup_exists_in_one_guarded_patch(api, function):
    send(function.url, resource(seed_llama(api)))
    order = [(c.verb, c.resource) for c in api.writes()]
    assert order == [("create", "podgroups"), ("patch", "jobsets"), ("create", "events")]
    (patch,) = jobset_patches(api)
    assert patch.content_type == "application/json-patch+json" and isinstance(patch.body, list)
    ops = patch.body
    assert {"op": "test", "path": "/metadata/uid", "value": "0a9b8c7d-6e5f-4a3b-9c2d-1e0f9a8b7c6d"} in ops
    assert {"op": "test", "path": "/spec/suspend", "value": True} in ops
    assert any(op["op"] == "test" and op["path"] == "/metadata/resourceVersion" for op in ops)
    assert {"op": "remove", "path": "/metadata/labels/kai-fn~1held"} in ops
    assert ops[-1] == {"op": "replace", "path": "/spec/suspend", "value": False}  # the last op: the resume
    added = annotations_added(ops)
    assert added["kai-fn/podgroup"] == PG and added["kai.scheduler/skip-podgrouper"] == "true"
    assert "kai-fn/released-at" in added


def test_scheduler_plugins_flavor_writes_the_coscheduling_podgroup(api, functions):
    fn = functions(KAI_PODGROUP_FLAVOR="scheduler-plugins")
    assert send(fn.url, resource(seed_llama(api))).status == 200
    _, js, pg = assert_done(api, podgroup=NAME, pg_api=SP_PG)
    assert pg["spec"] == {"minMember": 4, "minResources": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"},
                          "scheduleTimeoutSeconds": 60}
    assert pod_meta(js) and all(m["labels"]["scheduling.x-k8s.io/pod-group"] == NAME for m in pod_meta(js))


def test_staged_runtime_from_a_namespaced_trainingruntime_in_ref_mode(api, function):
    seed(api, sample_object("queue-team-a"), sample_object("trainingruntime-torch-llm-kai"),
         sample_object("trainjob-bert-pretrain"), held_by_0_2(sample_object("jobset-bert-pretrain")))
    assert send(function.url, ref(NS, "bert-pretrain")).status == 200
    pgs = {pg["metadata"]["name"]: pg for pg in api.list(KAI_PG, "PodGroup", NS)}
    main = "pg-bert-pretrain-2b7e4c1d-8f3a-4b6e-9d2c-5a1f0e3b7c8d"
    assert pgs
    for pg in pgs.values():
        crds.validate(pg)
    assert {name: pg["spec"]["minMember"] for name, pg in pgs.items()} == {f"{main}-stage-0": 2, main: 3}
    js = api.get(JOBSET, "JobSet", NS, "bert-pretrain")
    assert [m["annotations"]["pod-group-name"] for m in pod_meta(js)] == [f"{main}-stage-0", f"{main}-stage-0", main]
    assert notes(js)["kai-fn/podgroup"] == main and HELD not in labels(js) and js["spec"]["suspend"] is False
    assert ("get", "trainingruntimes") in verbs(api)
    assert_trainjob_untouched(api, "bert-pretrain")


# -- the JobSet trigger: the held JobSet's own events ------------------------------------------------------------

def test_a_held_jobsets_add_runs_its_trainjobs_pass_and_one_patch_decides_the_jobset(api, function):
    seed_llama(api)
    api.reset_calls()
    answer = send(function.url, resource(llama_jobset(api)))
    assert (answer.status, answer.body, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "", "done")
    assert_done(api)
    # The JobSet event names its TrainJob (controller ownerReference) and carries no TrainJob: the pass reads it.
    assert verbs(api)[:2] == [("get", "trainjobs"), ("get", "jobsets")]
    assert [(c.verb, c.resource, c.status) for c in api.writes()] == [
        ("create", "podgroups", 201), ("patch", "jobsets", 200), ("create", "events", 201)]
    (patch,) = jobset_patches(api)
    assert {"op": "remove", "path": "/metadata/labels/kai-fn~1held"} in patch.body
    assert {"op": "replace", "path": "/spec/suspend", "value": False} in patch.body
    assert annotations_added(patch.body)["kai-fn/podgroup"] == PG


def test_the_shipped_held_jobset_sample_decides_its_jobset(api, function):
    seed_llama(api)
    answer = post(function.url, load_sample(REPO / "samples" / "events" / "jobset-held.json"))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    assert_done(api)


def test_a_jobset_delete_is_ignored_with_no_api_call(api, function):
    seed_llama(api)
    api.reset_calls()
    answer = send(function.url, resource(llama_jobset(api), "delete"))
    assert (answer.status, answer.body, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "", "ignored")
    assert api.calls == []


NOT_A_TRAINJOBS = {
    "no owner": lambda js: js["metadata"].pop("ownerReferences"),
    "owner not its controller": lambda js: js["metadata"]["ownerReferences"][0].update(controller=False),
    "controlled by another kind": lambda js: js["metadata"]["ownerReferences"][0].update(
        apiVersion="apps/v1", kind="Deployment"),
}


@pytest.mark.parametrize("change", NOT_A_TRAINJOBS.values(), ids=list(NOT_A_TRAINJOBS))
def test_a_jobset_no_trainjob_controls_is_ignored_with_no_api_call(api, function, change):
    seed_llama(api)
    js = llama_jobset(api)
    change(js)
    api.reset_calls()
    answer = send(function.url, resource(js))
    assert (answer.status, answer.body, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "", "ignored")
    assert api.calls == []


def test_a_jobset_event_in_reference_mode_is_ignored_with_no_api_call(api, function):
    seed_llama(api)
    sample = resource(llama_jobset(api))
    sample.headers["Ce-Type"] = "dev.knative.apiserver.ref.add"
    api.reset_calls()
    answer = send(function.url, sample)
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "ignored")
    assert api.calls == []


MALFORMED_JOBSETS = {
    "data kind not JobSet": lambda js: js.update(kind="Job"),
    "wrong apiVersion": lambda js: js.update(apiVersion="jobset.x-k8s.io/v1alpha1"),
    "metadata not an object": lambda js: js.update(metadata="llama-finetune"),
    "ownerReferences not a list": lambda js: js["metadata"].update(ownerReferences={"kind": "TrainJob"}),
    "controller without uid": lambda js: js["metadata"]["ownerReferences"][0].pop("uid"),
    "controller name not a name": lambda js: js["metadata"]["ownerReferences"][0].update(name="Not_A_Name"),
    "namespace missing": lambda js: js["metadata"].pop("namespace"),
    "labels not strings": lambda js: js["metadata"]["labels"].update({HELD: True}),
}


@pytest.mark.parametrize("change", MALFORMED_JOBSETS.values(), ids=list(MALFORMED_JOBSETS))
def test_a_malformed_jobset_event_is_400_with_one_line_and_no_api_call(api, function, change):
    seed_llama(api)
    js = llama_jobset(api)
    sample = resource(js)
    change(js)
    sample = dataclasses.replace(sample, body=json.dumps(js).encode())
    api.reset_calls()
    answer = send(function.url, sample)
    assert answer.status == 400
    assert len(answer.body.strip().splitlines()) == 1 and answer.body.strip()
    assert api.calls == []


@pytest.mark.parametrize("trainjob", ["gone", "replaced"])
def test_a_held_jobset_whose_trainjob_is_gone_or_replaced_is_ignored_after_one_read(api, function, trainjob):
    seed_llama(api)
    if trainjob == "gone":
        api.delete(TRAINER, "TrainJob", NS, NAME)
    else:
        tj = sample_object("trainjob-llama-finetune")
        tj["metadata"]["uid"] = "0e0e0e0e-1111-4222-8333-444444444444"
        api.put(tj)
    api.reset_calls()
    answer = send(function.url, resource(llama_jobset(api)))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "ignored")
    assert verbs(api) == [("get", "trainjobs")] and api.writes() == []
    assert_still_held(llama_jobset(api))


def test_a_trainjob_submitted_plainly_is_never_written_on_the_path_of_a_gang(api, functions):
    """Every event of the gang's life, in the process that decided it and in one that did not: no TrainJob write."""
    fn = functions()
    replica = functions(KAI_FN_MAX_BODY_BYTES="4194303")  # another process: it decided nothing
    submitted = seed_llama(api)
    answers = [send(fn.url, resource(submitted)), send(fn.url, resource(llama_jobset(api)))]
    pg = api.get(KAI_PG, "PodGroup", NS, PG)
    for url in (fn.url, replica.url):
        answers += [send(url, resource(submitted)), send(url, resource(submitted, "update")),
                    send(url, ref(NS, NAME, "update")), send(url, resource(pg, "update")), send(url, ping())]
    assert [(a.status, a.body) for a in answers] == [(200, "")] * 12
    assert answers[0].headers.get("X-Kai-Fn-Outcome") == "done"
    assert_done(api)
    assert [c for c in api.calls if c.resource == "trainjobs" and c.verb not in ("get", "list")] == []
    assert api.get(TRAINER, "TrainJob", NS, NAME) == submitted


# -- what is not done, and why -----------------------------------------------------------------------------------

@pytest.mark.parametrize("then", ["the held JobSet's add", "the TrainJob's update"])
def test_an_add_before_its_jobset_makes_the_gang_and_the_next_event_decides_the_held_jobset(api, function, then):
    """Trainer's JobSet comes 10-700 ms after the add: the gang is made at once, before any pod can exist; a JobSet
    the previous version's policy held is then decided by its own event (or the TrainJob's next)."""
    tj = seed_llama(api, jobset=False)
    api.reset_calls()
    first = send(function.url, resource(tj))
    assert (first.status, first.headers.get("X-Kai-Fn-Outcome")) == (200, "done") and "Retry-After" not in first.headers
    assert [(c.verb, c.resource) for c in api.writes()] == [("create", "podgroups"), ("create", "events")]
    seed(api, held_by_0_2(sample_object("jobset-llama-finetune")))  # as the previous version's policy held it
    if then == "the TrainJob's update":
        update = copy.deepcopy(tj)
        update["status"] = {"conditions": [{"type": "Created", "status": "True", "reason": "JobSetCreated"}]}
        event = resource(update, "update")
    else:
        event = resource(llama_jobset(api))
    answer = send(function.url, event)
    assert answer.status == 200
    if then == "the TrainJob's update":  # this process made the gang: the update costs nothing; the JobSet's event acts
        assert answer.headers.get("X-Kai-Fn-Outcome") == "skipped"
        answer = send(function.url, resource(llama_jobset(api)))
    assert answer.headers.get("X-Kai-Fn-Outcome") == "done"
    assert_done(api)


def test_a_jobset_running_and_never_held_is_too_late_marked_on_the_jobset_and_left_running(api, functions):
    fn = functions()
    tj = seed_llama(api, held=False)
    js = llama_jobset(api)
    js["spec"]["suspend"] = False  # no admission policy: Trainer made it running
    api.put(js)
    before = llama_jobset(api)
    answer = send(fn.url, resource(tj))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped")
    _, js, pgs = state(api)
    assert pgs == [] and notes(js) == {"kai-fn/skipped": "running"}
    assert js["spec"] == before["spec"] and labels(js) == labels(before)
    (warning,) = events_of(api, "TooLate")
    assert warning["type"] == "Warning" and "admission policy" in warning["message"]
    assert_trainjob_untouched(api)
    api.reset_calls()
    assert send(fn.url, resource(tj)).status == 200
    assert api.calls == []  # this process decided it: every later event is free
    replica = functions(KAI_FN_MAX_BODY_BYTES="4194303")  # another process reads the mark, and writes nothing
    answer = send(replica.url, resource(tj))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped")
    assert verbs(api) == [("get", "trainjobs"), ("get", "jobsets")]
    assert len(events_of(api, "TooLate")) == 1



def test_a_running_jobset_whose_status_changes_under_the_too_late_mark_is_read_again_and_marked_in_one_delivery(
        api, function):
    """JobSet's controller writes a running JobSet's status between the pass's read and its guarded mark: the mark's
    guard fails (422), and the pass decides again on the JobSet read now, as a gang's patch does, not a 503."""
    tj = seed_llama(api, held=False)
    js = llama_jobset(api)
    js["spec"]["suspend"] = False
    api.put(js)
    api.faults = written_before_its_first_patch(api, lambda live: live.update(
        status={"replicatedJobsStatus": [{"name": "node", "active": 1}]}))
    answer = send(function.url, resource(tj))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped")
    assert [c.status for c in jobset_patches(api)] == [422, 200]
    _, js, pgs = state(api)
    assert pgs == [] and notes(js) == {"kai-fn/skipped": "running"} and js["status"]["replicatedJobsStatus"]
    assert len(events_of(api, "TooLate")) == 1


def written_before_its_first_patch(api, change):
    """Emulator faults under which another writer changes the JobSet (``change`` on its live copy; a new
    resourceVersion, as any write gets) just before kai_fn's first JobSet patch arrives."""
    written = []

    def meanwhile(call):
        if call.verb == "patch" and call.resource == "jobsets" and not written:
            live = llama_jobset(api)
            change(live)
            del live["metadata"]["resourceVersion"]
            written.append(api.put(live))
        return None

    return meanwhile


def test_missing_runtime_warns_once_answers_2xx_and_keeps_the_jobset_held(api, function):
    tj = seed_llama(api, runtime=False)
    for _ in range(2):
        assert send(function.url, resource(tj)).status == 200
    (warning,) = events_of(api, "RuntimeNotFound")
    assert "ClusterTrainingRuntime torch-distributed-kai" in warning["message"]
    assert [c.resource for c in api.writes()] == ["events", "events"]  # the second is a 409: one Event
    assert_still_held(llama_jobset(api))


def resnet(api, jobset):
    """resnet-eval, out of scope (its runtime does not ask for KAI), with no JobSet, a held one or a plain one."""
    rt = sample_object("clustertrainingruntime-torch")
    tj = sample_object("trainjob-resnet-eval")
    seed(api, rt, tj)
    if jobset != "none":
        api.put(jobset_for(tj, rt, uid="1d2c3b4a-5e6f-4a7b-8c9d-0e1f2a3b4c5d", held=jobset == "held"))
    return api.get(TRAINER, "TrainJob", NS, "resnet-eval")


@pytest.mark.parametrize("jobset", ["none", "plain"])
def test_out_of_scope_trainjob_not_held_is_ignored_and_causes_no_write(api, function, jobset):
    tj = resnet(api, jobset)
    before = api.get(JOBSET, "JobSet", NS, "resnet-eval")
    answer = send(function.url, resource(tj))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "ignored")
    assert api.writes() == []
    assert api.get(JOBSET, "JobSet", NS, "resnet-eval") == before


@pytest.mark.parametrize("via", ["TrainJob", "JobSet"])
def test_a_held_jobset_of_an_out_of_scope_trainjob_is_let_go_marked_without_a_gang(api, function, via):
    tj = resnet(api, "held")
    js = api.get(JOBSET, "JobSet", NS, "resnet-eval")
    answer = send(function.url, resource(tj if via == "TrainJob" else js))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    js = api.get(JOBSET, "JobSet", NS, "resnet-eval")
    assert notes(js) == {"kai-fn/skipped": "out-of-scope"} and HELD not in labels(js) and js["spec"]["suspend"] is False
    assert api.list(KAI_PG, "PodGroup", NS) == [] and events_of(api) == []
    assert [(c.verb, c.resource) for c in api.writes()] == [("patch", "jobsets")]
    assert_trainjob_untouched(api, "resnet-eval")


def test_blocked_plan_warns_writes_nothing_else_and_keeps_the_jobset_held(api, function):
    rt = sample_object("clustertrainingruntime-torch-kai")
    del rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["schedulerName"]
    seed(api, rt)
    tj = seed_llama(api, runtime=False)
    assert send(function.url, resource(tj)).status == 200
    assert [c.resource for c in api.writes()] == ["events"]
    (warning,) = events_of(api, "PlanBlocked")
    assert "pods would not be scheduled by KAI" in warning["message"]
    assert_still_held(llama_jobset(api))


SUSPENDED_BY = {
    "Kueue": (lambda tj: tj["metadata"]["labels"].update({"kueue.x-k8s.io/queue-name": "lq"}), "Kueue admits it"),
    "its author": (lambda tj: None, "the TrainJob is suspended"),
}


@pytest.mark.parametrize("change, reason", SUSPENDED_BY.values(), ids=list(SUSPENDED_BY))
def test_a_suspended_trainjob_gets_its_gang_and_decision_but_its_jobset_stays_suspended(api, function, change, reason):
    """Trainer resumes the JobSet with the TrainJob: kai_fn decides it, and leaves the resume to them."""
    tj = sample_object("trainjob-llama-finetune")
    tj["spec"]["suspend"] = True
    change(tj)
    tj = seed_llama(api, trainjob=tj)
    answer = send(function.url, resource(tj))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    live, _, _ = assert_done(api, suspended=True)
    assert live["spec"]["suspend"] is True
    (created,) = events_of(api, "GangCreated")
    assert f"left suspended: {reason}" in created["message"]
    (patch,) = jobset_patches(api)
    assert not any(op["path"] == "/spec/suspend" and op["op"] == "replace" for op in patch.body)


TOLD_TO_WAIT = {
    "kai-fn/hold": (lambda tj: tj["metadata"].setdefault("annotations", {}).update({"kai-fn/hold": "true"}), {},
                    "kai-fn/hold is true"),
    "KAI_FN_RESUME=false": (lambda tj: None, {"KAI_FN_RESUME": "false"}, "KAI_FN_RESUME is false"),
}


@pytest.mark.parametrize("change, settings, reason", TOLD_TO_WAIT.values(), ids=list(TOLD_TO_WAIT))
def test_told_to_wait_its_gang_and_templates_are_made_but_the_jobset_stays_held_undecided(
        api, functions, change, settings, reason):
    fn = functions(**settings)
    tj = sample_object("trainjob-llama-finetune")
    change(tj)
    tj = seed_llama(api, trainjob=tj)
    answer = send(fn.url, resource(tj))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    _, js, pgs = state(api)
    assert [p["metadata"]["name"] for p in pgs] == [PG]
    assert_still_held(js)  # no decision: the policy keeps turning Trainer's re-applies back
    assert pod_meta(js) and all(m["annotations"]["pod-group-name"] == PG for m in pod_meta(js))
    (created,) = events_of(api, "GangCreated")
    assert f"left suspended: {reason}" in created["message"]
    assert_trainjob_untouched(api)
    # Once it may start (the hold lifted; a function that resumes), its next event releases it.
    live = api.get(TRAINER, "TrainJob", NS, NAME)
    notes(live).pop("kai-fn/hold", None)
    api.put(live)
    answer = send(functions().url, resource(live, "update"))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    assert_done(api)


# -- at-least-once delivery --------------------------------------------------------------------------------------

def test_any_later_event_of_a_trainjob_this_process_decided_costs_no_api_call(api, function):
    tj = seed_llama(api)
    held = llama_jobset(api)
    assert send(function.url, resource(tj)).status == 200
    api.reset_calls()
    answers = [send(function.url, event) for event in (resource(tj, "update"), resource(tj), resource(held))]
    assert [(a.status, a.headers.get("X-Kai-Fn-Outcome")) for a in answers] == [(200, "skipped")] * 3
    assert api.calls == []
    # A reference-mode event names no uid: it costs the reads that find the decision on the JobSet, and no write.
    answer = send(function.url, ref(NS, NAME, "update"))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped")
    assert verbs(api) == [("get", "trainjobs"), ("get", "jobsets")]


@pytest.mark.parametrize("authenticated, calls", [
    # Authenticated or not, the body is never trusted: the TrainJob is read, the JobSet shows the decision.
    (True, [("get", "trainjobs"), ("get", "jobsets")]),
    (False, [("get", "trainjobs"), ("get", "jobsets")]),
], ids=["authenticated", "unauthenticated"])
def test_a_redelivered_add_costs_another_process_reads_only_and_the_deciding_one_nothing(
        api, functions, authenticated, calls):
    """Another replica (or this one after a restart) reads the decision on the JobSet; the process that decided it
    remembers and answers with no call at all."""
    settings = {"KAI_FN_AUDIENCE": "kai-fn"} if authenticated else {}
    fn = functions(**settings)
    replica = functions(**settings, KAI_FN_MAX_BODY_BYTES="4194303")  # another process: it decided nothing
    token = api.issue_token(*TRAINJOBS_SOURCE, ["kai-fn"]) if authenticated else None
    tj = seed_llama(api)
    assert send(fn.url, resource(tj), token=token).status == 200
    live = api.get(TRAINER, "TrainJob", NS, NAME)
    live["spec"]["suspend"] = True  # the user pauses it (Trainer would suspend the JobSet)
    api.put(live)
    api.reset_calls()
    answer = send(replica.url, resource(tj), token=token)  # the original add, redelivered
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped")
    assert sorted(v for v in verbs(api) if v != ("create", "tokenreviews")) == sorted(calls)  # at once if authenticated
    api.reset_calls()
    answer = send(fn.url, resource(tj), token=token)
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped")
    assert [c for c in api.calls if c.resource != "tokenreviews"] == []
    assert api.get(TRAINER, "TrainJob", NS, NAME)["spec"]["suspend"] is True
    assert len(events_of(api, "GangCreated")) == 1


@pytest.mark.parametrize("authenticated", [True, False], ids=["authenticated", "unauthenticated"])
def test_an_add_redelivered_after_an_operator_released_its_jobset_keeps_the_operators_mark_and_is_not_too_late(
        api, functions, authenticated):
    fn = functions(KAI_FN_AUDIENCE="kai-fn") if authenticated else functions()
    token = api.issue_token(*TRAINJOBS_SOURCE, ["kai-fn"]) if authenticated else None
    tj = seed_llama(api)  # held while the function was down: this is the add event's copy
    js = llama_jobset(api)  # kai_fn release: marked, the label removed, resumed
    js["metadata"]["annotations"] = {"kai-fn/skipped": "released-by-operator"}
    del js["metadata"]["labels"][HELD]
    js["spec"]["suspend"] = False
    api.put(js)
    answer = send(fn.url, resource(tj), token=token)  # the function is back; the add comes late
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped")
    _, js, pgs = state(api)
    assert pgs == [] and events_of(api) == []
    assert notes(js) == {"kai-fn/skipped": "released-by-operator"}
    assert [c for c in api.writes() if c.resource != "tokenreviews"] == []


def test_twenty_concurrent_deliveries_of_both_triggers_make_one_podgroup_and_one_correct_jobset(api, function):
    tj = seed_llama(api)
    triggers = [resource(tj), resource(llama_jobset(api))]  # the TrainJob's add and the held JobSet's, ten each
    barrier = threading.Barrier(20)
    answers = []

    def deliver(event):
        barrier.wait()
        answers.append(send(function.url, event).status)

    threads = [threading.Thread(target=deliver, args=(triggers[i % 2],)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert answers == [200] * 20
    _, js, _ = assert_done(api)
    assert pod_meta(js) == [{"labels": {"kai.scheduler/queue": "team-a"},
                             "annotations": {"pod-group-name": PG, "kai.scheduler/skip-podgrouper": "true"}}]
    assert sum(1 for c in api.calls if c.verb == "create" and c.resource == "podgroups" and c.status == 201) == 1
    assert sum(1 for c in jobset_patches(api) if c.status == 200) == 1
    assert len(events_of(api, "GangCreated")) == 1


def test_someone_elses_podgroup_of_the_gangs_name_is_kept_untouched_and_never_the_gang(api, function):
    """tests/function/test_trust.py has the cases; kai_fn's own from an earlier pass is adopted ("in place")."""
    tj = seed_llama(api)
    theirs = {"apiVersion": KAI_PG, "kind": "PodGroup", "metadata": {"name": PG, "namespace": NS},
              "spec": {"minMember": 99, "queue": "someone-elses"}}
    seed(api, theirs)
    before = api.get(KAI_PG, "PodGroup", NS, PG)
    assert send(function.url, resource(tj)).headers["X-Kai-Fn-Outcome"] == "blocked"
    assert api.get(KAI_PG, "PodGroup", NS, PG) == before
    assert events_of(api, "GangCreated") == [] and len(events_of(api, "NotMadeByKaiFn")) == 1
    assert "kai-fn/podgroup" not in notes(llama_jobset(api))


def test_a_jobset_changed_under_the_patch_is_read_again_and_decided(api, function):
    """The patch is guarded by the resourceVersion read: another writer's change in between fails it (422), and the
    pass decides the JobSet as it now is."""
    tj = seed_llama(api)
    api.faults = written_before_its_first_patch(
        api, lambda live: live["metadata"].setdefault("annotations", {}).update({"someone/else": "was here"}))
    answer = send(function.url, resource(tj))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    assert [c.status for c in jobset_patches(api)] == [422, 200]
    _, js, _ = assert_done(api)
    assert notes(js)["someone/else"] == "was here"
    assert sum(1 for c in api.calls if c.verb == "create" and c.resource == "podgroups" and c.status == 201) == 1


def test_a_jobset_patch_the_api_server_refuses_is_reported_once_not_retried_as_a_guard(api, function):
    """A 422 that names the JobSet and its fields (its schema, a CEL rule) is no guard that stopped holding: one
    patch, a Warning with the API server's message, ``blocked``; on main it was retried three times, then 503 for
    ever."""
    tj = seed_llama(api)
    refused = Fault(status=422, details={"name": NAME, "group": "jobset.x-k8s.io", "kind": "JobSet", "causes": [
        {"reason": "FieldValueInvalid", "field": "spec.replicatedJobs", "message": "a rule of the tenant's"}]})
    api.faults = lambda call: refused if call.verb == "patch" and call.resource == "jobsets" else None
    answer = send(function.url, resource(tj))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "blocked")
    assert [c.status for c in jobset_patches(api)] == [422]
    (warning,) = events_of(api, "Unprocessable")
    assert warning["message"].startswith("the API server refused kai_fn's write: injected fault: HTTP 422")


STEPS = {
    "get trainjob": lambda c: c.verb == "get" and c.resource == "trainjobs",
    "get jobset": lambda c: c.verb == "get" and c.resource == "jobsets",
    "create podgroup": lambda c: c.verb == "create" and c.resource == "podgroups",
    "patch jobset": lambda c: c.verb == "patch" and c.resource == "jobsets",
}
FAULTS = {"500": Fault(status=500), "503": Fault(status=503), "429": Fault(status=429, retry_after=1),
          "hang": Fault(hang=1.6)}


@pytest.mark.parametrize("fault", FAULTS, ids=list(FAULTS))
@pytest.mark.parametrize("step", STEPS, ids=list(STEPS))
def test_api_faults_give_503_never_a_pod_naming_a_missing_podgroup_and_redelivery_finishes(api, function, step, fault):
    tj = seed_llama(api)
    api.faults = lambda call: FAULTS[fault] if STEPS[step](call) else None
    answer = send(function.url, resource(tj))
    assert answer.status == 503 and "Retry-After" in answer.headers
    _, js, pgs = state(api)
    if any(m.get("annotations", {}).get("pod-group-name") for m in pod_meta(js)):
        assert [p["metadata"]["name"] for p in pgs] == [PG]
    if FAULTS[fault].status is not None:  # refused, so not applied: still held (a hung request may land later)
        assert_still_held(js)
    assert_trainjob_untouched(api)
    api.faults = None
    assert send(function.url, resource(tj)).status == 200
    assert_done(api)


# -- what is refused or ignored without an API call --------------------------------------------------------------

MALFORMED = sorted(p.stem for p in (REPO / "samples" / "events").glob("malformed-*.json"))


@pytest.mark.parametrize("name", MALFORMED)
def test_every_malformed_sample_is_400_with_one_line_and_no_api_call(api, function, name):
    seed_llama(api)
    api.reset_calls()
    answer = post(function.url, load_sample(REPO / "samples" / "events" / f"{name}.json"))
    assert answer.status == 400
    assert len(answer.body.strip().splitlines()) == 1 and answer.body.strip()
    assert api.calls == []


# Each shipped sample on its own (a fresh process, the cluster of samples/cluster); `python -m kai_fn demo` sends
# them in turn, where the TrainJob's events after jobset-held find the work done ("skipped").
SAMPLES = [
    ("jobset-held", 200, "done"),
    ("resource-add", 200, "done"),
    ("resource-update", 200, "done"),
    ("ref-add", 200, "done"),
    ("resource-delete", 200, "ignored"),
    ("out-of-scope", 200, "ignored"),
    ("running", 200, "skipped"),
    ("exceeds-queue", 200, "blocked"),
]


@pytest.mark.parametrize("sample, status, outcome", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_the_shipped_samples_get_their_documented_answer(api, function, sample, status, outcome):
    seed_llama(api)
    seed(api, sample_object("clustertrainingruntime-torch"), sample_object("trainjob-resnet-eval"),
         sample_object("trainjob-whisper-asr"), sample_object("jobset-whisper-asr"),
         sample_object("trainingruntime-torch-llm-kai"), sample_object("trainjob-bert-pretrain"),
         held_by_0_2(sample_object("jobset-bert-pretrain")), sample_object("queue-team-a-small"),
         sample_object("trainjob-gpt-large"), held_by_0_2(sample_object("jobset-gpt-large")))
    answer = post(function.url, load_sample(REPO / "samples" / "events" / f"{sample}.json"))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome"), answer.body) == (status, outcome, "")
    assert trainjob_writes(api) == []


@pytest.mark.parametrize("mutate", [
    lambda s: s.headers.update({"Ce-Kind": "Pod"}),
    lambda s: s.headers.update({"Ce-Type": "dev.knative.apiserver.resource.delete"}),
    lambda s: s.headers.update({"Ce-Type": "com.example.other"}),
], ids=["other-kind", "delete", "other-type"])
def test_other_kinds_types_and_deletes_are_2xx_and_cost_nothing(api, function, mutate):
    sample = resource(seed_llama(api))
    mutate(sample)
    api.reset_calls()
    answer = send(function.url, sample)
    assert (answer.status, answer.body) == (200, "")
    assert api.calls == []


def test_oversized_body_is_413_and_costs_nothing(api, functions):
    fn = functions(KAI_FN_MAX_BODY_BYTES="2048")
    tj = seed_llama(api)
    tj["metadata"]["annotations"] = {"padding": "x" * 4096}
    api.reset_calls()
    assert send(fn.url, resource(tj)).status == 413
    assert api.calls == []


@pytest.mark.parametrize("path", ["/", "/healthz", "/anything"])
def test_get_on_any_path_is_healthy(function, path):
    with urllib.request.urlopen(function.url + path, timeout=5) as r:
        assert (r.status, r.read()) == (200, b"ok\n")


def test_a_trainjob_event_outside_the_allowlist_is_ignored_with_no_api_call(api, functions):
    fn = functions(KAI_FN_NAMESPACES="team-b, team-c")
    tj = seed_llama(api)
    api.reset_calls()
    answer = send(fn.url, resource(tj))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "ignored")
    assert api.calls == []


def test_a_held_jobset_outside_the_allowlist_is_let_go_without_a_gang(api, functions):
    """The policy held it, so leaving it alone would leave it suspended for ever: it is released, marked."""
    fn = functions(KAI_FN_NAMESPACES="team-b, team-c")
    seed_llama(api)
    answer = send(fn.url, resource(llama_jobset(api)))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done")
    _, js, pgs = state(api)
    assert pgs == [] and notes(js) == {"kai-fn/skipped": "out-of-scope"}
    assert HELD not in labels(js) and js["spec"]["suspend"] is False
    assert_trainjob_untouched(api)


# -- resync, cache, settings, logs --------------------------------------------------------------------------------

def another_llama(name="gpt-small", uid="5e0b7f4a-1c6d-4e9b-a2f3-8d7c6b5a4e3f"):
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"].update(name=name, uid=uid)
    js = held_by_0_2(sample_object("jobset-llama-finetune"))
    js["metadata"].update(name=name, uid=f"{uid[:-4]}0000")
    js["metadata"]["ownerReferences"][0].update(name=name, uid=uid)
    return tj, js


def test_resync_decides_held_jobsets_bounded_per_run_with_two_lists_per_opted_in_namespace(api, functions):
    fn = functions(KAI_FN_RESYNC_LIMIT="2")
    seed_llama(api)
    seed(api, sample_object("trainingruntime-torch-llm-kai"), sample_object("trainjob-bert-pretrain"),
         held_by_0_2(sample_object("jobset-bert-pretrain")), *another_llama())
    seed(api, sample_object("clustertrainingruntime-torch"), sample_object("trainjob-resnet-eval"))

    def decided():
        return {j["metadata"]["name"] for j in api.list(JOBSET, "JobSet") if "kai-fn/podgroup" in notes(j)}

    def held():
        return {j["metadata"]["name"] for j in api.list(JOBSET, "JobSet") if HELD in labels(j)}

    def gangs():
        return [pg for pg in api.list(KAI_PG, "PodGroup", NS) if "-stage-" not in pg["metadata"]["name"]]

    api.reset_calls()
    assert send(fn.url, ping()).status == 200
    assert len(decided()) == 2 and len(gangs()) == 2 and len(held()) == 1
    lists = [(c.resource, c.namespace) for c in api.calls if c.verb == "list" and not opt_in_read(c)]
    assert lists[:2 * len(OPTED_IN) + 1] == [*(("trainjobs", ns) for ns in sorted(OPTED_IN)),
                                             *(("jobsets", ns) for ns in sorted(OPTED_IN)), ("podgroups", None)]
    assert send(fn.url, ping()).status == 200
    assert decided() == {"llama-finetune", "bert-pretrain", "gpt-small"} and held() == set()
    assert len(gangs()) == 3
    assert api.get(JOBSET, "JobSet", NS, "resnet-eval") is None
    assert trainjob_writes(api) == []


def test_warm_runtime_cache_saves_the_runtime_get(api, functions):
    fn = functions(KAI_FN_RUNTIME_CACHE_SECONDS="30")
    seed_llama(api)
    seed(api, *another_llama())
    send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, NAME)))
    api.reset_calls()
    assert send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, "gpt-small"))).status == 200
    assert [c for c in api.calls if "runtimes" in c.resource] == []
    assert [(c.verb, c.resource) for c in api.calls if c.resource != "events" and not opt_in_read(c)] == [
        ("get", "trainjobs"), ("get", "jobsets"), ("create", "podgroups"), ("patch", "jobsets")]


@pytest.mark.parametrize("name, value", [
    ("KAI_PODGROUP_FLAVOR", "volcano"), ("KAI_FN_API_TIMEOUT_SECONDS", "-1"), ("KAI_FN_RESUME", "maybe"),
    ("KAI_DEFAULT_QUEUE", "not a queue"), ("KAI_FN_MAX_BODY_BYTES", "lots"), ("KAI_FN_SENDERS", "alice"),
    ("KAI_FN_QUEUE_CHECK", "strict"), ("KAI_FN_SCHEDULE_TIMEOUT_SECONDS", "-5"), ("KAI_FN_ON_TIMEOUT", "delete"),
    ("KAI_FN_STALENESS_GRACE_PERIOD", "60"),
    ("KAI_FN_HEARTBEAT_LEASE", "kai-fn-resync"), ("KAI_FN_BACKGROUND_WORKERS", "-1"),
    ("KAI_FN_RESYNC_BACKOFF_SECONDS", "forever"),
    ("KAI_FN_THREADS", "0"), ("KAI_FN_REQUEST_SECONDS", "0"), ("KAI_FN_REQUEST_SECONDS", "soon"),
])
def test_an_invalid_setting_stops_the_server_at_start_up_naming_it(emulator, name, value):
    with tempfile.TemporaryFile() as log:
        proc = FunctionProcess({"KUBECONFIG": emulator.kubeconfig, name: value}, log=log)
        with pytest.raises(RuntimeError, match="exited"):
            proc.start(ready_timeout=60)
        log.seek(0)
        text = log.read().decode()
    assert f"invalid setting {name}" in text and "Traceback" not in text


def test_one_json_log_line_per_event(api, emulator):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log"
        with path.open("wb") as log, FunctionProcess({"KUBECONFIG": emulator.kubeconfig, "KAI_FN_MAX_BODY_BYTES": "8192",
                                                      "KAI_FN_BACKGROUND_WORKERS": "0"}, log=log) as fn:
            tj = seed_llama(api)
            send(fn.url, resource(llama_jobset(api), event_id="id-1"))
            event = resource(tj, event_id="id-2")
            send(fn.url, event)
            send(fn.url, event)
            post(fn.url, load_sample(REPO / "samples" / "events" / "malformed-data-not-json.json"))
            padded = copy.deepcopy(tj)
            padded["metadata"]["annotations"] = {"padding": "x" * 10000}
            send(fn.url, resource(padded, event_id="id-3"))
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    events = [line for line in lines if line.get("msg") == "event"]
    assert [(e["outcome"], e["status"]) for e in events] == [("done", 200), ("skipped", 200), ("skipped", 200),
                                                             ("bad", 400), ("too_large", 413)]
    first, second = events[0], events[1]
    # The JobSet's event is logged as its TrainJob's pass: the TrainJob's name and uid, the kind that brought it.
    assert {k: first[k] for k in ("type", "id", "kind", "namespace", "name", "uid", "status")} == {
        "type": "dev.knative.apiserver.resource.add", "id": "id-1", "kind": "JobSet", "namespace": NS, "name": NAME,
        "uid": UID, "status": 200}
    # Cold: the opted-in namespaces' LIST, the runtime GET, the Queue LIST.
    assert first["api_calls"] == 8 and first["ms"] > 0 and PG in first["reason"]
    assert (second["kind"], second["id"], second["api_calls"]) == ("TrainJob", "id-2", 0)


def test_without_a_cluster_to_talk_to_the_server_stops_at_start_up_saying_so(tmp_path):
    with (tmp_path / "log").open("w+b") as log:
        proc = FunctionProcess({"KUBECONFIG": str(tmp_path / "missing")}, log=log)
        with pytest.raises(RuntimeError, match="exited"):
            proc.start(ready_timeout=60)
        log.seek(0)
        text = log.read().decode()
    assert "no Kubernetes API to talk to" in text and "Traceback" not in text
