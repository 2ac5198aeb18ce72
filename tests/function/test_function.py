"""The function over real HTTP, against the kmock API emulator through the real kubernetes client."""
from __future__ import annotations

import copy
import json
import tempfile
import threading
from pathlib import Path

import pytest

from kai_fn.local.emulator import Fault
from kai_fn.commands.invoke import load_sample, post
from kai_fn.local.process import REPO, FunctionProcess
from tests import crds
from tests.ce import ping, ref, resource, send
from tests.conftest import JOBSET, KAI_PG, SP_PG, TRAINER, sample_object, seed

NS, NAME = "team-a", "llama-finetune"
UID = "6f1c2b9e-3d4a-4e5f-8a7b-9c0d1e2f3a4b"
PG = f"pg-{NAME}-{UID}"


def seed_llama(api, *, trainjob=None, jobset=True, runtime=True):
    objects = [sample_object("queue-team-a")]
    if runtime:
        objects.append(sample_object("clustertrainingruntime-torch-kai"))
    objects.append(trainjob or sample_object("trainjob-llama-finetune"))
    if jobset:
        objects.append(sample_object("jobset-llama-finetune"))
    seed(api, *objects)
    return api.get(TRAINER, "TrainJob", NS, NAME)


def state(api):
    return (api.get(TRAINER, "TrainJob", NS, NAME), api.get(JOBSET, "JobSet", NS, NAME),
            api.list(KAI_PG, "PodGroup", NS) + api.list(SP_PG, "PodGroup", NS))


def pod_meta(jobset):
    return [rj["template"]["spec"]["template"].get("metadata") or {} for rj in jobset["spec"]["replicatedJobs"]]


def events_of(api, reason=None):
    return [e for e in api.list("v1", "Event", NS) if reason is None or e["reason"] == reason]


def assert_done(api, podgroup=PG, pg_api=KAI_PG):
    tj, js, pgs = state(api)
    assert [p["metadata"]["name"] for p in pgs] == [podgroup]
    assert pgs[0]["apiVersion"] == pg_api
    assert tj["metadata"]["annotations"]["kai-fn/podgroup"] == podgroup
    assert tj["spec"]["suspend"] is False
    for obj in (tj, js, pgs[0]):
        crds.validate(obj)
    return tj, js, pgs[0]


def verbs(api):
    return [(c.verb, c.resource) for c in api.calls]


# -- the happy paths ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["resource", "ref", "structured"])
def test_new_suspended_trainjob_gets_podgroup_labelled_pods_and_is_released(api, function, mode):
    tj = seed_llama(api)
    event = ref(NS, NAME) if mode == "ref" else resource(tj, structured=mode == "structured")
    answer = send(function.url, event)
    assert (answer.status, answer.body) == (200, "")
    _, js, pg = assert_done(api)
    assert pg["spec"] == {"queue": "team-a", "minMember": 4, "stalenessGracePeriod": "-1s"}
    assert pg["metadata"]["ownerReferences"][0]["uid"] == UID
    assert all(m["annotations"]["pod-group-name"] == PG and m["labels"]["kai.scheduler/queue"] == "team-a"
               for m in pod_meta(js))
    assert js["metadata"]["annotations"]["kai.scheduler/skip-podgrouper"] == "true"
    assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["name"] == "node"
    (event_obj,) = events_of(api, "GangCreated")
    assert event_obj["type"] == "Normal" and PG in event_obj["message"] and "minMember 4" in event_obj["message"]
    assert "queue team-a" in event_obj["message"] and "nvidia.com/gpu=8" in event_obj["message"]
    expected = [("get", "clustertrainingruntimes"), ("get", "jobsets"), ("list", "queues"), ("create", "podgroups"),
                ("patch", "jobsets"), ("patch", "trainjobs"), ("create", "events")]
    # Unauthenticated delivery (no KAI_FN_AUDIENCE): the TrainJob is read first, whatever the event carried.
    assert verbs(api) == [("get", "trainjobs")] + expected


def test_pods_are_labelled_only_after_the_podgroup_exists_and_resumed_only_after_that(api, function):
    send(function.url, resource(seed_llama(api)))
    order = [(c.verb, c.resource) for c in api.writes()]
    assert order.index(("create", "podgroups")) < order.index(("patch", "jobsets")) < order.index(("patch", "trainjobs"))
    patch = next(c for c in api.calls if c.verb == "patch" and c.resource == "jobsets")
    assert patch.content_type == "application/json-patch+json" and isinstance(patch.body, list)
    assert {"op": "test", "path": "/spec/suspend", "value": True} in patch.body


def test_scheduler_plugins_flavor_writes_the_coscheduling_podgroup(api, functions):
    fn = functions(KAI_PODGROUP_FLAVOR="scheduler-plugins")
    assert send(fn.url, resource(seed_llama(api))).status == 200
    _, js, pg = assert_done(api, podgroup=NAME, pg_api=SP_PG)
    assert pg["spec"] == {"minMember": 4, "minResources": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"},
                          "scheduleTimeoutSeconds": 60}
    assert all(m["labels"]["scheduling.x-k8s.io/pod-group"] == NAME for m in pod_meta(js))


def test_staged_runtime_from_a_namespaced_trainingruntime_in_ref_mode(api, function):
    seed(api, sample_object("queue-team-a"), sample_object("trainingruntime-torch-llm-kai"), sample_object("trainjob-bert-pretrain"),
         sample_object("jobset-bert-pretrain"))
    assert send(function.url, ref(NS, "bert-pretrain")).status == 200
    pgs = {pg["metadata"]["name"]: pg for pg in api.list(KAI_PG, "PodGroup", NS)}
    main = "pg-bert-pretrain-2b7e4c1d-8f3a-4b6e-9d2c-5a1f0e3b7c8d"
    for pg in pgs.values():
        crds.validate(pg)
    assert {name: pg["spec"]["minMember"] for name, pg in pgs.items()} == {f"{main}-stage-0": 2, main: 3}
    js = api.get(JOBSET, "JobSet", NS, "bert-pretrain")
    assert [m["annotations"]["pod-group-name"] for m in pod_meta(js)] == [f"{main}-stage-0", f"{main}-stage-0", main]
    assert ("get", "trainingruntimes") in verbs(api)


# -- what is not done, and why -----------------------------------------------------------------------------------

def test_an_add_before_its_jobset_waits_with_a_2xx_and_one_read_and_the_next_update_does_the_work(api, function):
    """Trainer's JobSet comes 10-700 ms after the add, and its status update follows it: a 503 would hold the
    namespace's events for the adapter's 3.1 s of retries, so the add is answered at once and the update acts."""
    tj = seed_llama(api, jobset=False)
    api.reset_calls()
    first = send(function.url, resource(tj))
    assert (first.status, first.headers.get("X-Kai-Fn-Outcome")) == (200, "waiting") and "Retry-After" not in first.headers
    calls = [(c.verb, c.resource) for c in api.calls]
    assert calls[-1] == ("get", "jobsets") and calls.count(("get", "jobsets")) == 1 and api.writes() == []
    seed(api, sample_object("jobset-llama-finetune"))
    update = copy.deepcopy(tj)
    update["status"] = {"conditions": [{"type": "Suspended", "status": "True", "reason": "Suspended"}]}
    assert send(function.url, resource(update, "update")).status == 200
    assert_done(api)


def test_running_jobset_is_too_late_marked_and_left_alone(api, function):
    tj = sample_object("trainjob-llama-finetune")
    tj["spec"]["suspend"] = False
    tj = seed_llama(api, trainjob=tj)
    js = api.get(JOBSET, "JobSet", NS, NAME)
    js["spec"]["suspend"] = False
    api.put(js)
    before = api.get(JOBSET, "JobSet", NS, NAME)
    assert send(function.url, resource(tj)).status == 200
    tj, js, pgs = state(api)
    assert pgs == [] and js == before
    assert tj["metadata"]["annotations"]["kai-fn/skipped"] == "running"
    (warning,) = events_of(api, "TooLate")
    assert warning["type"] == "Warning" and "spec.suspend: true" in warning["message"]
    api.reset_calls()
    assert send(function.url, resource(tj)).status == 200
    assert api.calls == []  # the marker makes every later event free


def test_missing_runtime_warns_once_and_answers_2xx(api, function):
    tj = seed_llama(api, runtime=False)
    for _ in range(2):
        assert send(function.url, resource(tj)).status == 200
    (warning,) = events_of(api, "RuntimeNotFound")
    assert "ClusterTrainingRuntime torch-distributed-kai" in warning["message"]
    assert [c.resource for c in api.writes()] == ["events", "events"]  # the second is a 409: one Event


def test_out_of_scope_trainjob_causes_no_write(api, function):
    seed(api, sample_object("clustertrainingruntime-torch"), sample_object("trainjob-resnet-eval"))
    tj = api.get(TRAINER, "TrainJob", NS, "resnet-eval")
    assert send(function.url, resource(tj)).status == 200
    assert api.writes() == []
    assert api.get(TRAINER, "TrainJob", NS, "resnet-eval")["spec"]["suspend"] is True


def test_blocked_plan_warns_and_writes_nothing_else(api, function):
    rt = sample_object("clustertrainingruntime-torch-kai")
    del rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["schedulerName"]
    seed(api, rt)
    tj = seed_llama(api, runtime=False)
    assert send(function.url, resource(tj)).status == 200
    assert [c.resource for c in api.writes()] == ["events"]
    (warning,) = events_of(api, "PlanBlocked")
    assert "pods would not be scheduled by KAI" in warning["message"]


@pytest.mark.parametrize("change, settings, reason", [
    (lambda tj: tj["metadata"]["labels"].update({"kueue.x-k8s.io/queue-name": "lq"}), {}, "Kueue"),
    (lambda tj: tj["metadata"].setdefault("annotations", {}).update({"kai-fn/hold": "true"}), {}, "kai-fn/hold"),
    (lambda tj: None, {"KAI_FN_RESUME": "false"}, "KAI_FN_RESUME"),
])
def test_held_trainjobs_get_their_gang_but_stay_suspended(api, functions, change, settings, reason):
    fn = functions(**settings)
    tj = sample_object("trainjob-llama-finetune")
    change(tj)
    tj = seed_llama(api, trainjob=tj)
    assert send(fn.url, resource(tj)).status == 200
    tj, js, pgs = state(api)
    assert len(pgs) == 1 and tj["metadata"]["annotations"]["kai-fn/podgroup"] == PG
    assert tj["spec"]["suspend"] is True
    assert reason in events_of(api, "GangCreated")[0]["message"]


# -- at-least-once delivery --------------------------------------------------------------------------------------

def test_a_duplicate_carrying_the_marker_costs_no_api_call(api, function):
    tj = seed_llama(api)
    send(function.url, resource(tj))
    api.reset_calls()
    marked = api.get(TRAINER, "TrainJob", NS, NAME)
    assert send(function.url, resource(marked, "update")).status == 200
    assert api.calls == []


@pytest.mark.parametrize("authenticated, calls", [
    (True, [("get", "clustertrainingruntimes"), ("get", "jobsets"), ("get", "trainjobs")]),  # token reviewed before
    (False, [("get", "trainjobs")]),
], ids=["body-trusted-then-reread", "read-first"])
def test_a_stale_duplicate_rereads_instead_of_acting_on_its_old_copy(api, functions, authenticated, calls):
    """Another replica (or this one after a restart) re-reads; the process that released it knows the copy is
    older than its release (resourceVersions compare) and answers with no call at all."""
    settings = {"KAI_FN_AUDIENCE": "kai-fn"} if authenticated else {}
    fn = functions(**settings)
    replica = functions(**settings, KAI_FN_MAX_BODY_BYTES="4194303")  # another process: it released nothing
    token = api.issue_token("kai-fn", "source", ["kai-fn"]) if authenticated else None
    tj = seed_llama(api)
    send(fn.url, resource(tj), token=token)
    live = api.get(TRAINER, "TrainJob", NS, NAME)
    live["spec"]["suspend"] = True  # the user pauses it again
    api.put(live)
    api.reset_calls()
    assert send(replica.url, resource(tj), token=token).status == 200  # the original add, redelivered
    assert [v for v in verbs(api) if v != ("create", "tokenreviews")] == calls
    api.reset_calls()
    answer = send(fn.url, resource(tj), token=token)
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped")
    assert [c for c in api.calls if c.resource != "tokenreviews"] == []
    assert api.get(TRAINER, "TrainJob", NS, NAME)["spec"]["suspend"] is True


@pytest.mark.parametrize("authenticated", [True, False], ids=["body-trusted", "read-first"])
def test_an_add_redelivered_after_an_operator_released_it_keeps_the_operators_mark_and_is_not_too_late(
        api, functions, authenticated):
    fn = functions(KAI_FN_AUDIENCE="kai-fn") if authenticated else functions()
    token = api.issue_token("kai-fn", "source", ["kai-fn"]) if authenticated else None
    tj = seed_llama(api)  # held while the function was down: this is the add event's copy
    live = api.get(TRAINER, "TrainJob", NS, NAME)
    live["metadata"].setdefault("annotations", {})["kai-fn/skipped"] = "released-by-operator"  # kai_fn release
    live["spec"]["suspend"] = False
    api.put(live)
    js = api.get(JOBSET, "JobSet", NS, NAME)
    js["spec"]["suspend"] = False  # Trainer resumed it
    api.put(js)
    assert send(fn.url, resource(tj), token=token).status == 200  # the function is back; the add comes late
    tj, _, pgs = state(api)
    assert pgs == [] and events_of(api) == []
    assert tj["metadata"]["annotations"]["kai-fn/skipped"] == "released-by-operator"


def test_twenty_concurrent_deliveries_make_one_podgroup_and_one_correct_jobset(api, function):
    tj = seed_llama(api)
    event = resource(tj)
    barrier = threading.Barrier(20)
    answers = []

    def deliver():
        barrier.wait()
        answers.append(send(function.url, event).status)

    threads = [threading.Thread(target=deliver) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert answers == [200] * 20
    _, js, _ = assert_done(api)
    assert pod_meta(js) == [{"labels": {"kai.scheduler/queue": "team-a"}, "annotations": {"pod-group-name": PG}}]
    assert sum(1 for c in api.calls if c.verb == "create" and c.resource == "podgroups" and c.status == 201) == 1
    assert len(events_of(api, "GangCreated")) == 1


def test_an_existing_podgroup_is_kept_untouched(api, function):
    tj = seed_llama(api)
    mine = {"apiVersion": KAI_PG, "kind": "PodGroup", "metadata": {"name": PG, "namespace": NS},
            "spec": {"minMember": 99, "queue": "someone-elses"}}
    seed(api, mine)
    before = api.get(KAI_PG, "PodGroup", NS, PG)
    assert send(function.url, resource(tj)).status == 200
    assert api.get(KAI_PG, "PodGroup", NS, PG) == before
    assert "in place" in events_of(api, "GangCreated")[0]["message"]


STEPS = {
    "get jobset": lambda c: c.verb == "get" and c.resource == "jobsets",
    "create podgroup": lambda c: c.verb == "create" and c.resource == "podgroups",
    "patch jobset": lambda c: c.verb == "patch" and c.resource == "jobsets",
    "patch trainjob": lambda c: c.verb == "patch" and c.resource == "trainjobs",
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
    live_tj, js, pgs = state(api)
    if any(m.get("annotations", {}).get("pod-group-name") for m in pod_meta(js)):
        assert [p["metadata"]["name"] for p in pgs] == [PG]
    assert live_tj["spec"]["suspend"] is True and "kai-fn/podgroup" not in (live_tj["metadata"].get("annotations") or {})
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


@pytest.mark.parametrize("sample, status, outcome", [
    ("resource-add", 200, "done"),
    ("resource-update", 200, "done"),
    ("resource-delete", 200, "ignored"),
    ("out-of-scope", 200, "ignored"),
    ("running", 200, "skipped"),
])
def test_the_shipped_samples_get_their_documented_answer(api, function, sample, status, outcome):
    seed_llama(api)
    seed(api, sample_object("clustertrainingruntime-torch"), sample_object("trainjob-resnet-eval"),
         sample_object("trainjob-whisper-asr"), sample_object("jobset-whisper-asr"))
    answer = post(function.url, load_sample(REPO / "samples" / "events" / f"{sample}.json"))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome"), answer.body) == (status, outcome, "")


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


def test_get_on_any_path_is_healthy(function):
    import urllib.request
    for path in ("/", "/healthz", "/anything"):
        with urllib.request.urlopen(function.url + path, timeout=5) as r:
            assert r.status == 200


def test_namespaces_outside_the_allowlist_are_ignored(api, functions):
    fn = functions(KAI_FN_NAMESPACES="team-b, team-c")
    tj = seed_llama(api)
    api.reset_calls()
    assert send(fn.url, resource(tj)).status == 200
    assert api.calls == []


# -- resync, cache, settings, logs --------------------------------------------------------------------------------

def another_llama(name="gpt-small", uid="5e0b7f4a-1c6d-4e9b-a2f3-8d7c6b5a4e3f"):
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"].update(name=name, uid=uid)
    js = sample_object("jobset-llama-finetune")
    js["metadata"]["name"] = name
    js["metadata"]["ownerReferences"][0].update(name=name, uid=uid)
    return tj, js


def test_resync_reconciles_waiting_trainjobs_bounded_per_run(api, functions):
    fn = functions(KAI_FN_RESYNC_LIMIT="2")
    seed_llama(api)
    seed(api, sample_object("trainingruntime-torch-llm-kai"), sample_object("trainjob-bert-pretrain"),
         sample_object("jobset-bert-pretrain"), *another_llama())
    seed(api, sample_object("clustertrainingruntime-torch"), sample_object("trainjob-resnet-eval"))

    def marked():
        return {t["metadata"]["name"] for t in api.list(TRAINER, "TrainJob")
                if "kai-fn/podgroup" in (t["metadata"].get("annotations") or {})}

    def gangs():
        return [pg for pg in api.list(KAI_PG, "PodGroup", NS) if "-stage-" not in pg["metadata"]["name"]]

    assert send(fn.url, ping()).status == 200
    assert len(marked()) == 2 and len(gangs()) == 2
    assert send(fn.url, ping()).status == 200
    assert marked() == {"llama-finetune", "bert-pretrain", "gpt-small"}
    assert len(gangs()) == 3
    assert api.get(TRAINER, "TrainJob", NS, "resnet-eval")["spec"]["suspend"] is True
    assert ("list", "trainjobs") in verbs(api)


def test_warm_runtime_cache_saves_the_runtime_get(api, functions):
    fn = functions(KAI_FN_RUNTIME_CACHE_SECONDS="30")
    seed_llama(api)
    seed(api, *another_llama())
    send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, NAME)))
    api.reset_calls()
    assert send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, "gpt-small"))).status == 200
    assert [c for c in api.calls if "runtimes" in c.resource] == []
    assert len([c for c in api.calls if c.resource != "events"]) == 5  # GET TrainJob, JobSet; PodGroup; 2 patches


@pytest.mark.parametrize("name, value", [
    ("KAI_PODGROUP_FLAVOR", "volcano"), ("KAI_FN_API_TIMEOUT_SECONDS", "-1"), ("KAI_FN_RESUME", "maybe"),
    ("KAI_DEFAULT_QUEUE", "not a queue"), ("KAI_FN_MAX_BODY_BYTES", "lots"), ("KAI_FN_SENDERS", "alice"),
    ("KAI_FN_QUEUE_CHECK", "strict"), ("KAI_FN_SCHEDULE_TIMEOUT_SECONDS", "-5"), ("KAI_FN_ON_TIMEOUT", "delete"),
    ("KAI_FN_STALENESS_GRACE_PERIOD", "60"),
    ("KAI_FN_HEARTBEAT_LEASE", "kai-fn-resync"), ("KAI_FN_BACKGROUND_WORKERS", "-1"),
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
            event = resource(tj, event_id="id-1")
            send(fn.url, event)
            send(fn.url, event)
            post(fn.url, load_sample(REPO / "samples" / "events" / "malformed-data-not-json.json"))
            padded = copy.deepcopy(tj)
            padded["metadata"]["annotations"] = {"padding": "x" * 10000}
            send(fn.url, resource(padded, event_id="id-2"))
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    events = [line for line in lines if line.get("msg") == "event"]
    assert [(e["outcome"], e["status"]) for e in events] == [("done", 200), ("skipped", 200), ("bad", 400),
                                                             ("too_large", 413)]
    first = events[0]
    assert {k: first[k] for k in ("type", "id", "namespace", "name", "uid", "status")} == {
        "type": "dev.knative.apiserver.resource.add", "id": "id-1", "namespace": NS, "name": NAME, "uid": UID,
        "status": 200}
    assert first["api_calls"] == 8 and first["ms"] > 0 and PG in first["reason"]  # cold: runtime GET, Queue LIST


def test_a_suspended_trainjob_whose_jobset_still_runs_waits_for_the_next_event_not_given_up(api, function):
    """Trainer suspends the JobSet right after the TrainJob (and then updates its status: the next event); until
    then the templates cannot change."""
    tj = seed_llama(api)
    js = api.get(JOBSET, "JobSet", NS, NAME)
    js["spec"]["suspend"] = False
    api.put(js)
    answer = send(function.url, resource(tj))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "waiting")
    assert api.writes() == []
    js = api.get(JOBSET, "JobSet", NS, NAME)
    js["spec"]["suspend"] = True
    api.put(js)
    assert send(function.url, resource(tj)).status == 200
    assert_done(api)


def test_without_a_cluster_to_talk_to_the_server_stops_at_start_up_saying_so(tmp_path):
    with (tmp_path / "log").open("w+b") as log:
        proc = FunctionProcess({"KUBECONFIG": str(tmp_path / "missing")}, log=log)
        with pytest.raises(RuntimeError, match="exited"):
            proc.start(ready_timeout=60)
        log.seek(0)
        text = log.read().decode()
    assert "no Kubernetes API to talk to" in text and "Traceback" not in text
