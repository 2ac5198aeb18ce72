"""One gatherer of a plan's inputs (kai_fn/plan_inputs.py): the runtime, the Topologies, KAI's defaults ConfigMap and
the PriorityClasses, read for the function's pass and for every command. So ``status``, ``explain`` and ``plan`` show
the priority, preemptibility and queue the function writes on the PodGroup, on a cluster whose KAI defaults and
PriorityClasses change them.

Against the emulator, with the real function.
"""
from __future__ import annotations

import json

import pytest
import yaml

from kai_fn.commands import cli
from tests.ce import resource, send
from tests.commands.test_status import held, lines, trainjob
from tests.conftest import KAI_PG, TRAINER, seed
from tests.function.test_function import NAME, NS
from tests.function.test_kai_cluster import defaults_configmap, priority_class

pytestmark = pytest.mark.usefixtures("forgetful")

WHERE = "kai-scheduler/kai-defaults"
INFERENCE = {"typeName": "TrainJob", "group": "trainer.kubeflow.org", "priorityName": "inference",
             "preemptibility": "non-preemptible"}
# (labels on the TrainJob, the cluster's PriorityClasses, KAI's defaults, the priority and preemptibility written)
CLUSTERS = {
    "KAI's defaults name a class that exists": ({}, ["inference"], [INFERENCE], ("inference", "non-preemptible")),
    "KAI's defaults name a class that does not": ({}, ["other"], [INFERENCE], ("train", "non-preemptible")),
    "the TrainJob names a class that does not exist": ({"priorityClassName": "build"}, ["other"], [], ("train", None)),
    "the TrainJob names one that does": ({"priorityClassName": "build"}, ["build"], [INFERENCE], ("build", "non-preemptible")),
}


def _shown(api, capsys, tmp_path, classes, defaults) -> dict[str, tuple]:
    """(queue, priority, preemptibility) as each command shows the TrainJob's gang before it is made."""
    item = lines(api, capsys, "-n", NS)[NAME]
    assert cli.main(["explain", f"{NS}/{NAME}", "--kubeconfig", api.kubeconfig, "-o", "json"]) == 0
    planned = json.loads(capsys.readouterr().out)["plan"]
    files = {"trainjob": api.get(TRAINER, "TrainJob", NS, NAME), "defaults": defaults_configmap(*defaults),
             "runtime": held()[2], **{f"class-{c}": priority_class(c) for c in classes}}
    for name, doc in files.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    args = ["plan", "--trainjob", str(tmp_path / "trainjob.yaml"), "--runtime", str(tmp_path / "runtime.yaml"),
            "--kai-defaults", str(tmp_path / "defaults.yaml"), "-o", "json"]
    args += [f"--priority-class={tmp_path / f'class-{c}.yaml'}" for c in classes]
    assert cli.main(args) == 0
    spec = json.loads(capsys.readouterr().out)["podGroup"]["spec"]
    return {"status": (item["queue"], item["priorityClassName"], item["preemptibility"]),
            "explain": (planned["queue"], planned["priorityClassName"], planned["preemptibility"]),
            "plan": (spec["queue"], spec.get("priorityClassName"), spec.get("preemptibility"))}


@pytest.mark.parametrize("labels, classes, defaults, written", CLUSTERS.values(), ids=list(CLUSTERS))
def test_status_explain_and_plan_show_the_priority_preemptibility_and_queue_the_function_writes(
        api, functions, capsys, tmp_path, monkeypatch, labels, classes, defaults, written):
    monkeypatch.setenv("KAI_DEFAULTS_CONFIGMAP", WHERE)
    function = functions(KAI_DEFAULTS_CONFIGMAP=WHERE)
    tj = trainjob()
    tj["metadata"]["labels"].update(labels)
    _, js, rt, queue = held()
    seed(api, tj, js, rt, queue, defaults_configmap(*defaults), *(priority_class(c) for c in classes))
    shown = _shown(api, capsys, tmp_path, classes, defaults)
    assert send(function.url, resource(api.get(TRAINER, "TrainJob", NS, NAME))).status == 200
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    made = (pg["spec"]["queue"], pg["spec"]["priorityClassName"], pg["spec"].get("preemptibility"))
    assert made == ("team-a", *written)
    assert shown == {"status": made, "explain": made, "plan": made}


def test_release_makes_the_gang_with_the_priority_and_preemptibility_the_function_would_write(
        api, functions, capsys, monkeypatch):
    """The operator's way out plans as the function does: the gang it makes is the one kai_fn would have made, so
    kai_fn, back, takes it as its own and writes nothing."""
    from tests.commands.test_release import REASON, named_llama, release
    monkeypatch.setenv("KAI_DEFAULTS_CONFIGMAP", WHERE)
    seed(api, defaults_configmap(INFERENCE), priority_class("inference"))
    tj = named_llama(api)
    code, _, _ = release(api, f"{NS}/{NAME}", "--yes", "--reason", REASON, capsys=capsys)
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    assert code == 0 and (pg["spec"]["priorityClassName"], pg["spec"]["preemptibility"]) == (
        "inference", "non-preemptible")
    api.reset_calls()
    answer = send(functions(KAI_DEFAULTS_CONFIGMAP=WHERE).url, resource(tj, "update"))
    assert answer.headers.get("X-Kai-Fn-Outcome") == "skipped" and api.writes() == []
