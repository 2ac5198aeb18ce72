"""What the chain scenarios read off the cluster: a TrainJob's pods, bound or waiting, and its PodGroup."""
from __future__ import annotations

from datetime import datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

from kai_fn.core import keys
from kai_fn.core.state import gang_name as gang_name_of
from kai_fn.local.chain import PODGROUP_APIS, TRAINER, Chain

JOB = "jobset.sigs.k8s.io/replicatedjob-name"
TRAINJOB = "jobset.sigs.k8s.io/jobset-name"  # Trainer names the JobSet after the TrainJob
SP_LABEL = "scheduling.x-k8s.io/pod-group"
KAI_ANNOTATION = "pod-group-name"
QUEUE_API = ("scheduling.run.ai", "v2", "queues")
JOBSET = ("jobset.x-k8s.io", "v1alpha2")


def pods(chain: Chain, ns: str, trainjob: str, replicated_job: str = "node") -> list[client.V1Pod]:
    return [p for p in client.CoreV1Api(chain.api).list_namespaced_pod(
        ns, label_selector=f"{TRAINJOB}={trainjob},{JOB}={replicated_job}").items
        if p.metadata.deletion_timestamp is None]


def bound(ps: list[client.V1Pod]) -> list[client.V1Pod]:
    return [p for p in ps if p.spec.node_name]


def turned_away(p: client.V1Pod) -> bool:
    """The scheduler tried the pod and left it pending (PodScheduled=False, Unschedulable)."""
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in p.status.conditions or [])


def tried(ps: list[client.V1Pod]) -> bool:
    return all(p.spec.node_name or turned_away(p) for p in ps)


def scheduled_at(p: client.V1Pod) -> datetime:
    return next(c.last_transition_time for c in p.status.conditions or []
                if c.type == "PodScheduled" and c.status == "True")


def spread(ps: list[client.V1Pod]) -> float:
    """Seconds between the first and the last binding (the API's timestamps have whole seconds)."""
    times = [scheduled_at(p) for p in ps]
    return (max(times) - min(times)).total_seconds()


def group_of(p: client.V1Pod) -> str | None:
    """The PodGroup a pod names: KAI's annotation, or scheduler-plugins' label."""
    return (p.metadata.annotations or {}).get(KAI_ANNOTATION) or (p.metadata.labels or {}).get(SP_LABEL)


def jobset(chain: Chain, ns: str, trainjob: str) -> dict | None:
    """The JobSet Trainer made for the TrainJob (same name), or None."""
    try:
        return client.CustomObjectsApi(chain.api).get_namespaced_custom_object(*JOBSET, ns, "jobsets", trainjob)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def decision(chain: Chain, ns: str, trainjob: str) -> dict[str, str]:
    """kai_fn's marks on the TrainJob's JobSet (its decision), and the hold's label while it stands."""
    js = jobset(chain, ns, trainjob) or {"metadata": {}}
    marks = {**(js["metadata"].get("labels") or {}), **(js["metadata"].get("annotations") or {})}
    return {k: v for k, v in marks.items() if k.startswith("kai-fn/")}


def gang_name(chain: Chain, ns: str, trainjob: str) -> str | None:
    """The main PodGroup's name: the one the admission policy named on the pod templates (``pg-<name>-<uid>``, or
    the TrainJob's own name in the scheduler-plugins flavor), or a decision's on a JobSet kai_fn named itself."""
    if (marked := decision(chain, ns, trainjob).get(keys.MARKER_PODGROUP)) is not None:
        return marked
    try:
        obj = client.CustomObjectsApi(chain.api).get_namespaced_custom_object(*TRAINER, ns, "trainjobs", trainjob)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return gang_name_of(obj, chain.flavor)


def podgroup(chain: Chain, ns: str, trainjob: str) -> dict | None:
    """The PodGroup kai_fn made for the TrainJob, in the chain's flavor, or None while it has not."""
    name = gang_name(chain, ns, trainjob)
    try:
        found = name and client.CustomObjectsApi(chain.api).get_namespaced_custom_object(
            *PODGROUP_APIS[chain.flavor], ns, "podgroups", name)
        return found if found and (found["metadata"].get("labels") or {}).get(keys.MANAGED_BY_LABEL) == \
            keys.MANAGED_BY else None
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def made(chain: Chain, ns: str) -> set[str]:
    """TrainJobs of ``ns`` whose main gang kai_fn made (the decision on a JobSet named at admission): by its
    PodGroups, as each TrainJob's uid names its own."""
    groups = {p["metadata"]["name"] for p in client.CustomObjectsApi(chain.api).list_namespaced_custom_object(
        *PODGROUP_APIS[chain.flavor], ns, "podgroups",
        label_selector=f"{keys.MANAGED_BY_LABEL}={keys.MANAGED_BY}")["items"]}
    trainjobs = client.CustomObjectsApi(chain.api).list_namespaced_custom_object(*TRAINER, ns, "trainjobs")["items"]
    return {t["metadata"]["name"] for t in trainjobs if gang_name_of(t, chain.flavor) in groups}


def podgroup_annotations(chain: Chain, ns: str, trainjob: str) -> dict[str, str]:
    """The gang's marks (``kai-fn/bound``, ``kai-fn/timed-out``) on its main PodGroup."""
    return ((podgroup(chain, ns, trainjob) or {}).get("metadata") or {}).get("annotations") or {}


def kai_reasons(group: dict) -> list[str]:
    """KAI's reasons why the gang waits (PodGroup ``status.schedulingConditions[].reasons[].reason``)."""
    return [r.get("reason", "") for c in (group.get("status") or {}).get("schedulingConditions") or []
            for r in c.get("reasons") or []]


def table(chain: Chain, ns: str) -> str:
    """Every pod of the namespace, its node and phase: what a failure message shows."""
    rows = [f"{p.metadata.name:40} {p.spec.node_name or '-':16} {p.status.phase}"
            for p in client.CoreV1Api(chain.api).list_namespaced_pod(ns).items]
    return "\n".join([f"pods in {ns}:", *rows] if rows else [f"no pods in {ns}"])


def trainjob_events(chain: Chain, ns: str, name: str) -> list[str]:
    """The reasons of the Events on TrainJob ``name``, one per Event object (kai_fn names them after their content)."""
    events = client.CoreV1Api(chain.api).list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return sorted(e.reason for e in events if e.involved_object.kind == "TrainJob")


def trainjob_annotations(chain: Chain, ns: str, name: str) -> dict[str, str]:
    obj = client.CustomObjectsApi(chain.api).get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", ns, "trainjobs", name)
    return obj["metadata"].get("annotations") or {}


def queue(name: str, *, parent: str | None = None, gpu_quota: int = 0, gpu_limit: int = -1) -> dict:
    """A KAI Queue: GPUs as given (devices; -1 unlimited), CPU and memory unlimited."""
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec = {"resources": {"gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": 1},
                          "cpu": unlimited, "memory": unlimited}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "/".join(QUEUE_API[:2]), "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def trainjob_warnings(chain: Chain, ns: str, name: str, reason: str) -> list[str]:
    """The messages of the Events ``reason`` on TrainJob ``name``, one per Event object."""
    events = client.CoreV1Api(chain.api).list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [e.message for e in events if e.involved_object.kind == "TrainJob" and e.reason == reason]


def trainjob(chain: Chain, ns: str, name: str) -> dict:
    return client.CustomObjectsApi(chain.api).get_namespaced_custom_object(*TRAINER, ns, "trainjobs", name)
