"""``python -m kai_fn plan``: exit 0 planned, 1 blocked, 2 unusable input with one line naming the problem."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kai_fn.commands import cli
from tests.builders import rjob, runtime, trainjob
from tests.builders import held_by_0_2

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kai_fn", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=env)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_plan_of_the_samples_prints_podgroup_templates_and_patch():
    out = run("plan", "--trainjob", "samples/cluster/trainjob-llama-finetune.yaml",
              "--runtime", "samples/cluster/clustertrainingruntime-torch-kai.yaml",
              "--jobset", "samples/cluster/jobset-llama-finetune.yaml", "-o", "json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["plan"]["minMember"] == 4
    assert report["plan"]["minResources"] == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"}
    assert report["podGroup"]["spec"] == {"queue": "team-a", "minMember": 4, "stalenessGracePeriod": "-1s",
                                        "priorityClassName": "train"}
    assert report["podTemplates"]["node"]["annotations"]["pod-group-name"] == report["podGroup"]["metadata"]["name"]
    assert report["jobSetPatch"] == []  # named at admission: the function makes its PodGroups and writes no JobSet


def test_plan_prints_yaml_by_default_and_honours_the_flavor_flag():
    out = run("plan", "--trainjob", "samples/cluster/trainjob-llama-finetune.yaml",
              "--runtime", "samples/cluster/clustertrainingruntime-torch-kai.yaml",
              "--flavor", "scheduler-plugins")
    assert out.returncode == 0, out.stderr
    report = yaml.safe_load(out.stdout)
    assert report["podGroup"]["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert report["podGroup"]["spec"]["minResources"]["nvidia.com/gpu"] == "8"


def test_blocked_plan_exits_1_and_names_the_problem(tmp_path):
    job = write(tmp_path, "job.yaml", yaml.safe_dump(trainjob()))
    rt = write(tmp_path, "rt.yaml", yaml.safe_dump(runtime(rjob(scheduler=None))))
    out = run("plan", "--trainjob", job, "--runtime", rt)
    assert out.returncode == 1
    assert "pods would not be scheduled by KAI" in out.stdout


def test_out_of_scope_is_a_plan_not_an_error(tmp_path):
    job = write(tmp_path, "job.yaml", yaml.safe_dump(trainjob()))
    rt = write(tmp_path, "rt.yaml", yaml.safe_dump(runtime(rjob(scheduler=None), labels={})))
    out = run("plan", "--trainjob", job, "--runtime", rt)
    assert out.returncode == 0
    assert "ignored" in yaml.safe_load(out.stdout)["plan"]


BAD = [
    pytest.param("job.yaml", None, "cannot read", id="missing-file"),
    pytest.param("job.yaml", "kind: TrainJob\nspec: [unclosed\n", "job.yaml:3:1: not valid YAML", id="yaml-syntax-with-line"),
    pytest.param("job.yaml", "- a\n- b\n", "expected exactly one object", id="not-an-object"),
    pytest.param("job.yaml", "a: 1\n---\nb: 2\n", "expected exactly one object", id="two-documents"),
    pytest.param("job.yaml", yaml.safe_dump(trainjob(num_nodes=-1)), "spec.trainer.numNodes: must be >= 0",
                 id="field-path"),
    pytest.param("job.yaml", yaml.safe_dump({**trainjob(), "kind": "Pod"}), "kind: must be 'TrainJob'", id="wrong-kind"),
    pytest.param("job.yaml", yaml.safe_dump(trainjob(resources_per_node={"requests": {"cpu": "lots"}})),
                 "spec.trainer.resourcesPerNode.requests.cpu", id="bad-quantity"),
]


@pytest.mark.parametrize("name, text, message", BAD)
def test_unusable_input_exits_2_with_one_line_and_no_traceback(tmp_path, name, text, message):
    job = str(tmp_path / name) if text is None else write(tmp_path, name, text)
    out = run("plan", "--trainjob", job, "--runtime", "samples/cluster/clustertrainingruntime-torch-kai.yaml")
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert "Traceback" not in out.stderr


def test_invalid_setting_stops_with_its_name(tmp_path):
    import os
    env = {**os.environ, "KAI_PODGROUP_FLAVOR": "volcano"}
    out = run("plan", "--trainjob", "samples/cluster/trainjob-llama-finetune.yaml",
              "--runtime", "samples/cluster/clustertrainingruntime-torch-kai.yaml", env=env)
    assert out.returncode == 2
    assert "KAI_PODGROUP_FLAVOR" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.usefixtures("forgetful")  # the sample's uid: a server that decided it earlier would answer skipped
def test_invoke_posts_a_sample_and_prints_the_answer(api, function):
    from tests.conftest import sample_object, seed
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         sample_object("trainjob-llama-finetune"), held_by_0_2(sample_object("jobset-llama-finetune")))
    out = run("invoke", "samples/events/resource-add.json", "--url", function.url)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:2] == ["HTTP 200", "X-Kai-Fn-Outcome: done"]
    bad = run("invoke", "samples/events/malformed-missing-uid.json", "--url", function.url)
    assert bad.returncode == 1 and "HTTP 400" in bad.stdout and "data.metadata.uid" in bad.stdout


@pytest.mark.parametrize("args, message", [
    (["invoke", "samples/events/nope.json"], "cannot read"),
    (["invoke", "samples/cluster/queue-team-a.yaml"], "not JSON"),
    (["invoke", "samples/events/resource-add.json", "--url", "http://127.0.0.1:9"], "no answer"),
    (["invoke", "samples/events/resource-add.json", "--url", "notaurl"], "--url notaurl: not an http:// or https:// URL"),
])
def test_invoke_reports_bad_input_in_one_line(args, message):
    out = run(*args)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr and "Traceback" not in out.stderr


def test_version_prints_the_package_version():
    from kai_fn import __version__
    out = run("--version")
    assert (out.returncode, out.stdout) == (0, f"python -m kai_fn {__version__}\n")


@pytest.mark.usefixtures("forgetful")  # the sample's uid: a server that decided it earlier would answer skipped
def test_plan_prints_the_whole_patch_the_function_applies_to_a_suspended_jobset_admission_did_not_name(
        api, function, tmp_path):
    """Kubernetes 1.33: the TrainJob submitted suspended, its JobSet suspended and unnamed."""
    from tests.ce import resource, send
    from tests.conftest import JOBSET, TRAINER, sample_object, seed
    tj, js = sample_object("trainjob-llama-finetune"), held_by_0_2(sample_object("jobset-llama-finetune"))
    tj["spec"]["suspend"] = True
    del js["metadata"]["labels"]["kai-fn/held"]  # the sample is one the previous version held
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"), tj, js)
    live = {name: api.get(version, kind, "team-a", "llama-finetune")
            for name, version, kind in (("trainjob", TRAINER, "TrainJob"), ("jobset", JOBSET, "JobSet"))}
    files = [f"--{name}" if i == 0 else write(tmp_path, f"{name}.json", json.dumps(obj))
             for name, obj in live.items() for i in range(2)]
    out = run("plan", *files, "--runtime", "samples/cluster/clustertrainingruntime-torch-kai.yaml", "-o", "json")
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)["jobSetPatch"]
    assert send(function.url, resource(live["trainjob"])).status == 200
    (applied,) = [c.body for c in api.calls if (c.verb, c.resource) == ("patch", "jobsets")]

    assert printed == applied
    assert {"op": "replace", "path": "/spec/suspend", "value": False} not in printed  # Trainer resumes it
    assert "kai-fn/podgroup" in json.dumps(printed).replace("~1", "/")


def test_plan_previews_a_trainjob_not_yet_submitted_and_says_its_uid_is_a_stand_in(tmp_path):
    doc = yaml.safe_load((SAMPLES / "cluster" / "trainjob-llama-finetune.yaml").read_text())
    del doc["metadata"]["uid"]
    out = run("plan", "--trainjob", write(tmp_path, "tj.yaml", yaml.safe_dump(doc)),
              "--runtime", "samples/cluster/clustertrainingruntime-torch-kai.yaml", "-o", "json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["plan"]["podGroup"] == "pg-llama-finetune-uid"
    assert "has no metadata.uid (not submitted yet)" in report["preview"] and "pg-llama-finetune-<that uid>" in \
        report["preview"]


SEGMENTS = ("plan", "--trainjob", "samples/cluster/trainjob-llama-segments.yaml",
            "--runtime", "samples/cluster/clustertrainingruntime-torch-kai.yaml")


def test_plan_shows_the_segments_and_the_podgroups_subgroups():
    out = run(*SEGMENTS, "--topology", "samples/cluster/topology-racks.yaml", "-o", "json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["plan"]["segments"] == {
        "replicatedJob": "node", "size": 4, "minMembers": [4, 4], "subGroups": ["node-0", "node-1"],
        "topologyConstraint": {"topology": "racks", "requiredTopologyLevel": "rack"}}
    assert [s["name"] for s in report["podGroup"]["spec"]["subGroups"]] == ["node", "node-0", "node-1"]
    assert report["podTemplates"]["node"]["labels"]["kai-fn/segment-size"] == "4"


def test_plan_with_a_topology_that_lacks_the_level_exits_1_naming_the_field(tmp_path):
    topology = yaml.safe_load((SAMPLES / "cluster" / "topology-racks.yaml").read_text())
    topology["spec"]["levels"] = [level for level in topology["spec"]["levels"] if level.get("alias") != "rack"]
    out = run(*SEGMENTS, "--topology", write(tmp_path, "t.yaml", yaml.safe_dump(topology)), "-o", "json")
    assert out.returncode == 1
    (problem,) = json.loads(out.stdout)["problems"]
    assert problem.startswith("TrainJob metadata.annotations[kai.scheduler/segment-topology-required-placement]: "
                              "Topology 'racks' has no level 'rack'")


def test_plan_refuses_a_topology_file_that_is_not_one(tmp_path):
    out = run(*SEGMENTS, "--topology", write(tmp_path, "t.yaml", yaml.safe_dump(trainjob())))
    assert out.returncode == 2
    assert "expected a kai.scheduler/v1alpha1 Topology with metadata.name" in out.stderr


UNNAMED_PLAN = ("plan", "--runtime", "samples/cluster/clustertrainingruntime-torch-kai.yaml", "-o", "json")


def unnamed_jobset(tmp_path: Path) -> str:
    """The sample JobSet as Trainer makes it where no admission policy names it (Kubernetes 1.33): suspended."""
    js = held_by_0_2(yaml.safe_load((SAMPLES / "cluster" / "jobset-llama-finetune.yaml").read_text()))
    del js["metadata"]["labels"]["kai-fn/held"]
    return write(tmp_path, "js.yaml", yaml.safe_dump(js))
RESUMES = {"op": "replace", "path": "/spec/suspend", "value": False}


@pytest.mark.parametrize("topology", [(), ("--topology", "samples/cluster/topology-racks.yaml")],
                         ids=["without-topology", "with-topology"])
@pytest.mark.parametrize("annotations, suspend, decided", [
    ({}, False, True),
    ({"kai-fn/hold": "true"}, False, False),
    ({}, True, True),
], ids=["plain", "held-by-its-author", "suspended"])
def test_plan_patches_a_suspended_jobset_as_the_trainjob_asks_whatever_topologies_are_given(
        tmp_path, topology, annotations, suspend, decided):
    """The patch is the TrainJob's: a TrainJob marked kai-fn/hold gets no decision, and no patch of ``plan``'s resumes
    the JobSet (the migration's resume of one the previous version held is not the core's), also when a Topology file
    is read beside it."""
    doc = yaml.safe_load((SAMPLES / "cluster" / "trainjob-llama-finetune.yaml").read_text())
    doc["metadata"]["annotations"] = annotations
    doc["spec"]["suspend"] = suspend
    out = run(*UNNAMED_PLAN, "--jobset", unnamed_jobset(tmp_path), "--trainjob",
              write(tmp_path, "tj.yaml", yaml.safe_dump(doc)), *topology)
    assert out.returncode == 0, out.stderr
    patch = json.loads(out.stdout)["jobSetPatch"]
    assert (RESUMES in patch, "kai-fn/podgroup" in json.dumps(patch).replace("~1", "/")) == (False, decided)


@pytest.mark.parametrize("num_nodes, why", [
    ("0", "TrainJob spec.trainer.numNodes: is 0: a gang of no trainer pods, which KAI takes for no gang at all; "
          "give 1 or more"),
    ("1000000000000000000000000000000", "TrainJob spec.trainer.numNodes: 1000000000000000000000000000000 is more "
                                        "than Trainer's CRD allows (an int32: at most 2147483647)"),
])
def test_plan_refuses_a_count_no_gang_can_have_in_one_line_on_stderr(tmp_path, num_nodes, why):
    text = (SAMPLES / "cluster" / "trainjob-llama-finetune.yaml").read_text()
    assert "numNodes: 4" in text
    job = write(tmp_path, "tj.yaml", text.replace("numNodes: 4", f"numNodes: {num_nodes}"))
    out = run("plan", "--trainjob", job, "--runtime", "samples/cluster/clustertrainingruntime-torch-kai.yaml")
    assert out.returncode == 1
    assert out.stderr == f"error: {job}: blocked: {why}\n"
    assert "problems:" in out.stdout


def parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """The top parser and each command's, as `python -m kai_fn` in a checkout builds them (with the demo)."""
    from kai_fn.local import add_demo
    top = cli.build_parser(extra=[add_demo])
    (sub,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    return [("kai-fn", top), *sub.choices.items()]


PARSERS = parsers()


@pytest.mark.parametrize("name, parser", PARSERS, ids=[n for n, _ in PARSERS])
def test_every_command_and_option_has_help(name, parser):
    assert parser.description, f"{name}: no description"
    undocumented = [a.option_strings or [a.dest] for a in parser._actions
                    if not a.help and not isinstance(a, argparse._SubParsersAction)]
    assert undocumented == []


def test_the_help_check_sees_every_command():
    assert {n for n, _ in PARSERS} >= {"kai-fn", "status", "explain", "release", "plan", "invoke", "demo"}
