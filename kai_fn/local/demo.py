"""``python -m kai_fn demo``: the whole loop on one machine, no cluster needed.

A Kubernetes API emulator (kmock) in this process, seeded with what Trainer and KAI would have made; the real
function server in another; the sample ApiServerSource events sent to it over HTTP; and what changed in the
"cluster" printed after each one.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import yaml

from kai_fn.local.emulator import Call, Emulator
from kai_fn.local.invoke import load_sample, post
from kai_fn.local.process import REPO, FunctionProcess

SAMPLES = REPO / "samples"
SEED = ["clustertrainingruntime-torch-kai", "clustertrainingruntime-torch", "trainingruntime-torch-llm-kai",
        "queue-default-parent", "queue-team-a",
        "trainjob-llama-finetune", "jobset-llama-finetune", "trainjob-bert-pretrain", "jobset-bert-pretrain",
        "trainjob-resnet-eval", "trainjob-whisper-asr", "jobset-whisper-asr"]
STEPS = [
    ("resource-add", "a suspended TrainJob in scope is created"),
    ("resource-add", "the same event again (at-least-once delivery)"),
    ("resource-update", "a status update of it, its object still without the marker"),
    ("ref-add", "reference mode: a TrainJob whose runtime has initializers"),
    ("out-of-scope", "a TrainJob that does not ask for KAI"),
    ("running", "a TrainJob submitted without spec.suspend"),
    ("resource-delete", "a TrainJob deleted"),
    ("malformed-data-not-json", "garbage"),
    ("malformed-missing-uid", "a resource event without metadata.uid"),
    ("malformed-not-a-cloudevent", "not a CloudEvent at all"),
]
TRAINER = "trainer.kubeflow.org/v1alpha1"


def seed(api: Emulator) -> None:
    for name in SEED:
        api.put(yaml.safe_load((SAMPLES / "cluster" / f"{name}.yaml").read_text()))


def describe(call: Call) -> str:
    where = f"{call.namespace}/" if call.namespace else ""
    what = f"{call.resource} {where}{call.name}" if call.name else f"{call.resource} in {call.namespace or 'cluster'}"
    return f"{call.method:<6} {what} -> {call.status}"


def show_cluster(api: Emulator) -> None:
    print("\n== What the cluster holds now")
    for pg in api.list("scheduling.run.ai/v2alpha2", "PodGroup"):
        spec = pg["spec"]
        gang = (f"minMember {spec['minMember']}" if "minMember" in spec else
                "minSubGroup 1 of " + ", ".join(f"{s['name']}({s['minMember']})" for s in spec.get("subGroups", [])))
        print(f"PodGroup {pg['metadata']['namespace']}/{pg['metadata']['name']}: queue {spec['queue']}, {gang}, "
              f"minResources {pg['metadata'].get('annotations', {}).get('kai-fn/min-resources')}")
    for js in api.list("jobset.x-k8s.io/v1alpha2", "JobSet"):
        print(f"JobSet {js['metadata']['namespace']}/{js['metadata']['name']} "
              f"(annotations {js['metadata'].get('annotations') or {}}):")
        for rj in js["spec"]["replicatedJobs"]:
            meta = rj["template"]["spec"]["template"].get("metadata") or {}
            print(f"  pods of {rj['name']}: labels {meta.get('labels') or {}} annotations {meta.get('annotations') or {}}")
    for tj in api.list(TRAINER, "TrainJob"):
        notes = {k: v for k, v in (tj["metadata"].get("annotations") or {}).items() if k.startswith("kai-fn/")}
        print(f"TrainJob {tj['metadata']['namespace']}/{tj['metadata']['name']}: suspend={tj['spec'].get('suspend')} {notes}")
    for ev in sorted(api.list("v1", "Event"), key=lambda e: e["metadata"]["name"]):
        print(f"Event {ev['type']} {ev['reason']} on {ev['involvedObject']['name']}: {ev['message']}")


def run() -> int:
    with Emulator() as api, tempfile.TemporaryDirectory() as tmp:
        seed(api)
        log_path = Path(tmp) / "function.log"
        with log_path.open("wb") as log, FunctionProcess({"KUBECONFIG": api.kubeconfig}, log=log) as fn:
            print(f"kmock Kubernetes API emulator on {api.url}; function (functions-framework) on {fn.url}\n")
            for sample_name, what in STEPS:
                sample = load_sample(SAMPLES / "events" / f"{sample_name}.json")
                api.reset_calls()
                answer = post(fn.url, sample)
                outcome = answer.headers.get("X-Kai-Fn-Outcome") or answer.body.strip()
                print(f"-- {sample_name}: {what}")
                print(f"   {sample.headers.get('Ce-Type', '(no Ce-Type)')} -> HTTP {answer.status} {outcome}")
                calls = api.calls
                writes = [c for c in calls if c.verb in ("create", "patch", "update", "delete")]
                print(f"   API calls: {len(calls)}, writes: {len(writes)}")
                for call in calls:
                    print(f"     {describe(call)}")
            show_cluster(api)
        lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
        print("\n== The function's log: one JSON line per event (the first two)")
        for line in lines[:2]:
            print(json.dumps(line))
    return 0

