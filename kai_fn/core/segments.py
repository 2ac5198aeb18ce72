"""Segments: the trainer's pods split into fixed-size groups, each placed within one topology domain (a rack, an
NVLink domain), asked with KAI's own annotations (KAI v0.17.0 docs/topology/segments.md).

The request is read as KAI's PyTorchJob grouper reads it (pkg/podgrouper/podgrouper/plugins/kubeflow/pytorch/
pytorch_grouper.go): the trainer's pod template first, then the TrainJob. The main wave's PodGroup gets a SubGroup
parent named after the trainer's replicatedJob and a leaf ``<parent>-<i>`` per segment, each with the segment
constraint. A pod's segment, ``floor((job index × pods per Job + completion index) / size)``, is computed at pod
creation by the pod admission policy (knative/components/segment-policy) from what :func:`template_changes` writes,
so no pod is ever scheduled outside its SubGroup.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import StrictStr

from kai_fn.core import keys, validation
from kai_fn.core.models import Model, Runtime, TrainJob
from kai_fn.core.podsets import PodSet
from kai_fn.core.runtime import replicated_jobs
from kai_fn.core.owner_metadata import Topology
from kai_fn.core.scope import Problem
from kai_fn.core.stages import Stage

MAX_SEGMENTS = 10000  # KAI's maxAllowedSegmentation (pytorch_grouper.go, lws_grouper.go)
_SEGMENT_KEYS = (keys.KAI_SEGMENT_SIZE, keys.KAI_SEGMENT_REQUIRED, keys.KAI_SEGMENT_PREFERRED)


@dataclass(frozen=True)
class Segments:
    """What was asked, checked: ``parent`` is the segmented replicatedJob (its SubGroup's name too)."""

    parent: str
    size: int
    pods: int  # every pod of the replicatedJob, replicas included
    job_pods: int  # the pods of one of its Jobs: completion indices 0 .. job_pods-1
    topology: str
    required_level: str | None
    preferred_level: str | None
    fields: tuple[tuple[str, str], ...] = ()  # (annotation key, the field it was read from), for problems

    def field(self, key: str) -> str:
        return dict(self.fields).get(key, key)

    @property
    def minima(self) -> tuple[int, ...]:
        """``minMember`` of each segment: the size, the last one smaller when the pods do not divide."""
        full, rest = divmod(self.pods, self.size)
        return (self.size,) * full + ((rest,) if rest else ())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"{self.parent}-{i}" for i in range(len(self.minima)))

    @property
    def constraint(self) -> dict[str, str]:
        return _constraint(Topology(self.topology, self.required_level, self.preferred_level))

    def of(self, completion_index: int, job_index: int = 0) -> str:
        """The SubGroup of a pod, as the pod policy computes it."""
        return f"{self.parent}-{(job_index * self.job_pods + completion_index) // self.size}"

    def summary(self) -> str:
        """``node: 3 segments of 4, 4, 2 pods, each within rack (required) of Topology t``, for people."""
        return of_podgroup({"spec": {"subGroups": [
            {"name": n, "parent": self.parent, "minMember": m, "topologyConstraint": self.constraint}
            for n, m in zip(self.names, self.minima)]}}) or ""


def _constraint(topology: Topology) -> dict[str, str]:
    out = {"topology": topology.topology}
    if topology.required_level:
        out["requiredTopologyLevel"] = topology.required_level
    if topology.preferred_level:
        out["preferredTopologyLevel"] = topology.preferred_level
    return out


def _segmented(sets: Sequence[PodSet]) -> PodSet | None:
    """The trainer's replicatedJob, picked as the main wave's is (:mod:`kai_fn.core.stages`)."""
    return next((ps for ps in sets if ps.name == keys.NODE),
                next((ps for ps in sets if ps.ancestor == keys.ANCESTOR_TRAINER), None))


def _template_annotations(job: TrainJob, runtime: Runtime) -> dict[str, dict[str, str]]:
    """Each replicatedJob's pod template annotations, the TrainJob's runtimePatches merged in."""
    return {rj.name: dict(rj.template.spec.template.metadata.annotations) for rj in replicated_jobs(job, runtime)}


@dataclass(frozen=True)
class _Asked:
    """One segment annotation as read: its value (None when absent) and the field it was read from."""

    value: str | None
    field: str


def _asked(job: TrainJob, target: PodSet | None, on_target: Mapping[str, str], key: str) -> _Asked:
    """The trainer's pod template first, the TrainJob after it, as KAI's PyTorchJob grouper reads them."""
    if target is not None and key in on_target:
        return _Asked(on_target[key], f"replicatedJob {target.name!r} pod template metadata.annotations[{key}]")
    return _Asked(job.metadata.annotations.get(key), f"TrainJob metadata.annotations[{key}]")


def requested(job: TrainJob, runtime: Runtime, sets: Sequence[PodSet], stage: Stage | None,
              flavor: str = "kai") -> tuple[Segments | None, list[Problem]]:
    """The segments asked for, or None; every problem names the field it comes from. ``stage``: the main wave."""
    on_template = _template_annotations(job, runtime)
    target = _segmented(sets)
    problems = [
        Problem(f"replicatedJob {name!r} pod template metadata.annotations[{key}]",
                f"segments split the trainer's replicatedJob ({target.name if target else 'none here'}) only")
        for name, notes in on_template.items() if target is None or name != target.name
        for key in _SEGMENT_KEYS if key in notes
    ]
    on_target = on_template.get(target.name, {}) if target else {}
    size, required, preferred, topology = (_asked(job, target, on_target, key) for key in (
        keys.KAI_SEGMENT_SIZE, keys.KAI_SEGMENT_REQUIRED, keys.KAI_SEGMENT_PREFERRED, keys.KAI_TOPOLOGY))
    if size.value is None:
        return None, problems + [Problem(a.field, f"needs {keys.KAI_SEGMENT_SIZE}: how many pods each segment has")
                                 for a in (required, preferred) if a.value is not None]
    if flavor != "kai":
        return None, problems + [Problem(size.field, "segments are KAI SubGroups; Coscheduling's PodGroup has none")]
    if target is None or stage is None or target not in stage.pod_sets or target in stage.reserved:
        return None, problems + [Problem(size.field, f"{runtime.kind} {runtime.metadata.name} has no trainer "
                                                     "replicatedJob in its main wave to split into segments")]
    problems += _mode_problems(job, runtime, target)
    pods = _positive(size.value)
    problems += _size_problems(size, pods, target)
    problems += _placement_problems(size, required, preferred, topology)
    problems += _name_problems(stage, target)
    if any(p.blocking for p in problems) or pods is None or not topology.value:
        return None, problems
    fields = ((keys.KAI_TOPOLOGY, topology.field), (keys.KAI_SEGMENT_REQUIRED, required.field),
              (keys.KAI_SEGMENT_PREFERRED, preferred.field))
    return Segments(target.name, pods, target.pods, target.count, topology.value, required.value or None,
                    preferred.value or None, fields), problems


def _mode_problems(job: TrainJob, runtime: Runtime, target: PodSet) -> list[Problem]:
    """A segment is found from a pod's completion index: the trainer's Job must be Indexed."""
    mode = next(rj.template.spec.completion_mode for rj in replicated_jobs(job, runtime) if rj.name == target.name)
    if mode in (None, "Indexed"):
        return []
    return [Problem(f"{runtime.kind} {runtime.metadata.name} replicatedJob {target.name!r} spec.completionMode",
                    f"is {mode}: its pods have no completion index to place them in a segment (use Indexed)")]


def _size_problems(size: _Asked, pods: int | None, target: PodSet) -> list[Problem]:
    """The size must be a positive integer that fills a segment and makes at most KAI's number of segments."""
    if pods is None:
        return [Problem(size.field, f"{size.value!r} is not a positive integer")]
    if pods > target.pods:
        return [Problem(size.field, f"{pods} is larger than the {target.pods} pods of replicatedJob "
                                    f"{target.name!r}: a segment could never fill")]
    if -(-target.pods // pods) > MAX_SEGMENTS:
        return [Problem(size.field, f"makes more than KAI's {MAX_SEGMENTS} segments")]
    return []


def _placement_problems(size: _Asked, required: _Asked, preferred: _Asked, topology: _Asked) -> list[Problem]:
    """A level each segment's pods share, named, and the Topology it belongs to (KAI ignores segments without)."""
    problems = []
    if required.value is None and preferred.value is None:
        problems.append(Problem(size.field, f"needs {keys.KAI_SEGMENT_REQUIRED} or {keys.KAI_SEGMENT_PREFERRED}: "
                                            "the topology level each segment's pods share"))
    problems += [Problem(a.field, "must name a topology level (a node label key or a level's alias)")
                 for a in (required, preferred) if a.value is not None and not a.value.strip()]
    if not topology.value:
        problems.append(Problem(topology.field, "must name the Topology the segments are placed in (KAI ignores "
                                                "segments without one)"))
    elif why := validation.dns_subdomain(topology.value):
        problems.append(Problem(topology.field, why))
    return problems


def _name_problems(stage: Stage, target: PodSet) -> list[Problem]:
    """The segments' SubGroups are named ``<trainer>-<i>``: no other replicatedJob may have such a name, and the
    longest must be a DNS label."""
    problems = []
    taken = [ps.name for ps in stage.pod_sets if ps is not target and ps.name.startswith(f"{target.name}-")
             and ps.name[len(target.name) + 1:].isdigit()]
    if taken:
        problems.append(Problem(f"replicatedJob {taken[0]!r}", f"has the name of a segment of {target.name!r}: "
                                                               "their SubGroups would clash"))
    if why := validation.dns_label(f"{target.name}-{MAX_SEGMENTS}"):
        problems.append(Problem(f"replicatedJob {target.name!r}", f"cannot name its segments' SubGroups: {why}"))
    return problems


def _positive(text: str) -> int | None:
    stripped = text.strip()
    return int(stripped) if stripped.isascii() and stripped.isdigit() and int(stripped) > 0 else None


# -- what the plan writes ------------------------------------------------------------------------------------------

def subgroups(stage: Stage, segments: Segments) -> list[dict[str, Any]]:
    """The main wave's SubGroups, shaped as KAI's PyTorchJob grouper makes them (the launcher in the place of its
    master): a leaf per other replicatedJob, the parent, then the segments."""
    out: list[dict[str, Any]] = [{"name": ps.name, "minMember": ps.pods}
                                 for ps in stage.pod_sets if ps.name != segments.parent]
    out.append({"name": segments.parent, "minSubGroup": len(segments.minima)})
    out += [{"name": name, "parent": segments.parent, "minMember": size, "topologyConstraint": segments.constraint}
            for name, size in zip(segments.names, segments.minima)]
    return out


def template_changes(stage: Stage, segments: Segments) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """(labels, annotations) each replicatedJob of the main wave adds: the segmented one what the pod policy reads,
    every other one its SubGroup (a pod of a PodGroup with SubGroups and no ``kai.scheduler/subgroup-name`` is in
    none, and KAI never schedules it)."""
    out: dict[str, tuple[dict[str, str], dict[str, str]]] = {
        ps.name: ({keys.KAI_SUBGROUP_LABEL: ps.name}, {}) for ps in stage.pod_sets if ps.name != segments.parent}
    out[segments.parent] = ({keys.SEGMENT_SIZE_LABEL: str(segments.size)},
                            {keys.SEGMENT_PARENT_ANNOTATION: segments.parent,
                             keys.SEGMENT_JOB_PODS_ANNOTATION: str(segments.job_pods)})
    return out


# -- the Topology the constraints name -----------------------------------------------------------------------------

class TopologyLevel(Model):
    node_label: StrictStr
    alias: StrictStr | None = None


class TopologySpec(Model):
    levels: list[TopologyLevel] = []


class TopologyResource(Model):
    """KAI's ``kai.scheduler/v1alpha1`` Topology: its levels, top first; a constraint names a nodeLabel or alias."""

    spec: TopologySpec = TopologySpec()

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(n for level in self.spec.levels for n in (level.node_label, level.alias) if n)


def level_problems(whole_gang: Topology | None, segments: Segments | None,
                   found: Mapping[str, TopologyResource | None]) -> list[Problem]:
    """A Topology that does not exist, or a level it lacks: KAI would never place the gang (its scheduler says
    "does not contain a level with this name"; topology plugin, job_filtering.go). Only the names in ``found``
    are checked."""
    problems = []
    where = "TrainJob metadata.annotations"
    checks = []
    if whole_gang is not None:
        checks += [(whole_gang.topology, f"{where}[{keys.KAI_TOPOLOGY}]", level, f"{where}[{key}]")
                   for key, level in ((keys.KAI_TOPOLOGY_REQUIRED, whole_gang.required_level),
                                      (keys.KAI_TOPOLOGY_PREFERRED, whole_gang.preferred_level))]
    if segments is not None:
        checks += [(segments.topology, segments.field(keys.KAI_TOPOLOGY), level, segments.field(key))
                   for key, level in ((keys.KAI_SEGMENT_REQUIRED, segments.required_level),
                                      (keys.KAI_SEGMENT_PREFERRED, segments.preferred_level))]
    missing_said: set[str] = set()
    for name, name_field, level, level_field in checks:
        if name not in found:
            continue
        resource = found[name]
        if resource is None:
            if name not in missing_said:
                missing_said.add(name)
                problems.append(Problem(name_field, f"Topology {name!r} ({keys.KAI_TOPOLOGY_API}) does not exist"))
        elif level and level not in resource.level_names:
            problems.append(Problem(level_field, f"Topology {name!r} has no level {level!r} (its levels: "
                                                 f"{', '.join(resource.level_names) or 'none'})"))
    return problems


def topologies_asked(job: TrainJob, runtime: Runtime) -> tuple[str, ...]:
    """Every Topology name the TrainJob or its runtime's pod templates give: what the shell reads before it plans
    (the plan checks the levels of those it is given)."""
    names = [job.metadata.annotations.get(keys.KAI_TOPOLOGY)]
    names += [notes.get(keys.KAI_TOPOLOGY) for notes in _template_annotations(job, runtime).values()]
    return tuple(dict.fromkeys(n for n in names if n))


def topology_resource(obj: dict[str, Any] | None) -> TopologyResource | None:
    """A Topology as read (None: it does not exist); one whose levels cannot be read has none."""
    if obj is None:
        return None
    try:
        return TopologyResource.model_validate(obj)
    except ValueError:
        return TopologyResource()


def of_podgroup(podgroup: dict[str, Any] | None) -> str | None:
    """A PodGroup's segments in words, as :meth:`Segments.summary` says them; None when it has none. Read from the
    PodGroup itself, so ``status`` and ``explain`` say what KAI is given."""
    subgroups = [s for s in ((podgroup or {}).get("spec") or {}).get("subGroups") or [] if isinstance(s, dict)]
    by_parent: dict[str, list[dict[str, Any]]] = {}
    for s in subgroups:
        if isinstance(s.get("parent"), str) and isinstance(s.get("topologyConstraint"), dict):
            by_parent.setdefault(s["parent"], []).append(s)
    parts = []
    for parent, children in by_parent.items():
        c = children[0]["topologyConstraint"]
        levels = [f"{c[k]} ({kind})" for k, kind in (("requiredTopologyLevel", "required"),
                                                     ("preferredTopologyLevel", "preferred")) if c.get(k)]
        sizes = ", ".join(str(s.get("minMember", "?")) for s in children)
        parts.append(f"{parent}: {len(children)} segment{'s' if len(children) != 1 else ''} of {sizes} pods, "
                     f"each within {' and '.join(levels) or 'no level'} of Topology {c.get('topology', '?')}")
    return "; ".join(parts) or None
