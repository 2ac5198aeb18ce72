"""A Plan as the commands show it (``plan``, ``explain``): the core type carries data, its readers format it."""
from __future__ import annotations

from typing import Any

from kai_fn.core import keys, reserve
from kai_fn.core.plan import Plan


def summary(plan: Plan) -> dict[str, Any]:
    """What the plan decided."""
    out: dict[str, Any] = {"trainJob": f"{plan.namespace}/{plan.trainjob}", "flavor": plan.flavor}
    if plan.ignored:
        return {**out, "ignored": plan.ignored}
    out |= {
        "podGroup": plan.podgroup_name,
        "layout": plan.layout,
        "minMember": plan.min_member,
        "minResources": plan.min_resources,
        "queue": plan.queue,
        "podSets": [{"name": p.name, "count": p.count, "requests": p.requests} for p in plan.pod_sets],
    }
    if plan.reserves:
        out["reserves"] = [{"replicatedJob": job, "pods": count, "placeholders": [
            p["metadata"]["name"] for p in plan.placeholders if p["metadata"]["labels"][keys.PLACEHOLDER_LABEL] == job]}
            for job, count in reserve.parse_reserves(plan.reserves).items()]
    if plan.segments is not None:
        out["segments"] = {"replicatedJob": plan.segments.parent, "size": plan.segments.size,
                           "minMembers": list(plan.segments.minima), "subGroups": list(plan.segments.names),
                           "topologyConstraint": plan.segments.constraint}
    if plan.flavor == "kai":
        out["podGroups"] = [{"name": s.podgroup, "replicatedJobs": list(s.replicated_jobs),
                             "minMember": s.min_member, **({"main": True} if s.main else {})} for s in plan.stages]
    for key, value in (("priorityClassName", plan.priority_class), ("preemptibility", plan.preemptibility)):
        if value:
            out[key] = value
    if plan.flavor == "scheduler-plugins" or plan.schedule_timeout_seconds is not None:
        out["scheduleTimeoutSeconds"] = plan.schedule_timeout_seconds
    return out
