"""kai_fn and Trainer share the JobSet: Trainer owns it by server-side apply (field manager ``trainer``, forced), the
admission policy holds it, kai_fn decides it by JSON Patch. On a real API server with JobSet's webhooks and kai_fn's
policy: Trainer re-applying its JobSet, whether its TrainJob runs or is suspended later, keeps everything kai_fn wrote;
and a JobSet that runs without ever being held has immutable pod templates, so kai_fn leaves its spec alone and says
why (TooLate) instead of trying.

The function runs with its own ServiceAccount and knative/base's ClusterRoles (tests/testbed/kai_fn_install.py).
"""
from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from kubernetes import client

from kai_fn.core import keys
from kai_fn.function.migration.jobset_hold import HELD_LABEL
from tests.ce import resource, send
from tests.conftest import sample_object
from tests.builders import held_by_0_2
from tests.testbed.kai_fn_install import (
    AUDIENCE, NAMESPACE, SOURCE, SOURCE_SA, TRAINER, admission_policy, enabled_namespace, function_process, seed_samples,
)

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

JOBSET = ("jobset.x-k8s.io", "v1alpha2")


@pytest.fixture(scope="module")
def function(testbed: LiveCluster):
    seed_samples(testbed)
    with function_process(testbed, KAI_FN_AUDIENCE=AUDIENCE, KAI_FN_SENDERS=SOURCE) as fn:
        yield fn


@pytest.fixture(scope="module")
def policy(testbed: LiveCluster) -> Iterator[None]:
    with admission_policy(testbed):
        yield


@pytest.fixture
def namespace(testbed: LiveCluster, policy: None) -> Iterator[str]:
    name = enabled_namespace(testbed, "coexist")
    yield name
    client.CoreV1Api(testbed.api).delete_namespace(name)


def apply_as_trainer(testbed: LiveCluster, jobset: dict[str, Any]) -> None:
    """What Trainer's controller does with the JobSet it derives from a TrainJob: a forced server-side apply."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(jobset, f)
        f.flush()
        testbed.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=trainer", "-f", f.name)


def submit(testbed: LiveCluster, namespace: str, trainjob: str, jobset: str, runtime: str | None = None, *,
           running: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """A TrainJob submitted plainly and the JobSet Trainer makes for it, owned by it, as Trainer applies it (the policy
    holds it), or, ``running``, made before any policy held it (its pods run)."""
    objs = client.CustomObjectsApi(testbed.api)
    if runtime:
        rt = sample_object(runtime)
        rt["metadata"]["namespace"] = namespace
        objs.create_namespaced_custom_object(*TRAINER, namespace, "trainingruntimes", rt)
    job = sample_object(trainjob)
    del job["metadata"]["uid"]
    job["metadata"]["namespace"] = namespace
    job = objs.create_namespaced_custom_object(*TRAINER, namespace, "trainjobs", job)
    js = held_by_0_2(sample_object(jobset))  # unnamed, as Trainer makes it once the label below is gone
    js["metadata"].pop("uid")
    js["metadata"]["labels"].pop(HELD_LABEL)  # the policy's, never Trainer's
    js["metadata"]["namespace"] = namespace
    js["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
    js["spec"]["suspend"] = False  # from the TrainJob, which runs
    if running:  # made before the policy could hold it: here, its pods ask for a scheduler the policy does not hold
        js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    apply_as_trainer(testbed, js)
    return job, js


def kai_fn_marks(jobset: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The labels and annotations kai_fn writes, wherever they are: the JobSet's and each pod template's."""
    marks = {"jobset": {k: v for k, v in (jobset["metadata"].get("annotations") or {}).items()
                        if k == keys.KAI_SKIP_PODGROUPER}}
    for rj in jobset["spec"]["replicatedJobs"]:
        meta = rj["template"]["spec"]["template"].get("metadata") or {}
        marks[rj["name"]] = {**{f"label {k}": v for k, v in (meta.get("labels") or {}).items()},
                             **{f"annotation {k}": v for k, v in (meta.get("annotations") or {}).items()}}
    return marks


GANGS = [
    # (id, TrainJob sample, JobSet sample, namespaced runtime sample or None, replicatedJobs)
    ("flat", "trainjob-llama-finetune", "jobset-llama-finetune", None, 1),
    ("staged", "trainjob-bert-pretrain", "jobset-bert-pretrain", "trainingruntime-torch-llm-kai", 3),
]


@pytest.mark.parametrize("trainjob,jobset,runtime,replicated", [g[1:] for g in GANGS], ids=[g[0] for g in GANGS])
def test_trainer_reapplying_its_jobset_keeps_everything_kai_fn_wrote(testbed: LiveCluster, namespace: str, function,
                                                                    trainjob: str, jobset: str, runtime: str | None,
                                                                    replicated: int):
    objs = client.CustomObjectsApi(testbed.api)
    job, as_trainer_makes_it = submit(testbed, namespace, trainjob, jobset, runtime)
    answer = send(function.url, resource(job), token=testbed.sa_token(NAMESPACE, SOURCE_SA, [AUDIENCE]))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "done"), answer.body
    name = job["metadata"]["name"]
    patched = objs.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", name)
    written = kai_fn_marks(patched)
    podgroup = f"pg-{name}-{job['metadata']['uid']}"
    assert written["jobset"] == {keys.KAI_SKIP_PODGROUPER: "true"}
    pod_templates = {k: v for k, v in written.items() if k != "jobset"}
    assert len(pod_templates) == replicated
    named = {marks.get(f"annotation {keys.KAI_POD_GROUP_ANNOTATION}") for marks in pod_templates.values()}
    assert podgroup in named and named <= {podgroup, f"{podgroup}-stage-0"}, written  # the trainer's, its stage's

    assert patched["spec"]["suspend"] is False and HELD_LABEL not in (patched["metadata"].get("labels") or {})

    apply_as_trainer(testbed, as_trainer_makes_it)  # a reconcile of its running TrainJob
    live = objs.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", name)
    assert kai_fn_marks(live) == written and live["spec"]["suspend"] is False
    assert HELD_LABEL not in (live["metadata"].get("labels") or {}), "a decided JobSet is never held again"

    apply_as_trainer(testbed, {**as_trainer_makes_it, "spec": {**as_trainer_makes_it["spec"], "suspend": True}})
    live = objs.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", name)  # its TrainJob suspended (Kueue)
    assert kai_fn_marks(live) == written and live["spec"]["suspend"] is True


def test_a_running_jobset_never_held_keeps_its_spec_and_is_marked_too_late(testbed: LiveCluster, namespace: str,
                                                                        function):
    objs = client.CustomObjectsApi(testbed.api)
    job, _ = submit(testbed, namespace, "trainjob-llama-finetune", "jobset-llama-finetune", running=True)
    name = job["metadata"]["name"]
    before = objs.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", name)

    change = [{"op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/metadata",
               "value": {"annotations": {keys.KAI_POD_GROUP_ANNOTATION: "pg-x"}}}]
    refused = testbed.kubectl("patch", "jobsets.jobset.x-k8s.io", name, "-n", namespace, "--type=json",
                              "-p", json.dumps(change), check=False)
    # JobSet's validating webhook (ValidateImmutableField; the CRD's own rules say "Value is immutable"): pod
    # templates are immutable unless the JobSet is suspended
    assert refused.returncode != 0, refused.stdout
    assert "spec.replicatedJobs: Invalid value" in refused.stderr and "field is immutable" in refused.stderr, \
        refused.stderr

    token = testbed.sa_token(NAMESPACE, SOURCE_SA, [AUDIENCE])
    # JobSet's controller may write the JobSet's status between the pass's read and its guarded mark: the pass reads
    # it again and decides again, in the same delivery
    answer = send(function.url, resource(job), token=token)
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped"), answer.body

    after = objs.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", name)
    # JobSet's controller writes status (so resourceVersion moves); the object is as it was but for kai_fn's mark
    assert (after["metadata"]["generation"], after["spec"]) == (before["metadata"]["generation"], before["spec"])
    assert after["metadata"]["annotations"] == {**(before["metadata"].get("annotations") or {}),
                                                keys.MARKER_SKIPPED: "running"}
    podgroups = objs.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", namespace, "podgroups")["items"]
    assert podgroups == []
    live = objs.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
    assert live["metadata"]["resourceVersion"] == job["metadata"]["resourceVersion"], "the TrainJob is never written"
    events = client.CoreV1Api(testbed.api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=TrainJob").items
    assert [(e.reason, e.type) for e in events] == [("TooLate", "Warning")]
