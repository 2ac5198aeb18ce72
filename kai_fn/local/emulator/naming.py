"""The gang named at admission, as the emulator admits a JobSet: the twin of knative/components/admission-policy.

A real API server runs the policy's CEL; the emulator runs no admission policy, so it names a JobSet here, on the same
conditions, with kai_fn's planner (:mod:`kai_fn.core.stages`) computing the waves. The CEL is held to the planner on a
real API server (tests/testbed/test_gang_naming.py), and both to one scenario table
(tests/local/test_gang_naming_twin.py, tests/testbed/test_gang_naming.py's ``TABLE``).
"""
from __future__ import annotations

import copy
from typing import Any

from kai_fn.core import keys
from kai_fn.core.models import InputError, Runtime, TrainJob, parse
from kai_fn.core.podsets import pod_sets
from kai_fn.core.stages import main_stage, stages

ENABLED_LABEL = "kai-fn.io/enabled"


def controller(jobset: dict[str, Any]) -> dict[str, Any] | None:
    """The TrainJob that controls the JobSet (the policy's ``controlled-by-a-trainjob``), or None."""
    refs = (jobset.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("kind") == keys.TRAINJOB_KIND
                 and str(r.get("apiVersion", "")).startswith(f"{keys.TRAINER_GROUP}/") and r.get("controller") is True),
                None)


def asks_for_kai(jobset: dict[str, Any]) -> bool:
    jobs = (jobset.get("spec") or {}).get("replicatedJobs") or []
    return any((((j.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "schedulerName") == keys.KAI_SCHEDULER_NAME for j in jobs)


def applies(jobset: dict[str, Any], namespace_labels: dict[str, str], old: dict[str, Any] | None = None) -> bool:
    """The policy's namespaceSelector and matchConditions: an opted-in namespace, a JobSet a TrainJob controls whose
    pods ask for KAI, not being deleted; on UPDATE, only one named at its CREATE."""
    if namespace_labels.get(ENABLED_LABEL) != "true" or controller(jobset) is None or not asks_for_kai(jobset):
        return False
    if (jobset.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return old is None or ((old.get("metadata") or {}).get("labels") or {}).get(keys.NAMED_LABEL) is not None


def _model(jobset: dict[str, Any]) -> tuple[TrainJob, Runtime, str]:
    """The JobSet read as the planner reads a TrainJob on a runtime whose template it is, and its main gang's name."""
    owner = controller(jobset)
    assert owner is not None
    job = parse(TrainJob, {"apiVersion": keys.TRAINER_API, "kind": keys.TRAINJOB_KIND,
                           "metadata": {"name": owner.get("name"), "namespace": "twin", "uid": owner.get("uid")},
                           "spec": {"runtimeRef": {"name": "twin", "kind": keys.TRAINING_RUNTIME}}})
    runtime = parse(Runtime, {"apiVersion": keys.TRAINER_API, "kind": keys.TRAINING_RUNTIME,
                              "metadata": {"name": "twin", "namespace": "twin"},
                              "spec": {"template": {"spec": {"replicatedJobs": jobset["spec"]["replicatedJobs"]}}}})
    return job, runtime, f"pg-{owner.get('name')}-{owner.get('uid')}"


def podgroup_names(jobset: dict[str, Any]) -> dict[str, str]:
    """Each replicatedJob's PodGroup, by the planner's start waves: what the policy's CEL computes."""
    job, runtime, main = _model(jobset)
    return {ps.name: stage.podgroup_name(main) for stage in stages(pod_sets(job, runtime), reserve=True)
            for ps in stage.pod_sets}


def segment_marks(jobset: dict[str, Any]) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """With segments asked on the trainer's pod template, the (labels, annotations) each job of the main wave gets:
    what the policy's second mutation writes (the keys of :func:`kai_fn.core.segments.template_changes`)."""
    job, runtime, _ = _model(jobset)
    sets = pod_sets(job, runtime)
    main = main_stage(stages(sets, reserve=True))
    target = next((ps for ps in sets if ps.name == keys.NODE),
                  next((ps for ps in sets if ps.ancestor == keys.ANCESTOR_TRAINER), None))
    templates = {rj["name"]: rj["template"]["spec"]["template"] for rj in jobset["spec"]["replicatedJobs"]}
    size = ((templates[target.name].get("metadata") or {}).get("annotations") or {}).get(
        keys.KAI_SEGMENT_SIZE) if target is not None and target in main.pod_sets else None
    if size is None or target is None:
        return {}
    parallelism = next(rj["template"]["spec"].get("parallelism", 1) for rj in jobset["spec"]["replicatedJobs"]
                       if rj["name"] == target.name)
    out: dict[str, tuple[dict[str, str], dict[str, str]]]
    out = {ps.name: ({keys.KAI_SUBGROUP_LABEL: ps.name}, {}) for ps in main.pod_sets if ps.name != target.name}
    out[target.name] = ({keys.SEGMENT_SIZE_LABEL: size}, {keys.SEGMENT_PARENT_ANNOTATION: target.name,
                                                          keys.SEGMENT_JOB_PODS_ANNOTATION: str(parallelism)})
    return out


def _skips_pods(old: dict[str, Any] | None) -> bool:
    """The policy's ``skipPods``: at CREATE, or on UPDATE when a pod template already told the podgrouper to skip."""
    if old is None:
        return True
    return any(keys.KAI_SKIP_PODGROUPER in (((((rj.get("template") or {}).get("spec") or {}).get("template") or {})
                                              .get("metadata") or {}).get("annotations") or {})
               for rj in (old.get("spec") or {}).get("replicatedJobs") or [])


def named(jobset: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JobSet as the policy's mutation leaves it: labelled, KAI's podgrouper told to skip it and (from its CREATE)
    each pod, every pod template naming its PodGroup. A JobSet the planner cannot read is left as it is (the real API
    server refuses it first)."""
    try:
        names, marks = podgroup_names(jobset), segment_marks(jobset)
    except InputError:
        return jobset
    out = copy.deepcopy(jobset)
    meta = out.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), keys.NAMED_LABEL: "true"}
    meta["annotations"] = {**(meta.get("annotations") or {}), keys.KAI_SKIP_PODGROUPER: "true"}
    skip = {keys.KAI_SKIP_PODGROUPER: "true"} if _skips_pods(old) else {}
    for rj in out["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]
        pod_meta = pod.setdefault("metadata", {})
        labels, notes = marks.get(rj["name"], ({}, {}))
        pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}),
                                   keys.KAI_POD_GROUP_ANNOTATION: names[rj["name"]], **notes, **skip}
        if labels:
            pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
    return out
