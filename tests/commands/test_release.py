"""``python -m kai_fn release``: an operator takes held TrainJobs out of kai_fn's hands, without a gang. Nothing is
written without ``--yes``; each release is one JSON Patch of the held JobSet guarded by the resourceVersion read,
then a Normal Event naming who and why; a TrainJob that is not held is refused in one line; kai_fn, when back, leaves
released ones alone.
"""
from __future__ import annotations

import json
import re

import pytest

from kai_fn.commands import cli
from kai_fn.local.emulator import Fault
from tests.ce import ping, resource, send
from tests.commands.test_status import _blocked_by_the_queue, _waiting_kai_silent, held, trainjob
from kai_fn.core.plan import plan
from tests.builders import named_jobset_for, typed
from tests.conftest import JOBSET, KAI_PG, TRAINER, moved, sample_object, seed
from tests.function.test_function import NAME, NS
from tests.builders import held_by_0_2

# Each test seeds the samples' uids again, and a process remembers the uids whose JobSet it decided.
pytestmark = pytest.mark.usefixtures("forgetful")

REASON = "kai-fn is down (INC-42)"


def release(api, *args: str, capsys, kubeconfig: str | None = None) -> tuple[int, str, str]:
    code = cli.main(["release", "--kubeconfig", kubeconfig or api.kubeconfig, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def live(api, name=NAME, namespace=NS) -> dict:
    return api.get(TRAINER, "TrainJob", namespace, name)


def jobset(api, name=NAME, namespace=NS) -> dict:
    return api.get(JOBSET, "JobSet", namespace, name)


def is_held(js: dict) -> bool:
    return js["spec"]["suspend"] is True and (js["metadata"].get("labels") or {}).get("kai-fn/held") == "true"


def let_go(js: dict) -> bool:
    """Released by the operator: marked and resumed (the previous version's label, inert once decided, stays)."""
    return (js["spec"]["suspend"] is False
            and (js["metadata"].get("annotations") or {}).get("kai-fn/skipped") == "released-by-operator")


def released_events(api, namespace=NS) -> list[dict]:
    return [e for e in api.list("v1", "Event", namespace) if e["reason"] == "ReleasedByOperator"]


def test_without_yes_it_prints_what_it_would_release_writes_nothing_and_exits_1(api, capsys):
    seed(api, *held())
    api.reset_calls()
    code, out, _ = release(api, f"{NS}/{NAME}", capsys=capsys)
    assert code == 1 and api.writes() == []
    assert "would release, without a gang:" in out and re.search(rf"^  {NS} +{NAME} +held +\d+s", out, re.M)
    assert out.rstrip().endswith("nothing released: add --yes --reason TEXT to release them")
    assert is_held(jobset(api))


def test_with_yes_one_guarded_patch_of_the_jobset_marks_and_resumes_it_and_an_event_says_who_and_why(api, capsys):
    seed(api, *held())
    js = jobset(api)
    api.reset_calls()
    code, out, _ = release(api, f"{NS}/{NAME}", "--yes", "--reason", REASON, capsys=capsys)
    assert (code, out.strip()) == (0, f"released {NS}/{NAME} without a gang")
    (patch,) = [c for c in api.writes() if c.resource in ("jobsets", "trainjobs")]
    assert (patch.resource, patch.content_type) == ("jobsets", "application/json-patch+json")
    assert patch.body == [
        {"op": "test", "path": "/metadata/uid", "value": js["metadata"]["uid"]},
        {"op": "test", "path": "/metadata/resourceVersion", "value": js["metadata"]["resourceVersion"]},
        {"op": "test", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/metadata/annotations", "value": {"kai-fn/skipped": "released-by-operator"}},
        {"op": "replace", "path": "/spec/suspend", "value": False}]
    assert let_go(jobset(api))
    tj = live(api)
    assert "suspend" not in tj["spec"] and not (tj["metadata"].get("annotations") or {})  # the TrainJob: untouched
    (event,) = released_events(api)
    assert event["type"] == "Normal" and event["involvedObject"]["uid"] == tj["metadata"]["uid"]
    assert event["message"].startswith(f"released without a gang by emulator-admin: {REASON}.")
    assert event["reportingComponent"] == "kai-fn-release"


def test_a_trainjob_its_author_suspended_is_suspended_not_held_and_its_jobset_is_left_for_trainer(api, capsys):
    """Suspended with its TrainJob, the JobSet waits for its author, not for kai_fn: not release's (kai_fn's
    migration, or the 1.33 path, decides it and leaves it suspended; Trainer resumes it with the TrainJob)."""
    seed(api, *held(suspend=True))
    api.reset_calls()
    code, out, _ = release(api, f"{NS}/{NAME}", "--yes", "--reason", REASON, capsys=capsys)
    assert code == 1 and f"{NS}/{NAME}: not held (suspended: " in out
    assert api.writes() == [] and is_held(jobset(api))


def test_the_event_names_the_user_the_api_server_authenticated(api, capsys, tmp_path):
    seed(api, *held())
    token = api.issue_token("ops", "oncall")
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": api.url}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": token}}]}))
    code, _, _ = release(api, f"{NS}/{NAME}", "--yes", "--reason", REASON, capsys=capsys, kubeconfig=str(config))
    (event,) = released_events(api)
    assert code == 0 and "by system:serviceaccount:ops:oncall: " in event["message"]


CHANGED = {  # what was read, and how the API server refuses the stale patch
    "held JobSet (a JSON Patch test fails: 422)": (held, "jobsets", 422),
}


@pytest.mark.parametrize("objects, resource_name, status", CHANGED.values(), ids=list(CHANGED))
def test_a_trainjob_changed_since_it_was_read_is_not_released(api, capsys, objects, resource_name, status):
    seed(api, *objects())
    api.faults = lambda call: (Fault(status=status) if call.verb == "patch" and call.resource == resource_name
                               else None)
    code, out, _ = release(api, f"{NS}/{NAME}", "--yes", "--reason", REASON, capsys=capsys)
    api.faults = None
    assert code == 1 and out.strip() == f"{NS}/{NAME}: changed since it was read; not released (run again to see " \
                                         "where it stands)"
    assert released_events(api) == []
    assert [c.status for c in api.writes() if c.verb == "patch"] == [status]


def test_a_trainjob_that_is_not_held_is_refused_in_one_line(api, function, capsys):
    _waiting_kai_silent(api, function.url)
    api.reset_calls()
    code, out, _ = release(api, f"{NS}/{NAME}", "--yes", "--reason", REASON, capsys=capsys)
    assert code == 1 and api.writes() == []
    assert out.strip().startswith(f"{NS}/{NAME}: not held (waiting: ") and out.strip().endswith("nothing to release")
    assert len(out.strip().splitlines()) == 1


def test_a_blocked_trainjob_is_released_by_name(api, function, capsys):
    name = _blocked_by_the_queue(api, function.url)
    code, out, _ = release(api, f"{NS}/{name}", "--yes", "--reason", REASON, capsys=capsys)
    assert code == 0 and let_go(jobset(api, name))


def test_held_releases_every_held_trainjob_of_all_namespaces_and_no_blocked_one(api, function, capsys):
    blocked = _blocked_by_the_queue(api, function.url)
    seed(api, *held(name="a"), *held(name="b", namespace="team-b"), *held(name="kept", notes={"kai-fn/hold": "true"}))
    code, out, _ = release(api, "--held", "-A", "--yes", "--reason", REASON, capsys=capsys)
    assert code == 0 and sorted(out.strip().splitlines()) == [
        f"released {NS}/a without a gang", "released team-b/b without a gang"]
    assert let_go(jobset(api, "a")) and let_go(jobset(api, "b", "team-b"))
    assert is_held(jobset(api, blocked)) and is_held(jobset(api, "kept"))
    assert len(released_events(api)) == 1 and len(released_events(api, "team-b")) == 1


def test_held_in_one_namespace_leaves_the_others(api, capsys):
    seed(api, *held(name="a"), *held(name="b", namespace="team-b"))
    code, out, _ = release(api, "--held", "-n", "team-b", "--yes", "--reason", REASON, capsys=capsys)
    assert code == 0 and out.strip() == "released team-b/b without a gang"
    assert is_held(jobset(api, "a")) and let_go(jobset(api, "b", "team-b"))


def test_held_with_nothing_held_is_exit_0(api, capsys):
    code, out, _ = release(api, "--held", "-A", capsys=capsys)
    assert (code, out.strip()) == (0, "nothing held")


def test_once_released_the_function_back_leaves_it_alone(api, function, capsys):
    """No gang after the fact: its pods may be running already."""
    seed(api, trainjob(), sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         held_by_0_2(sample_object("jobset-llama-finetune")))
    held_jobset = jobset(api)
    assert release(api, f"{NS}/{NAME}", "--yes", "--reason", REASON, capsys=capsys)[0] == 0
    api.reset_calls()
    answers = [send(function.url, event) for event in (ping(), resource(live(api)), resource(held_jobset))]
    assert [a.status for a in answers] == [200] * 3
    assert [a.headers.get("X-Kai-Fn-Outcome") for a in answers[1:]] == ["skipped", "skipped"]
    assert [c for c in api.writes() if c.resource != "leases"] == []
    assert let_go(jobset(api))


@pytest.mark.parametrize("args, message", [
    ([], "error: name TrainJobs as NAMESPACE/NAME, or give --held with -n NAMESPACE or -A"),
    (["--held"], "error: --held needs -n NAMESPACE or -A"),
    (["--held", "-A", f"{NS}/{NAME}"], "error: name TrainJobs as NAMESPACE/NAME, or give --held"),
    (["-A", f"{NS}/{NAME}"], "error: -n and -A go with --held"),
    ([f"{NS}/{NAME}", "--yes"], "error: --yes needs --reason TEXT"),
    (["team-a"], "error: 'team-a': expected NAMESPACE/NAME"),
    ([f"{NS}/nope"], f"error: no TrainJob {NS}/nope"),
])
def test_bad_input_is_exit_2_with_one_line(api, capsys, args, message):
    code, out, err = release(api, *args, capsys=capsys)
    assert code == 2 and out == "" and err.startswith(message) and len(err.splitlines()) == 1
    assert api.writes() == []


# -- a JobSet named at admission: the way out makes the gang --------------------------------------------------------

def named_llama(api) -> dict:
    """llama-finetune submitted while the function is down: its JobSet named at admission, its pods waiting."""
    tj = sample_object("trainjob-llama-finetune")
    runtime = sample_object("clustertrainingruntime-torch-kai")
    seed(api, sample_object("queue-team-a"), runtime, tj, named_jobset_for(tj, runtime))
    return live(api)


def test_a_named_trainjob_is_released_with_the_gang_of_kai_fns_plan_and_an_event_says_so(api, capsys):
    tj = named_llama(api)
    code, out, _ = release(api, f"{NS}/{NAME}", capsys=capsys)
    assert code == 1 and "would release, with its gang made from kai_fn's plan:" in out and api.writes() == []
    code, out, _ = release(api, f"{NS}/{NAME}", "--yes", "--reason", REASON, capsys=capsys)
    assert (code, out.strip()) == (0, f"released {NS}/{NAME} with its gang")
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    planned = plan(*typed(tj, sample_object("clustertrainingruntime-torch-kai")))
    assert pg["spec"] == planned.podgroup["spec"] and pg["metadata"]["name"] == planned.podgroup_name
    assert pg["metadata"]["labels"] == planned.podgroup["metadata"]["labels"]  # kai_fn's, so kai_fn takes it back
    assert not [c for c in api.writes() if c.resource in ("jobsets", "trainjobs")]
    (event,) = released_events(api)
    assert event["message"].startswith(f"released with its gang by emulator-admin: {REASON}.")


def test_kai_fn_back_takes_the_gang_the_operator_made_and_makes_no_second_one(api, functions, capsys):
    tj = named_llama(api)
    release(api, f"{NS}/{NAME}", "--yes", "--reason", REASON, capsys=capsys)
    api.reset_calls()
    answer = send(functions().url, resource(tj, "update"))
    assert answer.headers.get("X-Kai-Fn-Outcome") == "skipped" and api.writes() == []
    assert len(api.list(KAI_PG, "PodGroup", NS)) == 1


# -- only where the namespace opted in (issue 39, attack 4) ------------------------------------------------------

ELSEWHERE = "never-opted-in"


def held_elsewhere(api):
    seed(api, *held(namespace=ELSEWHERE))


def named_elsewhere(api):
    named_llama(api)
    moved(api, NS, ELSEWHERE)


@pytest.mark.parametrize("arrange", [held_elsewhere, named_elsewhere], ids=["held", "named at admission"])
@pytest.mark.parametrize("args", [(f"{ELSEWHERE}/{NAME}",), ("--held", "-A")], ids=["by name", "--held -A"])
def test_a_trainjob_in_a_namespace_that_did_not_opt_in_is_refused_in_one_line_naming_it(api, capsys, arrange, args):
    api.opt_in(ELSEWHERE, enabled=False)
    arrange(api)
    api.reset_calls()
    code, out, _ = release(api, *args, "--yes", "--reason", REASON, capsys=capsys)
    assert (code, out.strip()) == (1, f"{ELSEWHERE}/{NAME}: namespace {ELSEWHERE} has not opted in "
                                      "(kai-fn.io/enabled=true); nothing released")
    assert api.writes() == []
