"""What KAI's podgrouper would put on a TrainJob's PodGroup besides the gang: queue, priority, preemptibility, node
pool, the owner's labels and annotations, preemption delay, staleness and topology, read from the same places in the
same order, so that a cluster that switches from the podgrouper to kai_fn finds its jobs where they were.

KAI v0.17.0 groups a TrainJob's pods by skipping the TrainJob for its JobSet (``skiptopowner``): the JobSet gets the
per-kind defaults of the TrainJob (KAI's defaults ConfigMap) where it has no such label, then the TrainJob's labels and
annotations where it has none of the key, and the default grouper reads that one merged owner and one pod. Trainer
makes the JobSet's labels and annotations from the runtime's ``spec.template.metadata`` and the TrainJob's
``runtimePatches``; kai_fn reads them there (the JobSet it holds carries kai_fn's own marks besides). The pod is the
trainer's template: KAI reads whichever pod it reconciles, so the two agree wherever a runtime's templates agree.
docs/how-it-decides.md ("Same as KAI's podgrouper") lists each field and where kai_fn differs on purpose.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_fn.core import duration, keys, validation
from kai_fn.core.models import Meta, PodTemplate, ReplicatedJob, Runtime, TrainJob
from kai_fn.core.runtime import replicated_jobs

TRAIN_PRIORITY = "train"  # KAI's fallback for every workload it groups (podgrouper plugins/constants)
DEFAULT_NODE_POOL_LABEL = "kai.scheduler/node-pool"  # KAI's --nodepool-label-key default
PROJECT_LABEL = "project"
USER_KEY = "user"
PREEMPTION_DELAY = "kai.scheduler/preemption-delay"
STALENESS = "kai.scheduler/staleness-grace-period"
TOP_OWNER_ANNOTATION = "kai.scheduler/top-owner-metadata"
TRAINJOB_KIND = f"{keys.TRAINJOB_KIND}.{keys.TRAINER_GROUP}"  # schema.GroupKind.String()
JOBSET_KIND = "JobSet.jobset.x-k8s.io"
_OWN = "kai-fn/"  # kai_fn's own keys on an owner are never copied onto a PodGroup


@dataclass(frozen=True)
class TypeDefault:
    priority_class: str
    preemptibility: str


@dataclass(frozen=True)
class KaiCluster:
    """What the podgrouper reads from the cluster besides the workload, as the shell read it.

    ``priority_classes``: the names that exist; None when not read (every name is taken to exist).
    ``defaults``: the ``data`` of KAI's defaults ConfigMap; None when it does not exist. ``defaults_configured``:
    KAI's ``--default-priorities-configmap-name`` and ``-namespace`` are set (KAI's default: they are not)."""

    priority_classes: frozenset[str] | None = None
    defaults_configured: bool = False
    defaults: Mapping[str, str] | None = None
    node_pool_label: str = DEFAULT_NODE_POOL_LABEL

    def exists(self, priority_class: str) -> bool:
        return bool(priority_class) and (self.priority_classes is None or priority_class in self.priority_classes)


@dataclass(frozen=True)
class Problem:
    field: str
    message: str
    blocking: bool = True


@dataclass(frozen=True)
class Topology:
    topology: str
    required_level: str | None = None
    preferred_level: str | None = None


@dataclass(frozen=True)
class OwnerMetadata:
    queue: str
    queue_source: str
    priority_class: str
    priority_source: str
    preemptibility: str | None
    topology: Topology | None
    preemption_delay: str | None = None
    staleness: str | None = None  # None: the user said nothing, kai_fn's setting applies
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    problems: tuple[Problem, ...] = ()


def type_defaults(cluster: KaiCluster) -> dict[str, TypeDefault] | None:
    """KAI's per-kind defaults by ``Kind.group`` (and bare ``Kind``); {} when none are configured, None when the
    configured ConfigMap cannot be read or parsed (KAI then falls back to ``train`` and no preemptibility)."""
    if not cluster.defaults_configured:
        return {}
    if cluster.defaults is None or "types" not in cluster.defaults:
        return None
    try:
        items = json.loads(cluster.defaults["types"])
    except ValueError:
        return None
    if items is None:
        return {}
    if not isinstance(items, list):
        return None
    out = {}
    for item in items:
        if item is None:
            item = {}
        if not isinstance(item, dict):
            return None
        fields = {k.lower(): v for k, v in item.items()}  # encoding/json matches field names without case
        values = [fields.get(k, "") for k in ("typename", "group", "priorityname", "preemptibility")]
        if any(v is not None and not isinstance(v, str) for v in values):
            return None
        kind, group, priority, preemptibility = (v or "" for v in values)
        out[f"{kind}.{group}" if group else kind] = TypeDefault(priority, preemptibility)
    return out


def _for_kind(defaults: dict[str, TypeDefault], kind: str) -> TypeDefault | None:
    return defaults.get(kind) or defaults.get(kind.split(".", 1)[0])


def jobset_metadata(job: TrainJob, runtime: Runtime) -> Meta:
    """The labels and annotations Trainer puts on the JobSet: the runtime template's, then each runtime patch's."""
    labels, notes = dict(runtime.spec.template.metadata.labels), dict(runtime.spec.template.metadata.annotations)
    for patch in job.spec.runtime_patches:
        template = patch.training_runtime_spec.template if patch.training_runtime_spec else None
        if template is not None and template.metadata is not None:
            labels.update(template.metadata.labels)
            notes.update(template.metadata.annotations)
    return Meta(labels=labels, annotations=notes)


def named_priorities(job: TrainJob, runtime: Runtime, defaults: Mapping[str, str] | None) -> frozenset[str]:
    """Every PriorityClass name KAI would check for existence here: whether the shell must list them at all."""
    pod = deciding.template.spec.template if (deciding := deciding_job(replicated_jobs(job, runtime))) else None
    names = {job.metadata.labels.get(keys.KAI_PRIORITY_LABEL), jobset_metadata(job, runtime).labels.get(
        keys.KAI_PRIORITY_LABEL)}
    if pod is not None:
        names |= {pod.metadata.labels.get(keys.KAI_PRIORITY_LABEL), pod.spec.priority_class_name}
    found = type_defaults(KaiCluster(defaults_configured=True, defaults=defaults)) if defaults is not None else None
    names |= {d.priority_class for d in (found or {}).values()}
    return frozenset(n for n in names if n)


def deciding_job(jobs: list[ReplicatedJob]) -> ReplicatedJob | None:
    """The trainer's replicatedJob (``node``, else the first ``trainer`` ancestor), else the first."""
    named = [rj for rj in jobs if rj.name == keys.NODE]
    trainers = [rj for rj in jobs if rj.template.metadata.labels.get(keys.ANCESTOR_LABEL) == keys.ANCESTOR_TRAINER]
    found = named or trainers or jobs
    return found[0] if found else None


def derive(job: TrainJob, jobset: Meta, pod: PodTemplate, cluster: KaiCluster, runtime: Runtime,
           default_queue: str) -> OwnerMetadata:
    """KAI's podgrouper's answer for (TrainJob, JobSet, pod), and kai_fn's own queue sources after KAI's."""
    defaults = type_defaults(cluster)
    labels, notes, injected = dict(jobset.labels), dict(jobset.annotations), set()
    if defaults and (d := _for_kind(defaults, TRAINJOB_KIND)):  # skiptopowner: the skipped kind's defaults first
        if keys.KAI_PRIORITY_LABEL not in labels and cluster.exists(d.priority_class):
            labels[keys.KAI_PRIORITY_LABEL] = d.priority_class
            injected.add(keys.KAI_PRIORITY_LABEL)
        if keys.KAI_PREEMPTIBILITY_LABEL not in labels and d.preemptibility:
            labels[keys.KAI_PREEMPTIBILITY_LABEL] = d.preemptibility
            injected.add(keys.KAI_PREEMPTIBILITY_LABEL)
    owner_labels = {**job.metadata.labels, **labels}
    owner_notes = {**job.metadata.annotations, **notes}
    where = _Where(job.metadata.labels, labels, job.metadata.annotations, notes, frozenset(injected))
    problems: list[Problem] = []

    queue, queue_source = _queue(owner_labels, pod, cluster, runtime, default_queue, where)
    if (why := validation.label_value(queue)) or not queue:
        problems.append(Problem(queue_source, why or "the queue name must not be empty"))
    priority, priority_source = _priority(owner_labels, pod, cluster, defaults, where, problems)
    preemptibility = _preemptibility(owner_labels, pod, defaults, where, problems)
    topology = _topology(owner_notes, where, problems)
    delay = _duration(owner_notes, pod, PREEMPTION_DELAY, where, problems, negative=False)
    staleness = _duration(owner_notes, pod, STALENESS, where, problems, negative=True)

    out_labels = {k: v for k, v in owner_labels.items() if not k.startswith(_OWN)}
    if USER_KEY not in out_labels and USER_KEY in pod.metadata.labels:
        out_labels[USER_KEY] = pod.metadata.labels[USER_KEY]
    if cluster.node_pool_label and cluster.node_pool_label not in out_labels \
            and cluster.node_pool_label in pod.metadata.labels:
        out_labels[cluster.node_pool_label] = pod.metadata.labels[cluster.node_pool_label]
    out_notes = {USER_KEY: pod.metadata.annotations[USER_KEY]} if USER_KEY in pod.metadata.annotations else {}
    out_notes[TOP_OWNER_ANNOTATION] = top_owner_metadata(job.metadata.name, job.metadata.uid)
    out_notes.update((k, v) for k, v in owner_notes.items() if not k.startswith(_OWN))
    return OwnerMetadata(queue, queue_source, priority, priority_source, preemptibility, topology, delay, staleness,
                         out_labels, out_notes, tuple(problems))


@dataclass(frozen=True)
class _Where:
    """Says which object a merged owner key came from, for problems."""

    job_labels: Mapping[str, str]
    jobset_labels: Mapping[str, str]
    job_notes: Mapping[str, str]
    jobset_notes: Mapping[str, str]
    defaulted: frozenset[str] = frozenset()

    def label(self, key: str) -> str:
        if key in self.defaulted:
            return f"KAI's defaults ConfigMap ({keys.TRAINJOB_KIND})"
        return (f"runtime spec.template.metadata.labels[{key}]" if key in self.jobset_labels
                else f"TrainJob metadata.labels[{key}]")

    def note(self, key: str) -> str:
        return (f"runtime spec.template.metadata.annotations[{key}]" if key in self.jobset_notes
                else f"TrainJob metadata.annotations[{key}]")


def _queue(owner: Mapping[str, str], pod: PodTemplate, cluster: KaiCluster, runtime: Runtime, default_queue: str,
           where: _Where) -> tuple[str, str]:
    """KAI's: owner label, pod label, ``project`` (with the pod's node pool); then kai_fn's: the runtime's policy and
    label, the setting (KAI's own default, ``default-queue``, unless set)."""
    key = keys.KAI_QUEUE_LABEL
    if key in owner:
        return owner[key], where.label(key)
    if key in pod.metadata.labels:
        return pod.metadata.labels[key], f"pod template metadata.labels[{key}]"
    project = owner.get(PROJECT_LABEL) if PROJECT_LABEL in owner else pod.metadata.labels.get(PROJECT_LABEL, "")
    if project:
        pool = pod.metadata.labels.get(cluster.node_pool_label) if cluster.node_pool_label else None
        return (f"{project}-{pool}" if pool is not None else project), f"the {PROJECT_LABEL} label (KAI's naming)"
    kai = runtime.spec.pod_group_policy.kai if runtime.spec.pod_group_policy else None
    if kai is not None and kai.queue_name is not None:
        return kai.queue_name, f"{runtime.kind} spec.podGroupPolicy.kai.queueName"
    if key in runtime.metadata.labels:
        return runtime.metadata.labels[key], f"{runtime.kind} metadata.labels[{key}]"
    return default_queue, "setting KAI_DEFAULT_QUEUE"


def _priority(owner: Mapping[str, str], pod: PodTemplate, cluster: KaiCluster, defaults: dict[str, TypeDefault] | None,
              where: _Where, problems: list[Problem]) -> tuple[str, str]:
    """The owner's label, else the pod's label, else its ``spec.priorityClassName``, if that class exists; else the
    JobSet kind's default if it exists; else ``train`` (not checked: KAI's scheduler then uses the cluster's default
    priority, as for any PodGroup naming a class that does not exist)."""
    key = keys.KAI_PRIORITY_LABEL
    if key in owner:
        named, source = owner[key], where.label(key)
        if named and (why := validation.dns_subdomain(named)):
            problems.append(Problem(source, why))
    elif key in pod.metadata.labels:
        named, source = pod.metadata.labels[key], f"pod template metadata.labels[{key}]"
    else:
        named, source = pod.spec.priority_class_name or "", "pod template spec.priorityClassName"
    if cluster.exists(named):
        return named, source
    if named:
        problems.append(Problem(source, f"PriorityClass {named!r} does not exist: KAI's podgrouper would ignore it, "
                                        "and so does kai_fn", blocking=False))
    if defaults is None:
        return TRAIN_PRIORITY, "KAI's fallback (its defaults ConfigMap cannot be read)"
    if (d := _for_kind(defaults, JOBSET_KIND)) and cluster.exists(d.priority_class):
        return d.priority_class, "KAI's defaults ConfigMap (JobSet)"
    return TRAIN_PRIORITY, "KAI's fallback"


_PREEMPTIBILITY = ("preemptible", "non-preemptible", "")


def _preemptibility(owner: Mapping[str, str], pod: PodTemplate, defaults: dict[str, TypeDefault] | None,
                    where: _Where, problems: list[Problem]) -> str | None:
    key = keys.KAI_PREEMPTIBILITY_LABEL
    for value, source in ((owner.get(key), where.label(key)),
                          (pod.metadata.labels.get(key), f"pod template metadata.labels[{key}]")):
        if value is None:
            continue
        if value in _PREEMPTIBILITY:
            return value or None
        problems.append(Problem(source, f"{value!r} is not one of {', '.join(keys.PREEMPTIBILITY_VALUES)}",
                                blocking=not source.startswith("KAI's")))  # KAI's own config: passed over, as KAI does
    if defaults and (d := _for_kind(defaults, JOBSET_KIND)) and d.preemptibility.lower() in _PREEMPTIBILITY:
        return d.preemptibility.lower() or None
    return None


def _duration(owner: Mapping[str, str], pod: PodTemplate, key: str, where: _Where, problems: list[Problem],
              negative: bool) -> str | None:
    """The first that parses (owner, then pod), as KAI writes it back (Go's form: ``90s`` is ``1m30s``); one that does
    not is dropped, as KAI drops it, with a warning."""
    for value, source in ((owner.get(key), where.note(key)),
                          (pod.metadata.annotations.get(key), f"pod template metadata.annotations[{key}]")):
        if value is None:
            continue
        ns = duration.parse(value)
        if ns is not None and (negative or ns >= 0):
            return duration.text(ns)
        problems.append(Problem(source, f"{value!r} is not a {'' if negative else 'non-negative '}Go duration "
                                        "(such as 30s or 5m): ignored, as KAI ignores it", blocking=False))
    return None


def _topology(notes: Mapping[str, str], where: _Where, problems: list[Problem]) -> Topology | None:
    name = notes.get(keys.KAI_TOPOLOGY)
    levels = {k: notes.get(k) for k in (keys.KAI_TOPOLOGY_REQUIRED, keys.KAI_TOPOLOGY_PREFERRED)}
    if not name:
        stray = [k for k, v in levels.items() if v]
        if stray:
            problems.append(Problem(where.note(stray[0]), f"needs {keys.KAI_TOPOLOGY} to name the Topology"))
        return None
    if why := validation.dns_subdomain(name):
        problems.append(Problem(where.note(keys.KAI_TOPOLOGY), why))
    for key, level in levels.items():
        if level is not None and not level.strip():
            problems.append(Problem(where.note(key), "must name a topology level (a node label key)"))
    return Topology(name, levels[keys.KAI_TOPOLOGY_REQUIRED] or None, levels[keys.KAI_TOPOLOGY_PREFERRED] or None)


def job_topology(rj: ReplicatedJob) -> Topology | None:
    """A replicatedJob's own constraint, from its Job template's annotations, as KAI's JobSet grouper reads it for
    each replica's subgroup: a topology and at least one level, else none."""
    notes = rj.template.metadata.annotations
    name = notes.get(keys.KAI_TOPOLOGY, "")
    required, preferred = notes.get(keys.KAI_TOPOLOGY_REQUIRED, ""), notes.get(keys.KAI_TOPOLOGY_PREFERRED, "")
    if not name or not (required or preferred):
        return None
    return Topology(name, required or None, preferred or None)


_PLAIN_UNSAFE = re.compile(r"^([-+]?(\.?[0-9][0-9_]*|0[box][0-9a-f_]+|[0-9][0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9]+)?|"
                           r"\.(inf|Inf|INF|nan|NaN|NAN))|[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?|~|null|Null|NULL|"
                           r"true|True|TRUE|false|False|FALSE|y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF|)$")


def top_owner_metadata(name: str, uid: str) -> str:
    """``kai.scheduler/top-owner-metadata`` as KAI writes it (yaml.v3 of name, uid, group, version, kind), for the
    TrainJob: kai_fn's PodGroup is the TrainJob's, where the podgrouper's is the JobSet's."""
    fields = (("name", name), ("uid", uid), ("group", keys.TRAINER_GROUP), ("version", keys.TRAINER_VERSION),
              ("kind", keys.TRAINJOB_KIND))
    return "".join(f"{k}: {_scalar(v)}\n" for k, v in fields)


def _scalar(value: str) -> str:
    return json.dumps(value) if _PLAIN_UNSAFE.match(value) else value


def dress(podgroup: dict[str, Any], meta: OwnerMetadata | None) -> dict[str, Any]:
    """A kai_fn PodGroup with the podgrouper's metadata: the owner's labels and annotations under kai_fn's own (which
    win: its sources select by them), the preemption delay, and the staleness the user asked for."""
    if meta is None:
        return podgroup
    out = {**podgroup, "metadata": dict(podgroup["metadata"]), "spec": dict(podgroup["spec"])}
    out["metadata"]["labels"] = {**meta.labels, **podgroup["metadata"]["labels"]}
    out["metadata"]["annotations"] = {**meta.annotations, **podgroup["metadata"]["annotations"]}
    if meta.preemption_delay is not None:
        out["spec"]["preemptionDelay"] = meta.preemption_delay
    if meta.staleness is not None:
        out["spec"]["stalenessGracePeriod"] = meta.staleness
    return out
