"""``python -m kai_fn release``: an operator takes held TrainJobs out of kai_fn's hands, without a gang. Nothing is
written without ``--yes``; each release is one patch guarded by the resourceVersion read, then a Normal Event naming
who and why; a TrainJob that is not held is refused in one line; kai_fn, when back, leaves released ones alone.
"""
from __future__ import annotations

import json
import re

import pytest

from kai_fn.commands import cli
from kai_fn.local.emulator import Fault
from tests.ce import ping, send
from tests.commands.test_status import AUTO, _blocked_by_the_queue, _waiting_kai_silent, trainjob
from tests.conftest import TRAINER, sample_object, seed
from tests.function.test_function import NAME, NS

REASON = "kai-fn is down (INC-42)"


def release(api, *args: str, capsys, kubeconfig: str | None = None) -> tuple[int, str, str]:
    code = cli.main(["release", "--kubeconfig", kubeconfig or api.kubeconfig, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def live(api, name=NAME, namespace=NS) -> dict:
    return api.get(TRAINER, "TrainJob", namespace, name)


def released_events(api, namespace=NS) -> list[dict]:
    return [e for e in api.list("v1", "Event", namespace) if e["reason"] == "ReleasedByOperator"]


def test_without_yes_it_prints_what_it_would_release_writes_nothing_and_exits_1(api, capsys):
    seed(api, trainjob(notes=AUTO))
    api.reset_calls()
    code, out, _ = release(api, f"{NS}/{NAME}", capsys=capsys)
    assert code == 1 and api.writes() == []
    assert "would release, without a gang:" in out and re.search(rf"^  {NS} +{NAME} +held +\d+s", out, re.M)
    assert out.rstrip().endswith("nothing released: add --yes --reason TEXT to release them")
    assert live(api)["spec"]["suspend"] is True


def test_with_yes_one_guarded_patch_marks_and_resumes_it_and_an_event_says_who_and_why(api, capsys):
    seed(api, trainjob(notes=AUTO))
    read_at = live(api)["metadata"]["resourceVersion"]
    api.reset_calls()
    code, out, _ = release(api, f"{NS}/{NAME}", "--yes", "--reason", REASON, capsys=capsys)
    assert (code, out.strip()) == (0, f"released {NS}/{NAME} without a gang")
    (patch,) = [c for c in api.writes() if c.resource == "trainjobs"]
    assert patch.body == {"metadata": {"resourceVersion": read_at,
                                       "annotations": {"kai-fn/skipped": "released-by-operator"}},
                          "spec": {"suspend": False}}
    tj = live(api)
    assert tj["spec"]["suspend"] is False and tj["metadata"]["annotations"]["kai-fn/skipped"] == "released-by-operator"
    (event,) = released_events(api)
    assert event["type"] == "Normal" and event["involvedObject"]["uid"] == tj["metadata"]["uid"]
    assert event["message"].startswith(f"released without a gang by emulator-admin: {REASON}.")
    assert event["reportingComponent"] == "kai-fn-release"


def test_the_event_names_the_user_the_api_server_authenticated(api, capsys, tmp_path):
    seed(api, trainjob(notes=AUTO))
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


def test_a_trainjob_changed_since_it_was_read_is_not_released(api, capsys):
    seed(api, trainjob(notes=AUTO))
    api.faults = lambda call: Fault(status=409) if call.verb == "patch" and call.resource == "trainjobs" else None
    code, out, _ = release(api, f"{NS}/{NAME}", "--yes", "--reason", REASON, capsys=capsys)
    api.faults = None
    assert code == 1 and out.strip() == f"{NS}/{NAME}: changed since it was read; not released (run again to see " \
                                         "where it stands)"
    assert released_events(api) == [] and live(api)["spec"]["suspend"] is True


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
    assert code == 0 and live(api, name)["spec"]["suspend"] is False


def test_held_releases_every_held_trainjob_of_all_namespaces_and_no_blocked_one(api, function, capsys):
    blocked = _blocked_by_the_queue(api, function.url)
    seed(api, trainjob(name="a", notes=AUTO), trainjob(name="b", namespace="team-b", notes=AUTO),
         trainjob(name="kept", notes={"kai-fn/hold": "true"}))
    code, out, _ = release(api, "--held", "-A", "--yes", "--reason", REASON, capsys=capsys)
    assert code == 0 and sorted(out.strip().splitlines()) == [
        f"released {NS}/a without a gang", "released team-b/b without a gang"]
    assert live(api, "a")["spec"]["suspend"] is live(api, "b", "team-b")["spec"]["suspend"] is False
    assert live(api, blocked)["spec"]["suspend"] is live(api, "kept")["spec"]["suspend"] is True
    assert len(released_events(api)) == 1 and len(released_events(api, "team-b")) == 1


def test_held_in_one_namespace_leaves_the_others(api, capsys):
    seed(api, trainjob(name="a", notes=AUTO), trainjob(name="b", namespace="team-b", notes=AUTO))
    code, out, _ = release(api, "--held", "-n", "team-b", "--yes", "--reason", REASON, capsys=capsys)
    assert code == 0 and out.strip() == "released team-b/b without a gang"
    assert live(api, "a")["spec"]["suspend"] is True


def test_held_with_nothing_held_is_exit_0(api, capsys):
    code, out, _ = release(api, "--held", "-A", capsys=capsys)
    assert (code, out.strip()) == (0, "nothing held")


def test_once_released_the_function_back_leaves_it_alone(api, function, capsys):
    """No gang after the fact: its pods may be running already."""
    seed(api, trainjob(notes=AUTO), sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         sample_object("jobset-llama-finetune"))
    release(api, f"{NS}/{NAME}", "--yes", "--reason", REASON, capsys=capsys)
    api.reset_calls()
    assert send(function.url, ping()).status == 200
    assert [c for c in api.writes() if c.resource != "leases"] == []


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
