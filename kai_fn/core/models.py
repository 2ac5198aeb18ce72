"""Typed views of what kai_fn reads: TrainJob, (Cluster)TrainingRuntime and the JobSet template inside it.

Only the fields the planner uses are declared and checked; everything else is tolerated, so the shapes of
Trainer v2.0 to v2.3 all parse. A bad field becomes an :class:`InputError` that names its path.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from kai_fn.core import keys
from kai_fn.core.quantity import Quantity


class InputError(ValueError):
    """Input that cannot be planned at all; the message names the field path."""


def _check_quantity(text: str) -> str:
    Quantity.parse(text)
    return text


def _as_text(value: Any) -> Any:
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


QuantityStr = Annotated[StrictStr, BeforeValidator(_as_text), AfterValidator(_check_quantity)]
ResourceList = dict[StrictStr, QuantityStr]
NonNegative = Annotated[StrictInt, Field(ge=0)]


class Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, alias_generator=to_camel, populate_by_name=True)


class Meta(Model):
    name: StrictStr | None = None
    namespace: StrictStr | None = None
    uid: StrictStr | None = None
    labels: dict[StrictStr, StrictStr] = {}
    annotations: dict[StrictStr, StrictStr] = {}
    resource_version: StrictStr | None = None


class Resources(Model):
    requests: ResourceList = {}
    limits: ResourceList = {}


class Container(Model):
    name: StrictStr
    resources: Resources = Resources()
    restart_policy: StrictStr | None = None


class PodSpec(Model):
    containers: list[Container] = []
    init_containers: list[Container] = []
    overhead: ResourceList = {}
    resources: Resources | None = None
    scheduler_name: StrictStr | None = None
    priority_class_name: StrictStr | None = None
    # Where the pods may go: a placeholder holding a pod's place must be placed as that pod would be.
    node_selector: dict[StrictStr, StrictStr] = {}
    tolerations: list[dict[StrictStr, Any]] = []
    affinity: dict[StrictStr, Any] | None = None


class PodTemplate(Model):
    metadata: Meta = Meta()
    spec: PodSpec = PodSpec()


class JobSpec(Model):
    parallelism: NonNegative | None = None
    completion_mode: StrictStr | None = None  # JobSet makes it Indexed when unset
    template: PodTemplate = PodTemplate()


class JobTemplate(Model):
    metadata: Meta = Meta()
    spec: JobSpec = JobSpec()


class DependsOn(Model):
    name: StrictStr
    status: StrictStr | None = None


class ReplicatedJob(Model):
    name: Annotated[StrictStr, Field(min_length=1)]
    replicas: NonNegative = 1
    depends_on: list[DependsOn] = []
    template: JobTemplate = JobTemplate()


class JobSetSpec(Model):
    replicated_jobs: list[ReplicatedJob] = []
    suspend: StrictBool | None = None


class JobSetTemplate(Model):
    metadata: Meta = Meta()
    spec: JobSetSpec = JobSetSpec()


class MPIPolicy(Model):
    run_launcher_as_node: StrictBool = False


class MLPolicy(Model):
    num_nodes: NonNegative | None = None
    torch: dict[str, Any] | None = None
    mpi: MPIPolicy | None = None
    jax: dict[str, Any] | None = None
    xgboost: dict[str, Any] | None = None
    flux: dict[str, Any] | None = None


class KaiPolicy(Model):
    """``podGroupPolicy.kai``: not upstream; present on clusters that run a patched Trainer CRD."""

    queue_name: StrictStr | None = None
    schedule_timeout_seconds: NonNegative | None = None


class CoschedulingPolicy(Model):
    schedule_timeout_seconds: NonNegative | None = None


class PodGroupPolicy(Model):
    coscheduling: CoschedulingPolicy | None = None
    volcano: dict[str, Any] | None = None
    kai: KaiPolicy | None = None


class RuntimeSpec(Model):
    ml_policy: MLPolicy | None = None
    pod_group_policy: PodGroupPolicy | None = None
    template: JobSetTemplate = JobSetTemplate()


class Runtime(Model):
    api_version: Literal["trainer.kubeflow.org/v1alpha1"]
    kind: Literal["TrainingRuntime", "ClusterTrainingRuntime"]
    metadata: Meta
    spec: RuntimeSpec = RuntimeSpec()


class RuntimeRef(Model):
    name: Annotated[StrictStr, Field(min_length=1)]
    api_group: StrictStr = keys.TRAINER_GROUP
    kind: StrictStr = keys.CLUSTER_TRAINING_RUNTIME


class Trainer(Model):
    num_nodes: NonNegative | None = None
    resources_per_node: Resources | None = None


class ReplicatedJobPatch(Model):
    name: StrictStr
    template: dict[str, Any] | None = None


class TemplateSpecPatch(Model):
    replicated_jobs: list[ReplicatedJobPatch] = []


class TemplatePatch(Model):
    metadata: Meta | None = None  # Trainer copies it onto the JobSet
    spec: TemplateSpecPatch | None = None


class RuntimeSpecPatch(Model):
    template: TemplatePatch | None = None


class RuntimePatch(Model):
    """One ``spec.runtimePatches[]`` entry (Trainer v2.2+)."""

    manager: StrictStr | None = None
    training_runtime_spec: RuntimeSpecPatch | None = None


class TrainJobSpec(Model):
    runtime_ref: RuntimeRef
    trainer: Trainer | None = None
    suspend: StrictBool | None = None
    managed_by: StrictStr | None = None
    runtime_patches: list[RuntimePatch] = []


class TrainJobMeta(Meta):
    name: Annotated[StrictStr, Field(min_length=1)]
    namespace: Annotated[StrictStr, Field(min_length=1)]
    uid: Annotated[StrictStr, Field(min_length=1)]


class TrainJob(Model):
    api_version: Literal["trainer.kubeflow.org/v1alpha1"]
    kind: Literal["TrainJob"]
    metadata: TrainJobMeta
    spec: TrainJobSpec


_MESSAGES = {
    "missing": "is required",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "bool_type": "must be a boolean",
    "dict_type": "must be an object",
    "list_type": "must be a list",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "too_short": "must not be empty",
    "string_too_short": "must not be empty",
}

M = TypeVar("M", bound=BaseModel)


def describe(error: ValidationError) -> str:
    """The first problem of a pydantic error as ``field.path: message``."""
    first = error.errors(include_url=False)[0]
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".") or "<root>"
    kind, ctx = first["type"], first.get("ctx", {})
    if kind == "greater_than_equal":
        message = f"must be >= {ctx['ge']}"
    elif kind == "literal_error":
        message = f"must be {ctx['expected']}"
    elif kind == "value_error":
        message = str(ctx.get("error", first["msg"]))
    else:
        message = _MESSAGES.get(kind, first["msg"])
    more = len(error.errors()) - 1
    return f"{path}: {message}" + (f" (and {more} more)" if more else "")


def parse(model: type[M], data: Any) -> M:
    if not isinstance(data, dict):
        raise InputError(f"<root>: must be an object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise InputError(describe(error)) from None
