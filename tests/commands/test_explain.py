"""``python -m kai_fn explain NAMESPACE/NAME``: a read-only diagnosis; exit 0 bound or progressing, 1 blocked with
the reason, 2 unusable input (no such TrainJob, no cluster) with one line and no traceback.

Against the emulator: the function (real server) makes the gangs, the test plays KAI (conditions, bound pods) and
the admission policy (the samples' JobSets are held: suspended, ``kai-fn/held``).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from kai_fn.commands import cli
from tests.builders import unreachable_kubeconfig
from tests.ce import resource, send
from tests.conftest import TRAINER, sample_object, seed
from tests.function.test_function import NAME, NS, seed_llama
from tests.function.test_gang_status import OVER_LIMIT, kai_says, place, released
from tests.commands.test_cli import REPO
from tests.builders import held_by_0_2

# Each test seeds the samples' uids again, and a process remembers the uids whose JobSet it decided.
pytestmark = pytest.mark.usefixtures("forgetful")


@pytest.fixture(autouse=True)
def parent_queue(api):
    """What a KAI install creates; the team queues of the samples are its children."""
    seed(api, sample_object("queue-default-parent"))


def explain(api, ref: str, *args: str, capsys) -> tuple[int, str, str]:
    code = cli.main(["explain", ref, "--kubeconfig", api.kubeconfig, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _gpt_large(api, url):
    seed(api, sample_object("queue-team-a-small"),
         sample_object("clustertrainingruntime-torch-kai"), sample_object("trainjob-gpt-large"),
         held_by_0_2(sample_object("jobset-gpt-large")))
    return "gpt-large"


def _released_bound(api, url):
    released(api, url)
    place(api, 4, 4)
    return NAME


def _released_waiting(api, url):
    released(api, url)
    place(api, 4, 0)
    return NAME


def _released_unschedulable(api, url):
    released(api, url)
    kai_says(api, OVER_LIMIT)
    place(api, 4, 0)
    return NAME


def _not_released_no_jobset(api, url):
    seed_llama(api, jobset=False)
    return NAME


def _held(api, url):
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"]["annotations"] = {"kai-fn/hold": "true"}
    seed_llama(api, trainjob=tj)
    return NAME


def _held_by_the_policy(api, url):
    seed_llama(api)
    return NAME


def _suspended_by_its_author(api, url, labels=None):
    tj = sample_object("trainjob-llama-finetune")
    tj["spec"]["suspend"] = True
    tj["metadata"]["labels"].update(labels or {})
    assert send(url, resource(seed_llama(api, trainjob=tj))).status == 200
    return NAME


def _queued_by_kueue(api, url):
    return _suspended_by_its_author(api, url, {"kueue.x-k8s.io/queue-name": "lq"})


def _out_of_scope(api, url):
    seed(api, sample_object("clustertrainingruntime-torch"), sample_object("trainjob-resnet-eval"))
    return "resnet-eval"


def _running_unsuspended(api, url):
    seed(api, sample_object("clustertrainingruntime-torch-kai"), sample_object("trainjob-whisper-asr"),
         sample_object("jobset-whisper-asr"))
    return "whisper-asr"


def _queue_missing(api, url):
    seed(api, sample_object("clustertrainingruntime-torch-kai"), sample_object("trainjob-llama-finetune"),
         held_by_0_2(sample_object("jobset-llama-finetune")))
    return NAME


def _runtime_missing(api, url):
    seed(api, sample_object("queue-team-a"), sample_object("trainjob-llama-finetune"))
    return NAME


def _skipped_too_late(api, url):
    _running_unsuspended(api, url)
    send(url, resource(api.get(TRAINER, "TrainJob", NS, "whisper-asr")))
    return "whisper-asr"


CASES = {
    "released, every pod on a node": (_released_bound, 0, "bound", r"nothing: every pod of the gang is on a node"),
    "released, pods waiting, KAI silent": (_released_waiting, 0, "progressing", r"wait for the scheduler"),
    "released, KAI says OverLimit": (_released_unschedulable, 1, "blocked", r"OverLimit: raise the queue's limit"),
    "suspended, Trainer has not made the JobSet": (_not_released_no_jobset, 0, "progressing",
                                                    r"wait for Trainer to create its JobSet"),
    "held by kai-fn/hold": (_held, 0, "progressing", r"remove the annotation"),
    "not asking for KAI": (_out_of_scope, 0, "out-of-scope", r"nothing for kai_fn: its pods do not ask for kai-scheduler"),
    "its JobSet ran, never held": (_running_unsuspended, 1, "blocked",
                                   r"never named at admission, .* install kai_fn.s admission policy, then resubmit it"),
    "marked too late by kai_fn": (_skipped_too_late, 1, "blocked",
                                  r"kai_fn skipped it \(running\): .*once kai_fn's admission policy is installed"),
    "its JobSet held, not yet decided": (_held_by_the_policy, 0, "progressing",
                                         r"kai_fn makes its gang on the next event or resync"),
    "suspended by its author, gang made": (_suspended_by_its_author, 0, "progressing",
                                           r"gang made and left suspended: set spec.suspend: false"),
    "queued by Kueue, gang made": (_queued_by_kueue, 0, "progressing", r"gang made; Kueue admits it"),
    "its queue does not exist": (_queue_missing, 1, "blocked", r"QueueNotFound: create the Queue team-a"),
    "the gang exceeds its queue's GPU limit": (_gpt_large, 1, "blocked",
                                               r"GangExceedsQueue: the gang needs gpu 8 but queue team-a-small allows 4"),
    "its runtime does not exist": (_runtime_missing, 1, "blocked", r"create ClusterTrainingRuntime"),
}


@pytest.mark.parametrize("setup, code, status, next_step", CASES.values(), ids=list(CASES))
def test_explain_names_the_state_and_one_next_step_and_writes_nothing(api, function, capsys, setup, code, status,
                                                                      next_step):
    name = setup(api, function.url)
    api.reset_calls()
    got, out, err = explain(api, f"{NS}/{name}", "-o", "json", capsys=capsys)
    report = json.loads(out)
    assert (got, report["status"]) == (code, status), report
    assert re.search(next_step, report["next"]), report["next"]
    assert api.writes() == [] and err == ""


def test_the_json_report_carries_scope_plan_state_kais_view_and_pods(api, function, capsys):
    _released_unschedulable(api, function.url)
    _, out, _ = explain(api, f"{NS}/{NAME}", "-o", "json", capsys=capsys)
    report = json.loads(out)
    assert report["scope"] == {"inScope": True, "why": "the TrainJob carries kai.scheduler/queue=team-a"}
    assert (report["plan"]["minMember"], report["plan"]["queue"]) == (4, "team-a")
    assert report["plan"]["minResources"] == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"}
    assert report["state"]["released"] is True and report["state"]["jobSet"] == "carries the plan, running"
    assert "kai-fn/held" not in report["state"]["markers"]  # the migration lifted the previous version's hold
    assert report["state"]["markers"]["kai-fn/podgroup"] == report["state"]["podGroup"]  # the JobSet's decision
    assert report["kai"]["conditions"] == [{"reason": "OverLimit", "message": OVER_LIMIT["message"] + ".",
                                           "queue": "team-a"}]
    assert report["kai"]["pods"] == {"node": {"bound": 0, "waiting": 4}}
    gpu = [r for r in report["kai"]["queue"] if r["resource"] == "gpu"]
    assert [(r["queue"], r["request"], r["quota"], r["limit"]) for r in gpu] == [
        ("team-a", 8, 16, -1), ("default-parent-queue", 8, -1, -1)]


def test_the_text_report_is_aligned_tables_ending_in_the_next_step(api, function, capsys):
    _released_unschedulable(api, function.url)
    code, out, _ = explain(api, f"{NS}/{NAME}", capsys=capsys)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"TrainJob {NS}/{NAME}: BLOCKED"
    assert lines[-1].startswith("NEXT: OverLimit")
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["QUEUE", "RESOURCE"])
    columns = cell_starts(lines[header])
    assert len(columns) == 6
    for row in lines[header + 1: header + 7]:
        assert cell_starts(row) == columns, row  # every cell starts under its header
    assert "{" not in out, "no Python dicts in the text output"


def cell_starts(line: str) -> list[int]:
    """Where the cells of a table row begin: cells are apart by two spaces or more, a cell may hold one."""
    return [m.start() for m in re.finditer(r"(?:(?<=^)|(?<=  ))\S", line)]


@pytest.mark.parametrize("ref, kubeconfig, message", [
    ("team-a/nope", None, "error: no TrainJob team-a/nope"),
    ("team-a", None, "error: 'team-a': expected NAMESPACE/NAME"),
    ("team-a/llama-finetune", "/nonexistent/kubeconfig", "error: no Kubernetes API to talk to"),
    ("team-a/llama-finetune", "NOT-YAML", "error: no Kubernetes API to talk to"),
])
def test_unusable_input_is_exit_2_with_one_line_and_no_traceback(api, tmp_path, ref, kubeconfig, message):
    if kubeconfig == "NOT-YAML":
        kubeconfig = str(tmp_path / "kubeconfig")
        (tmp_path / "kubeconfig").write_text("clusters: [unclosed")
    done = subprocess.run([sys.executable, "-m", "kai_fn", "explain", ref, "--kubeconfig", kubeconfig or api.kubeconfig],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.startswith(message) and len(done.stderr.splitlines()) == 1


def test_a_cluster_that_does_not_answer_is_exit_2(tmp_path, capsys):
    config = unreachable_kubeconfig(tmp_path)
    code = cli.main(["explain", "team-a/x", "--kubeconfig", str(config)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: cannot read TrainJob team-a/x: API unreachable")


def test_a_staged_gang_is_held_against_its_queue_by_its_largest_stage_not_the_sum(api, function, capsys):
    """KAI places each stage on its own: bert-pretrain's trainer nodes need 24 GPUs, its initializers none."""
    from tests.ce import ref
    small = sample_object("queue-team-a")
    small["spec"]["resources"]["gpu"]["limit"] = 24
    seed(api, small, sample_object("trainingruntime-torch-llm-kai"), sample_object("trainjob-bert-pretrain"),
         held_by_0_2(sample_object("jobset-bert-pretrain")))
    assert send(function.url, ref(NS, "bert-pretrain")).status == 200
    code, out, _ = explain(api, f"{NS}/bert-pretrain", "-o", "json", capsys=capsys)
    report = json.loads(out)
    assert (code, report["status"]) == (0, "progressing"), report["next"]
    cpu = [r["request"] for r in report["kai"]["queue"] if r["resource"] == "cpu"]
    assert cpu == [24000, 24000], "the trainer subgroup (3 × 8 cores), not 25 cores for all five pods"


# -- the reading it shares with status, and an absent function ---------------------------------------------------

def _held_for_5m(api):
    """Its JobSet held by the admission policy for 5 minutes (the TrainJob's age: Trainer makes the JobSet at once)."""
    from tests.commands.test_status import ago
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"]["creationTimestamp"] = ago(minutes=5)
    seed_llama(api, trainjob=tj)


@pytest.mark.parametrize("heartbeat_age, code, status, next_step", [
    (None, 1, "blocked", r"^kai_fn looks absent \(no heartbeat readable \(Lease kai-fn/kai-fn-resync: not found\)\) "
                         r"and it has been held for 5m: .* kubectl kai-fn release team-a/llama-finetune --yes"),
    (dict(minutes=10), 1, "blocked", r"^kai_fn looks absent \(no resync for 10m "),
    (dict(seconds=30), 0, "progressing", r"kai_fn makes its gang on the next event or resync"),
], ids=["no heartbeat", "stale heartbeat", "fresh heartbeat"])
def test_held_longer_than_a_resync_period_it_says_when_the_function_looks_absent(api, capsys, heartbeat_age, code,
                                                                                  status, next_step):
    from tests.commands.test_status import heartbeat
    _held_for_5m(api)
    if heartbeat_age:
        heartbeat(api, **heartbeat_age)
    got, out, _ = explain(api, f"{NS}/{NAME}", "-o", "json", capsys=capsys)
    report = json.loads(out)
    assert (got, report["status"]) == (code, status)
    assert re.search(next_step, report["next"]), report["next"]


def _gpt_large_refused(api, url):
    name = _gpt_large(api, url)
    send(url, resource(api.get(TRAINER, "TrainJob", NS, name)))
    return name


@pytest.mark.parametrize("setup", [_released_unschedulable, _released_bound, _gpt_large_refused,
                                   _not_released_no_jobset], ids=["waiting", "bound", "blocked", "held"])
def test_its_reading_is_the_line_status_prints_for_it(api, function, capsys, setup):
    name = setup(api, function.url)
    _, out, _ = explain(api, f"{NS}/{name}", "-o", "json", capsys=capsys)
    reading = json.loads(out)["reading"]
    assert reading["state"] == {_released_unschedulable: "waiting", _released_bound: "bound",
                                _gpt_large_refused: "blocked", _not_released_no_jobset: "held"}[setup]
    cli.main(["status", "-n", NS, "-o", "json", "--kubeconfig", api.kubeconfig])
    (line,) = [i for i in json.loads(capsys.readouterr().out) if i["name"] == name]
    assert reading == {k: v for k, v in line.items() if k != "stranded"}
    _, text, _ = explain(api, f"{NS}/{name}", capsys=capsys)
    assert re.search(rf"^  state +{line['state']} for \d+s: ", text, re.M)
    # the gang: as made once it is, as planned before (a held or refused one), the same in both
    planned = setup in (_gpt_large_refused, _not_released_no_jobset)
    assert line["minMember"] == 4 and line["gpus"] is not None and line["planned"] is planned
    size = "4 (planned)" if line["planned"] else "4"
    assert f"  gang      queue {line['queue']}, minMember {size}, GPUs {line['gpus']}" in text
    cli.main(["status", "-n", NS, "--kubeconfig", api.kubeconfig])
    (row,) = [r for r in capsys.readouterr().out.splitlines() if f" {name} " in r]
    assert re.search(rf" {line['queue']} +{re.escape(size)} +{line['gpus']} ", row), row
