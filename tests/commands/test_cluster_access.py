"""kubectl's flags as kubectl users type them: ``--kubeconfig``, ``--context``, ``-n`` and ``-A``, before or after
the command (kubectl hands a plugin the arguments after its name, flags included, as typed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kai_fn.commands import cli
from tests.commands.test_status import MARKED, trainjob
from tests.conftest import sample_object, seed
from tests.function.test_function import NAME, NS


def two_contexts(api, tmp_path: Path) -> str:
    """A kubeconfig whose current-context never answers (port 9 on loopback) and whose context ``emulator`` does."""
    config = json.loads(Path(api.kubeconfig).read_text())
    config["clusters"].append({"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}})
    config["contexts"].append({"name": "nowhere", "context": {"cluster": "nowhere", "user": "emulator"}})
    config["current-context"] = "nowhere"
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    return str(path)


def names(out: str) -> list[tuple[str, str]]:
    return [(item["namespace"], item["name"]) for item in json.loads(out)]


@pytest.fixture
def two_namespaces(api):
    seed(api, sample_object("queue-default-parent"), sample_object("queue-team-a"),
         sample_object("clustertrainingruntime-torch-kai"), trainjob(notes=MARKED),
         trainjob(name="other", namespace="team-b", notes=MARKED))


@pytest.mark.parametrize("args", [
    ["status", "--kubeconfig", "{kubeconfig}", "--context", "emulator", "-n", NS, "-o", "json"],
    ["--kubeconfig", "{kubeconfig}", "--context", "emulator", "-n", NS, "status", "-o", "json"],
    ["--context", "emulator", "status", "--kubeconfig", "{kubeconfig}", "-o", "json", "--namespace", NS],
    ["-n", "team-b", "--context", "emulator", "status", "--kubeconfig", "{kubeconfig}", "-o", "json", "-n", NS],
], ids=["after", "before", "mixed", "after-wins"])
def test_flags_before_or_after_the_command_reach_it(api, tmp_path, capsys, two_namespaces, args):
    kubeconfig = two_contexts(api, tmp_path)
    code = cli.main([a.format(kubeconfig=kubeconfig) for a in args])
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    assert names(out.out) == [(NS, NAME)]


def test_all_namespaces_before_the_command(api, tmp_path, capsys, two_namespaces):
    kubeconfig = two_contexts(api, tmp_path)
    code = cli.main(["-A", "--kubeconfig", kubeconfig, "--context", "emulator", "status", "-o", "json"])
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    assert sorted(names(out.out)) == [("team-a", NAME), ("team-b", "other")]


def test_without_context_the_current_one_is_used(api, tmp_path, capsys):
    code = cli.main(["status", "--kubeconfig", two_contexts(api, tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: cannot read the cluster: API unreachable"), err


@pytest.mark.parametrize("args", [["status", "-A"], ["explain", f"{NS}/{NAME}"], ["release", "--held", "-A"]])
def test_an_unreachable_api_server_is_one_line_naming_the_server_and_the_context(api, tmp_path, capsys, args):
    code = cli.main([*args, "--kubeconfig", two_contexts(api, tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.rstrip().endswith("(API server http://127.0.0.1:9, context nowhere)") and "unreachable" in err, err


def test_an_unknown_context_is_one_line(api, tmp_path, capsys):
    code = cli.main(["--context", "nope", "status", "--kubeconfig", two_contexts(api, tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: no Kubernetes API to talk to") and "nope" in err
    assert len(err.splitlines()) == 1


def test_the_context_reaches_explain_and_release(api, tmp_path, capsys, two_namespaces):
    kubeconfig = two_contexts(api, tmp_path)
    assert cli.main(["--context", "emulator", "explain", f"{NS}/{NAME}", "--kubeconfig", kubeconfig]) in (0, 1)
    assert f"{NS}/{NAME}" in capsys.readouterr().out
    code = cli.main(["release", "--held", "-n", NS, "--kubeconfig", kubeconfig, "--context", "emulator"])
    out = capsys.readouterr().out
    assert code == 1 and "would release, with its gang made from kai_fn's plan:" in out and "other" not in out


def test_explain_takes_name_with_n_as_kubectl_does(api, capsys, two_namespaces):
    assert cli.main(["explain", "-n", NS, NAME, "--kubeconfig", api.kubeconfig, "-o", "json"]) in (0, 1)
    report = json.loads(capsys.readouterr().out)
    assert report["trainJob"] == f"{NS}/{NAME}"


@pytest.mark.parametrize("args, message", [
    (["explain", "-n", "team-b", f"{NS}/{NAME}"], f"error: '{NS}/{NAME}' is not in namespace team-b (-n)"),
    (["-A", "explain", f"{NS}/{NAME}"], "error: explain reads one TrainJob: -A does not apply"),
])
def test_explain_refuses_flags_that_contradict_its_trainjob(api, capsys, args, message):
    code = cli.main([*args, "--kubeconfig", api.kubeconfig])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(message) and len(err.splitlines()) == 1


def test_n_and_all_namespaces_together_is_a_usage_error(capsys):
    with pytest.raises(SystemExit, match="^2$") as exit_:
        cli.main(["-n", NS, "status", "-A"])
    assert exit_.value.code == 2 and "give -n NAMESPACE or -A, not both" in capsys.readouterr().err


@pytest.mark.parametrize("prog", ["kai-fn", "kubectl kai-fn"])
def test_help_says_what_it_is_for_and_how_kubectl_passes_the_flags(capsys, prog):
    with pytest.raises(SystemExit, match="^0$"):
        cli.main(["--help"], prog=prog)
    text = capsys.readouterr().out
    assert text.startswith(f"usage: {prog} ")
    assert "Gang scheduling for Kubeflow Trainer TrainJobs on KAI Scheduler" in text
    assert "kubectl kai-fn status -A --context prod" in text
    assert "compose" not in text and "kai_fn.local" not in text
