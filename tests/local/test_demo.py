"""``python -m kai_fn demo``: the embedded demo's story, end to end."""
from __future__ import annotations

import re

from tests.commands.test_cli import run


def test_demo_runs_end_to_end_and_shows_what_changed():
    out = run("demo")
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    # The named JobSet's event does the work: the PodGroup, and nothing written to the JobSet or the TrainJob.
    first = text.split("-- resource-add:")[0]
    assert "jobset-held: Trainer made a TrainJob's JobSet; the admission policy named its gang, nothing held\n" \
           "   dev.knative.apiserver.resource.add -> HTTP 200 done" in first
    assert re.search(r"POST +podgroups in team-a +201\n +POST +events in team-a +201\n", first)
    assert "PATCH  jobsets team-a/llama" not in text and "PATCH  trainjobs" not in text.split("== What the cluster")[0]
    # The TrainJob's own events after it cost nothing: this process decided its JobSet.
    assert "the TrainJob's own add event, after the work is done\n   dev.knative.apiserver.resource.add -> HTTP 200 " \
           "skipped\n   API calls: 0, writes: 0" in text
    # A namespace that never opted in: ignored, nothing written there (at most the LIST of the opted-in namespaces).
    assert re.search(r"namespace that never opted in: nothing read or written\n   dev.knative.apiserver.resource.add -> "
                     r"HTTP 200 ignored\n   API calls: [01], writes: 0\n", text)
    # The cluster, as aligned tables rather than Python dicts.
    assert re.search(r"\n  llama-finetune +team-a +minMember 4 +cpu=16,memory=64Gi,nvidia.com/gpu=8\n", text)
    # a staged runtime: one PodGroup per start wave, the initializers' and the trainer's
    assert re.search(r"\n  bert-pretrain +team-a +minMember 2 of dataset-initializer,model-initializer +cpu=1,memory=2Gi\n",
                     text)
    assert re.search(r"\n  bert-pretrain +team-a +minMember 3 of node +cpu=24,memory=192Gi,nvidia.com/gpu=24\n", text)
    assert re.search(r"\n  llama-finetune +node +pg-llama-finetune-\S+ +- +true\n", text)  # named at admission
    assert re.search(r"\n  llama-finetune +False +kai-fn/named=true\n", text)
    assert re.search(r"\n  gpt-large +False +kai-fn/named=true\n", text)  # refused by the queue pre-check: no gang
    assert re.search(r"\n  whisper-asr +False +kai-fn/skipped=running\n", text)
    assert re.search(r"\n  whisper-asr +Warning +TooLate +its JobSet is already running", text)
    assert "{'" not in text.split("== The function's log")[0], "a Python dict in the printed cluster"
    # The gang's status, from the PodGroup source: one GangUnschedulable, one GangBound, nothing from the late update.
    assert re.search(r"\n  llama-finetune +Warning +GangUnschedulable +PodGroup pg-llama-finetune-\S+: Unschedulable: ", text)
    assert re.search(r"\n  llama-finetune +Normal +GangBound +PodGroup pg-llama-finetune-", text)
    assert text.count("GangUnschedulable ") == 1 and text.count("GangBound ") == 1
    late = "the old unschedulable update, arriving late: nothing\n   dev.knative.apiserver.resource.update -> HTTP 200 skipped"
    assert late in text
    # The same update again: the Event it POSTs exists (named by content), so nothing is written.
    assert re.search(r"the same update again: its Event, named by content, exists already \(409\)\n.*\n"
                     r"   API calls: \d+, writes: 0 \(1 refused: 409\)\n(.*\n)*? +POST +events in team-a +409\n", text)
    # The named JobSet's event came in resource mode, and its log line says so.
    (jobset_line,) = [line for line in text.splitlines() if line.startswith("{") and '"kind": "JobSet"' in line]
    assert '"type": "dev.knative.apiserver.resource.add"' in jobset_line and '"mode": "resource"' in jobset_line
    # explain at the end: the bound gang exits 0, the one its queue can never hold exits 1.
    assert "TrainJob team-a/llama-finetune: BOUND" in text and "(exit 0)" in text
    assert "TrainJob team-a/gpt-large: BLOCKED" in text and "(exit 1)" in text
    assert text.count("-> HTTP 400") == 3
    # It closes on status: every TrainJob kai_fn holds, what needs attention first, and where to go on a cluster.
    closing = text.split("== kubectl kai-fn status -n team-a")[1]
    states = re.findall(r"^team-a +(\S+) +(\S+) ", closing, re.M)
    assert states == [("gpt-large", "blocked"), ("bert-pretrain", "waiting"), ("whisper-asr", "running-without-gang"),
                      ("llama-finetune", "bound")]
    assert "(exit 0: nothing held longer than 2m)" in closing
    assert text.rstrip().splitlines()[-4].startswith("On a cluster")
    assert [line.split()[:3] for line in text.rstrip().splitlines()[-3:]] == [
        ["kubectl", "kai-fn", "status"], ["kubectl", "kai-fn", "explain"], ["kubectl", "kai-fn", "release"]]
