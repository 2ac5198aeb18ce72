"""A Plan as the commands show it (``plan``, ``explain``): the core type carries data, its readers format it."""
from __future__ import annotations

import datetime
from typing import Any

from kai_fn.core import keys, objects, reserve
from kai_fn.core.plan import Plan
from kai_fn.core.objects import stamp


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


def decision_of(result: Plan, trainjob: dict[str, Any], jobset: dict[str, Any], resume_setting: bool,
                now: datetime.datetime) -> tuple[dict[str, str] | None, bool]:
    """The decision the function writes with the plan on a held JobSet, and whether it resumes it: as its pass does
    for a TrainJob that asks for no wait (kai-fn/hold, KAI_FN_RESUME=false: templates only; suspended: decided, not
    resumed)."""
    waits = objects.hold_reason(trainjob) is not None or not resume_setting or objects.suspended(trainjob)
    if waits and not objects.suspended(trainjob):
        return None, False
    decision = {keys.MARKER_PODGROUP: result.podgroup_name or ""}
    if result.reserves:
        decision[keys.RESERVES_ANNOTATION] = result.reserves
    resume = not waits and keys.HELD_LABEL in ((jobset.get("metadata") or {}).get("labels") or {})
    if resume:
        decision[keys.RELEASED_AT_ANNOTATION] = stamp(now)
    return decision, resume
