"""Which runtime a TrainJob names, and the template Trainer really uses once the TrainJob's patches are merged."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from kai_fn.core import keys
from kai_fn.core.models import InputError, JobTemplate, ReplicatedJob, Runtime, TrainJob

# Lists of a PodSpec that strategic merge patches merge by `name` (k8s.io/api patchMergeKey); others are replaced.
_MERGE_BY_NAME = frozenset({"containers", "initContainers", "ephemeralContainers", "volumes", "env"})

# What Trainer's JobTemplatePatch type holds (pkg/apis/trainer/v1alpha1, v2.2+): the CRD prunes the rest and Trainer
# decodes into that type, so e.g. a parallelism or container resources in a patch never reach the JobSet.
# A dict lists the keys kept, a one-item list the shape of each item, None a value kept whole.
_META_PATCH = {"labels": None, "annotations": None}
_CONTAINER_PATCH = {"name": None, "env": None, "volumeMounts": None, "securityContext": None}
_JOB_TEMPLATE_PATCH = {
    "metadata": _META_PATCH,
    "spec": {"template": {"metadata": _META_PATCH, "spec": {
        "serviceAccountName": None, "volumes": None, "initContainers": [_CONTAINER_PATCH],
        "containers": [_CONTAINER_PATCH], "imagePullSecrets": None, "securityContext": None, "nodeSelector": None,
        "affinity": None, "tolerations": None, "schedulingGates": None, "terminationGracePeriodSeconds": None,
    }}},
}


@dataclass(frozen=True)
class RuntimeTarget:
    kind: str
    name: str
    namespace: str | None  # None: cluster-scoped

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


def target(job: TrainJob) -> RuntimeTarget:
    """A TrainingRuntime is looked up in the TrainJob's namespace only; a ClusterTrainingRuntime by name."""
    ref = job.spec.runtime_ref
    if ref.api_group != keys.TRAINER_GROUP:
        raise InputError(f"spec.runtimeRef.apiGroup: {ref.api_group!r} is not supported (only {keys.TRAINER_GROUP})")
    if ref.kind == keys.TRAINING_RUNTIME:
        return RuntimeTarget(ref.kind, ref.name, job.metadata.namespace)
    if ref.kind == keys.CLUSTER_TRAINING_RUNTIME:
        return RuntimeTarget(ref.kind, ref.name, None)
    raise InputError(
        f"spec.runtimeRef.kind: {ref.kind!r} is not supported "
        f"(only {keys.TRAINING_RUNTIME} or {keys.CLUSTER_TRAINING_RUNTIME})"
    )


def check_matches(job: TrainJob, runtime: Runtime) -> None:
    """Guard against being handed a runtime other than the one the TrainJob names."""
    want = target(job)
    if runtime.kind != want.kind or runtime.metadata.name != want.name:
        raise InputError(f"runtime: the TrainJob names {want}, got {runtime.kind} {runtime.metadata.name}")
    if want.namespace and runtime.metadata.namespace not in (None, want.namespace):
        raise InputError(f"runtime: the TrainJob names {want}, got one in namespace {runtime.metadata.namespace}")


def replicated_jobs(job: TrainJob, runtime: Runtime) -> list[ReplicatedJob]:
    """The runtime's replicatedJobs with the TrainJob's ``spec.runtimePatches`` merged in, in order (Trainer v2.2+)."""
    patches: dict[str, list[dict[str, Any]]] = {}
    for patch in job.spec.runtime_patches:
        spec = patch.training_runtime_spec
        if spec and spec.template and spec.template.spec:
            for rj_patch in spec.template.spec.replicated_jobs:
                if rj_patch.template:
                    patches.setdefault(rj_patch.name, []).append(_patchable(rj_patch.template, _JOB_TEMPLATE_PATCH))
    jobs = []
    for rj in runtime.spec.template.spec.replicated_jobs:
        if rj.name not in patches:
            jobs.append(rj)
            continue
        merged = rj.template.model_dump(by_alias=True, exclude_none=True)
        for template_patch in patches[rj.name]:
            merged = strategic_merge(merged, template_patch)
        try:
            template = JobTemplate.model_validate(merged)
        except ValueError as error:
            raise InputError(f"spec.runtimePatches (replicatedJob {rj.name!r}): {error}") from None
        jobs.append(rj.model_copy(update={"template": template}))
    return jobs


def _patchable(value: Any, shape: Any) -> Any:
    """``value`` cut down to ``shape``, as the API server's pruning and Trainer's typed decoding cut a patch."""
    if isinstance(shape, dict) and isinstance(value, dict):
        return {k: _patchable(v, shape[k]) for k, v in value.items() if k in shape}
    if isinstance(shape, list) and isinstance(value, list):
        return [_patchable(item, shape[0]) for item in value]
    return value


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """The subset of Kubernetes' strategic merge that pod templates need: maps merge, named lists merge by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = strategic_merge(out[k], v, k)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if key in _MERGE_BY_NAME and isinstance(base, list) and isinstance(patch, list):
        out_list = [copy.deepcopy(item) for item in base]
        index = {item.get("name"): i for i, item in enumerate(out_list) if isinstance(item, dict)}
        for item in patch:
            name = item.get("name") if isinstance(item, dict) else None
            if name in index:
                out_list[index[name]] = strategic_merge(out_list[index[name]], item)
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(patch)
