"""One scenario table for the gang named at admission, run on a real API server with the shipped policy
(tests/testbed/test_gang_naming.py) and on the emulator with its twin (tests/local/test_gang_naming_twin.py): which
JobSets are named, and the names, as kai_fn's planner (:mod:`kai_fn.core.stages`) computes them."""
from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from kai_fn.core import keys
from kai_fn.core.models import Runtime, TrainJob, parse
from kai_fn.core.plan import kai_podgroup_name
from kai_fn.core.podsets import pod_sets
from kai_fn.core.stages import MAX_CHAIN, chain_depth, stages
from kai_fn.local import shapes

JOBSETS = ("jobset.x-k8s.io", "v1alpha2")
NAMED = keys.NAMED_LABEL


def jobset(jobs: list[dict[str, Any]], owner: str = "tj", uid: str | None = None, *,
           controller: bool = True) -> dict[str, Any]:
    """A JobSet as Trainer makes one for the TrainJob ``owner`` (a controller ownerReference)."""
    return {"apiVersion": "/".join(JOBSETS), "kind": "JobSet",
            "metadata": {"name": owner, "ownerReferences": [{
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": owner,
                "uid": uid or str(uuid.uuid4()), "controller": controller}]},
            "spec": {"replicatedJobs": copy.deepcopy(jobs)}}


def _pod_annotations(made: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each replicatedJob's pod template annotations, by the job's name."""
    return {rj["name"]: (rj["template"]["spec"]["template"].get("metadata") or {}).get("annotations") or {}
            for rj in made["spec"]["replicatedJobs"]}


def names_written(made: dict[str, Any]) -> dict[str, str | None]:
    return {name: notes.get(keys.KAI_POD_GROUP_ANNOTATION) for name, notes in _pod_annotations(made).items()}


def pods_skipping(made: dict[str, Any]) -> dict[str, bool]:
    """Whether each pod template tells KAI's podgrouper to skip its pods."""
    return {name: notes.get(keys.KAI_SKIP_PODGROUPER) == "true" for name, notes in _pod_annotations(made).items()}


# A JSON Patch telling the podgrouper to skip the first job's pods: a change of its pod template.
SKIP_THE_FIRST_POD = [{"op": "add", "value": "true", "path": "/spec/replicatedJobs/0/template/spec/template/metadata/"
                       "annotations/" + keys.KAI_SKIP_PODGROUPER.replace("/", "~1")}]


def named_before_pods_skipped(sent: dict[str, Any]) -> dict[str, Any]:
    """``sent`` as an earlier policy named it at its CREATE: labelled, the podgrouper told to skip the JobSet, every
    pod template naming its PodGroup, and no pod template telling the podgrouper to skip its pods."""
    out, names = copy.deepcopy(sent), names_planned(sent)
    out["metadata"]["labels"] = {NAMED: "true"}
    out["metadata"]["annotations"] = {keys.KAI_SKIP_PODGROUPER: "true"}
    for rj in out["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"].setdefault("metadata", {})["annotations"] = {
            keys.KAI_POD_GROUP_ANNOTATION: names[rj["name"]]}
    return out


def check_kept_when_updated(objs: Any, namespace: str, sent: dict[str, Any]) -> None:
    """``sent``, made as :func:`named_before_pods_skipped` left it and running in ``namespace`` once that opted in:
    an UPDATE is admitted and leaves its pod templates as they were, as it must, since JobSet's webhook refuses the
    mark added to them (``objs``: a CustomObjectsApi)."""
    name = sent["metadata"]["name"]
    after = objs.patch_namespaced_custom_object(*JOBSETS, namespace, "jobsets", name,
                                                {"metadata": {"labels": {"touched": "yes"}}})
    assert after["metadata"]["labels"] == {NAMED: "true", "touched": "yes"}
    assert names_written(after) == names_written(sent) and set(pods_skipping(after).values()) == {False}
    with pytest.raises(ApiException, match=r"vjobset\.kb\.io\W{0,2} denied the request") as refused:
        objs.patch_namespaced_custom_object(*JOBSETS, namespace, "jobsets", name, SKIP_THE_FIRST_POD,
                                            _content_type="application/json-patch+json")
    assert refused.value.status == 422 and "immutable" in refused.value.body  # JobSet's webhook


def names_planned(sent: dict[str, Any], ml_policy: dict[str, Any] | None = None) -> dict[str, str]:
    """What kai_fn's planner names, for the TrainJob that owns ``sent`` on a runtime whose template it is."""
    ref = sent["metadata"]["ownerReferences"][0]
    job = parse(TrainJob, {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                           "metadata": {"name": ref["name"], "namespace": "ns", "uid": ref["uid"]},
                           "spec": {"runtimeRef": {"name": "rt", "kind": "TrainingRuntime"}}})
    spec: dict[str, Any] = {"template": {"spec": {"replicatedJobs": sent["spec"]["replicatedJobs"]}}}
    if ml_policy is not None:
        spec["mlPolicy"] = ml_policy
    runtime = parse(Runtime, {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
                              "metadata": {"name": "rt", "namespace": "ns"}, "spec": spec})
    main = kai_podgroup_name(job)
    sets = pod_sets(job, runtime)
    assert chain_depth(sets) <= MAX_CHAIN
    return {ps.name: stage.podgroup_name(main) for stage in stages(sets, reserve=True) for ps in stage.pod_sets}


def segment_marks_written(made: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each pod template's segment keys (what the pod policy reads, or its own SubGroup)."""
    wanted = (keys.SEGMENT_SIZE_LABEL, keys.SEGMENT_PARENT_ANNOTATION, keys.SEGMENT_JOB_PODS_ANNOTATION,
              keys.KAI_SUBGROUP_LABEL)
    out = {}
    for rj in made["spec"]["replicatedJobs"]:
        meta = rj["template"]["spec"]["template"].get("metadata") or {}
        found = {k: v for k, v in {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}.items()
                 if k in wanted}
        if found:
            out[rj["name"]] = found
    return out


def check(sent: dict[str, Any], made: dict[str, Any], named: bool, ml_policy: dict[str, Any] | None = None,
          segments: dict[str, dict[str, str]] | None = None) -> None:
    """``made`` as the admission left ``sent``: named as planned, or untouched."""
    labels = made["metadata"].get("labels") or {}
    notes = made["metadata"].get("annotations") or {}
    if named:
        assert names_written(made) == names_planned(sent, ml_policy)
        assert labels.get(NAMED) == "true" and notes.get(keys.KAI_SKIP_PODGROUPER) == "true"
        assert set(pods_skipping(made).values()) == {True}
        assert segment_marks_written(made) == (segments or {})
    else:
        assert set(names_written(made).values()) == {None}
        assert set(pods_skipping(made).values()) == {False}
        assert NAMED not in labels and keys.KAI_SKIP_PODGROUPER not in notes
    assert made["spec"].get("suspend") is not True


def _kai_job() -> list[dict[str, Any]]:
    return [shapes.node()]


def _default_scheduler() -> list[dict[str, Any]]:
    jobs = _kai_job()
    jobs[0]["template"]["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    return jobs


def _unowned() -> dict[str, Any]:
    out = jobset(_kai_job())
    out["metadata"] = {"name": "mine"}
    return out


def _own_metadata() -> dict[str, Any]:
    out = jobset(_kai_job())
    out["metadata"]["labels"] = {"team": "a"}
    out["metadata"]["annotations"] = {"note": "kept"}
    out["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {
        "annotations": {"kept": "yes"}, "labels": {"app": "x"}}
    return out


def _segmented(with_initializer: bool = False) -> dict[str, Any]:
    """Segments of 4 asked on the trainer's pod template (the runtime's, or a runtimePatch), 8 nodes; a second job
    in the trainer's wave gets its own SubGroup, an initializer's wave nothing."""
    node = shapes.node()
    node["template"]["spec"]["parallelism"] = node["template"]["spec"]["completions"] = 8
    node["template"]["spec"]["template"]["metadata"] = {"annotations": {keys.KAI_SEGMENT_SIZE: "4"}}
    side = shapes.initializer("side")
    side["template"]["metadata"] = {"labels": {shapes.ANCESTOR: "trainer"}}
    if with_initializer:
        node["dependsOn"] = [{"name": "dataset-initializer", "status": "Complete"}]
        side["dependsOn"] = [{"name": "dataset-initializer", "status": "Complete"}]
        return jobset([shapes.initializer("dataset-initializer"), node, side])
    return jobset([node, side])


SEGMENTS = {"node": {keys.SEGMENT_SIZE_LABEL: "4", keys.SEGMENT_PARENT_ANNOTATION: "node",
                     keys.SEGMENT_JOB_PODS_ANNOTATION: "8"},
            "side": {keys.KAI_SUBGROUP_LABEL: "side"}}

# (id, the JobSet sent, in a namespace that opted in, named, its runtime's mlPolicy, the segment keys written)
Case = tuple[str, Callable[[], dict[str, Any]], bool, bool, "dict[str, Any] | None", "dict[str, dict[str, str]]"]
TABLE: list[Case] = [
    *[(f"shape-{s.name}", lambda s=s: jobset(list(s.jobs)), True, True, s.ml_policy, {}) for s in shapes.SHAPES],
    ("with-metadata-of-its-own", _own_metadata, True, True, None, {}),
    ("segments-on-the-trainers-template", _segmented, True, True, None, SEGMENTS),
    ("segments-after-an-initializer", lambda: _segmented(True), True, True, None, SEGMENTS),
    ("another-scheduler", lambda: jobset(_default_scheduler()), True, False, None, {}),
    ("no-owner", _unowned, True, False, None, {}),
    ("owner-not-controller", lambda: jobset(_kai_job(), controller=False), True, False, None, {}),
    ("namespace-not-opted-in", lambda: jobset(_kai_job()), False, False, None, {}),
]
