"""``python -m kai_fn demo``: the whole loop on one machine, no cluster needed.

A Kubernetes API emulator (kmock) in this process, seeded with what Trainer and KAI would have made; the real
function server in another; the sample ApiServerSource events sent to it over HTTP (TrainJobs, then the gang's
PodGroup as KAI reports on it); what each one cost; what the "cluster" holds at the end, as tables; an
``explain`` of a bound and of a blocked TrainJob; and ``status`` of them all.
"""
from __future__ import annotations

import json
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import CustomObjectsApi

from kai_fn.settings import load
from kai_fn.commands import explain, status
from kai_fn.local.emulator import Call, Emulator
from kai_fn.commands.invoke import load_sample, post
from kai_fn.local.process import REPO, FunctionProcess
from kai_fn.commands.tables import table

SAMPLES = REPO / "samples"
SEED = ["clustertrainingruntime-torch-kai", "clustertrainingruntime-torch", "trainingruntime-torch-llm-kai",
        "queue-default-parent", "queue-team-a", "queue-team-a-small",
        "trainjob-llama-finetune", "jobset-llama-finetune", "trainjob-bert-pretrain", "jobset-bert-pretrain",
        "trainjob-resnet-eval", "trainjob-whisper-asr", "jobset-whisper-asr", "trainjob-gpt-large", "jobset-gpt-large"]
TRAINER = "trainer.kubeflow.org/v1alpha1"
KAI_PG = "scheduling.run.ai/v2alpha2"
NS, LLAMA = "team-a", "llama-finetune"
ELSEWHERE = "team-z"  # never labelled kai-fn.io/enabled=true


def kai_reports(api: Emulator) -> str:
    """Trainer made llama-finetune's four pods; KAI cannot place them and says why on the PodGroup."""
    (pg,) = [p for p in api.list(KAI_PG, "PodGroup", NS) if p["metadata"]["labels"].get("kai-fn/trainjob") == LLAMA]
    sample = json.loads((SAMPLES / "events" / "podgroup-unschedulable.json").read_text())["body"]
    pg["status"] = sample["status"]
    api.put(pg)
    for pod in pods(pg["metadata"]["name"], bound=False):
        api.put(pod)
    return "KAI wrote status.schedulingConditions; 4 pods pending"


def binder_binds(api: Emulator) -> str:
    """KAI allocated the gang and cleared its conditions; its binder set every pod's node."""
    (pg,) = [p for p in api.list(KAI_PG, "PodGroup", NS) if p["metadata"]["labels"].get("kai-fn/trainjob") == LLAMA]
    pg["status"] = {}
    api.put(pg)
    for pod in pods(pg["metadata"]["name"], bound=True):
        api.put(pod)
    return "KAI cleared the conditions; the binder put all 4 pods on nodes"


def pods(podgroup: str, bound: bool) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{LLAMA}-node-0-{i}", "namespace": NS, "annotations": {"pod-group-name": podgroup},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"{LLAMA}-node-0", "uid": "job-uid",
                             "controller": True}],
        "labels": {"jobset.sigs.k8s.io/jobset-name": LLAMA, "jobset.sigs.k8s.io/replicatedjob-name": "node"}},
        "spec": {"containers": [{"name": "node", "image": "pytorch"}], **({"nodeName": f"gpu-{i}"} if bound else {})}}
        for i in range(4)]


Step = tuple[str, str, Callable[[Emulator], str] | None]
STEPS: list[Step] = [
    ("jobset-held", "Trainer made a TrainJob's JobSet; the admission policy named its gang, nothing held", None),
    ("resource-add", "the TrainJob's own add event, after the work is done", None),
    ("resource-update", "a status update of it", None),
    ("ref-add", "reference mode: a TrainJob whose runtime has initializers", None),
    ("out-of-scope", "a TrainJob that does not ask for KAI", None),
    ("not-opted-in", f"a suspended TrainJob in {ELSEWHERE}, a namespace that never opted in: nothing read or written",
     None),
    ("running", "a TrainJob whose JobSet was made before the admission policy: never named", None),
    ("exceeds-queue", "a gang of 8 GPUs in queue team-a-small, whose GPU limit is 4", None),
    ("podgroup-unschedulable", "the PodGroup source: KAI says why llama-finetune's gang waits", kai_reports),
    ("podgroup-unschedulable", "the same update again: its Event, named by content, exists already (409)", None),
    ("podgroup-scheduled", "the PodGroup source: every pod of the gang is on a node", binder_binds),
    ("podgroup-unschedulable", "the old unschedulable update, arriving late: nothing", None),
    ("resource-delete", "a TrainJob deleted", None),
    ("malformed-data-not-json", "garbage", None),
    ("malformed-missing-uid", "a resource event without metadata.uid", None),
    ("malformed-not-a-cloudevent", "not a CloudEvent at all", None),
]


# Made before the admission policy was installed: never named, it runs without a gang.
UNNAMED = {"jobset-whisper-asr"}


def seed(api: Emulator) -> None:
    """The samples, as Trainer and KAI made them, in team-a (opted in); and a TrainJob in team-z, which never opted in.
    Trainer's JobSets are created through the API, so the admission policy's twin names them
    (:mod:`kai_fn.local.emulator.naming`); whisper-asr's was made before the policy."""
    api.opt_in(NS)
    api.opt_in(ELSEWHERE, enabled=False)
    elsewhere = yaml.safe_load((SAMPLES / "cluster" / "trainjob-llama-finetune.yaml").read_text())
    elsewhere["metadata"] |= {"namespace": ELSEWHERE, "uid": "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"}
    elsewhere["spec"]["suspend"] = True
    api.put(elsewhere)
    objs = CustomObjectsApi(api.client())
    for name in SEED:
        obj = yaml.safe_load((SAMPLES / "cluster" / f"{name}.yaml").read_text())
        if obj["kind"] != "JobSet" or name in UNNAMED:
            api.put(obj)
            continue
        obj["metadata"].pop("labels", None)  # the sample shows it named; created through the API, the twin names it
        obj["spec"]["suspend"] = False
        meta = obj["metadata"]
        objs.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", meta["namespace"], "jobsets", obj)


def describe(call: Call) -> list[str]:
    where = f"{call.namespace}/" if call.namespace else ""
    what = f"{call.resource} {where}{call.name}" if call.name else f"{call.resource} in {call.namespace or 'cluster'}"
    return [call.method, what, str(call.status)]


def show_cluster(api: Emulator) -> None:
    print("\n== What the cluster holds now\n\nPodGroups")
    rows = []
    for pg in api.list(KAI_PG, "PodGroup"):
        notes = pg["metadata"].get("annotations") or {}
        stage = notes.get("kai-fn/replicated-jobs")
        gang = f"minMember {pg['spec']['minMember']}" + (f" of {stage}" if stage else "")
        rows.append([pg["metadata"]["labels"].get("kai-fn/trainjob"), pg["spec"]["queue"], gang,
                     notes.get("kai-fn/min-resources") or "-"])
    print(table(rows, ["TRAINJOB", "QUEUE", "GANG", "MIN RESOURCES"]))
    print("\nJobSet pod templates")
    rows = []
    for js in api.list("jobset.x-k8s.io/v1alpha2", "JobSet"):
        skip = (js["metadata"].get("annotations") or {}).get("kai.scheduler/skip-podgrouper", "-")
        for rj in js["spec"]["replicatedJobs"]:
            meta = rj["template"]["spec"]["template"].get("metadata") or {}
            keys = {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
            rows.append([js["metadata"]["name"], rj["name"], keys.get("pod-group-name"), keys.get("kai.scheduler/queue"),
                         skip])
    print(table(rows, ["JOBSET", "REPLICATED JOB", "pod-group-name", "QUEUE", "SKIP-PODGROUPER"]))
    print("\nJobSets: named at admission, never held nor written by kai_fn (nor their TrainJobs)")
    rows = []
    for js in api.list("jobset.x-k8s.io/v1alpha2", "JobSet"):
        meta = js["metadata"]
        marks = {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
        shown = ", ".join(f"{k}={v}" for k, v in sorted(marks.items()) if k.startswith("kai-fn/"))
        rows.append([meta["name"], js["spec"].get("suspend"), shown or "-"])
    print(table(rows, ["JOBSET", "SUSPEND", "KAI_FN'S MARKS"]))
    print("\nEvents")
    rows = [[ev["involvedObject"]["name"], ev["type"], ev["reason"], ev["message"]]
            for ev in sorted(api.list("v1", "Event"), key=lambda e: e["metadata"].get("creationTimestamp") or "")]
    print(table(rows, ["TRAINJOB", "TYPE", "REASON", "MESSAGE"]))


def run() -> int:
    with Emulator(name_gangs=True) as api, tempfile.TemporaryDirectory() as tmp:
        seed(api)
        log_path = Path(tmp) / "function.log"
        # Every event's work before its answer, so that each step shows the calls it caused.
        env = {"KUBECONFIG": api.kubeconfig, "KAI_FN_BACKGROUND_WORKERS": "0"}
        with log_path.open("wb") as log, FunctionProcess(env, log=log) as fn:
            print(f"kmock Kubernetes API emulator on {api.url}; function (python -m kai_fn.function.serve) on {fn.url}\n")
            for sample_name, what, before in STEPS:
                print(f"-- {sample_name}: {what}")
                if before is not None:
                    print(f"   (meanwhile {before(api)})")
                sample = load_sample(SAMPLES / "events" / f"{sample_name}.json")
                api.reset_calls()
                answer = post(fn.url, sample)
                outcome = answer.headers.get("X-Kai-Fn-Outcome") or answer.body.strip()
                print(f"   {sample.headers.get('Ce-Type', '(no Ce-Type)')} -> HTTP {answer.status} {outcome}")
                calls = api.calls
                writes = [c for c in calls if c.verb in ("create", "patch", "update", "delete")]
                refused = [c for c in writes if c.status is None or c.status >= 400]
                print(f"   API calls: {len(calls)}, writes: {len(writes) - len(refused)}"
                      + (f" ({len(refused)} refused: {', '.join(str(c.status) for c in refused)})" if refused else ""))
                if calls:
                    print(table([describe(c) for c in calls], indent="     "))
            show_cluster(api)
            print("\n== GET /metrics (the kai_fn_events_total lines)")
            with urllib.request.urlopen(f"{fn.url}/metrics", timeout=10) as response:
                text = response.read().decode()
            print("\n".join(f"   {line}" for line in text.splitlines() if line.startswith("kai_fn_events_total")))
        lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
        print("\n== The function's log: one JSON line per event (the first two)")
        for line in lines[:2]:
            print(json.dumps(line))
        for name in (LLAMA, "gpt-large"):
            print(f"\n== kubectl kai-fn explain {NS}/{name}\n")
            code, text = explain.run(f"{NS}/{name}", api.kubeconfig, "text", load())
            print(text)
            print(f"(exit {code})")
        print(f"\n== kubectl kai-fn status -n {NS}: every TrainJob kai_fn holds, what needs attention first\n")
        code, text, _ = status.run(NS, api.kubeconfig, "text", "2m", None, load())
        print(text)
        print(f"(exit {code}: nothing held longer than 2m)")
    print("\nOn a cluster (pip install . puts the kubectl plugin on your PATH):"
          "\n  kubectl kai-fn status -A                  exit 1 when a gang is owed longer than --held-for"
          "\n  kubectl kai-fn explain NAMESPACE/NAME     why one TrainJob's gang waits, and the next step"
          "\n  kubectl kai-fn release --held -A          make the gangs kai_fn owes when the function is down")
    return 0
