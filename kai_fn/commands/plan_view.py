"""A Plan as the commands show it (``plan``, ``explain``): the core type carries data, its readers format it."""
from __future__ import annotations

import datetime
from typing import Any

from kai_fn.core import decide, keys, reasons, reserve
from kai_fn.core.patch import Op
from kai_fn.core.plan import Plan
from kai_fn.core.state import facts


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
        "priorityClassName": (plan.podgroup or {}).get("spec", {}).get("priorityClassName"),
        "preemptibility": (plan.podgroup or {}).get("spec", {}).get("preemptibility"),
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


class Mismatch(ValueError):
    """The JobSet given is not the runtime's (a replicatedJob the plan names is missing): unusable input."""


def jobset_patch_of(result: Plan, trainjob: dict[str, Any], jobset: dict[str, Any], resume_setting: bool,
                    now: datetime.datetime) -> tuple[list[Op], str | None]:
    """The JSON Patch the function's pass would apply to ``jobset`` now, by the pass's own decision
    (:func:`kai_fn.core.decide.with_plan`), and a problem to report beside it (the JobSet runs already: the patch
    marks it TooLate; named at admission: no patch, and why kai_fn waits)."""
    context = decide.Context(trainjob=trainjob, jobset=jobset, now=now, watched=True, resume=resume_setting)
    action = decide.with_plan(facts(trainjob, jobset), context, result)
    if isinstance(action, decide.Refuse):
        raise Mismatch(action.message)
    if isinstance(action, decide.Wait):
        return [], f"no gang yet ({action.token}): the JobSet was named at admission; nothing is patched"
    if isinstance(action, decide.MarkTooLate):
        return list(action.ops), f"{reasons.TOO_LATE}: {decide.TOO_LATE_MESSAGE}"
    assert isinstance(action, decide.MakeGang), action
    return list(action.ops), None
