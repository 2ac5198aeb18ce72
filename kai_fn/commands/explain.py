"""``kubectl kai-fn explain NAMESPACE/NAME``: why a TrainJob's gang waits, read from the live cluster.

Read-only with the caller's kubeconfig, nothing written: GETs of the TrainJob, its runtime and JobSet; LISTs of its
pods, its PodGroups (by its uid label), the Queues, and, while kai_fn still owes it a release, kai_fn's Warnings on
it; and the heartbeat Lease when it has been held longer than a resync period. It gathers what kai_fn decided
(scope, plan), what exists (PodGroup, JobSet, markers), where it stands (the same reading as ``status``,
:mod:`kai_fn.core.state`) and what the scheduler says (conditions, queue, pods), then names one next step.
Exit 0 when bound or progressing, 1 when blocked (an absent function, for a TrainJob held longer than a resync
period, is one), 2 when the input or the cluster is unusable.
"""
from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kai_fn.core import gang, keys, segments
from kai_fn.core.objects import labels, meta, notes, suspended
from kai_fn.core.objects import stamp
from kai_fn.core.state import (Facts, Reading, facts, judged, main_of, named_at_admission, podgroups_of, reasons,
                               reservation)
from kai_fn.core.models import Runtime, TrainJob, parse
from kai_fn.core import decide
from kai_fn.core.decide import name_differences
from kai_fn.core.patch import MissingReplicatedJob, jobset_patch
from kai_fn.core.plan import Plan
from kai_fn.core.queue_check import RESOURCES, Queue, demand_of, show
from kai_fn.core.runtime import target
from kai_fn import plan_inputs
from kai_fn.commands import plan_view, status as status_mod, survey
from kai_fn.commands.status import Unreachable, Unusable
from kai_fn.kube import ApiServer, ApiSession, NoClusterConfig, Transient
from kai_fn.kube.lease import RESYNC_PERIOD_SECONDS
from kai_fn.settings import Settings
from kai_fn.commands.tables import table
from kai_fn.commands.terminal import visible

EXIT_OK, EXIT_BLOCKED, EXIT_INPUT = 0, 1, 2
# The keys of KAI's Queue status.allocated, per resource of the pre-check.
_STATUS_KEYS = {"gpu": "nvidia.com/gpu", "cpu": "cpu", "memory": "memory"}
_NEXT_FOR_REASON = {
    "OverLimit": "raise the queue's limit named above, or ask for fewer resources (trainer.numNodes, resourcesPerNode)",
    "NonPreemptibleOverQuota": "raise the queue's quota, or make the job preemptible (kai.scheduler/preemptibility)",
    "QueueDoesNotExist": "create the leaf Queue, or fix the kai.scheduler/queue label",
    "PreemptionDelayNotElapsed": "wait: KAI is about to preempt lower-priority work for this gang",
}


@dataclass
class Report:
    trainjob: str
    status: str = "progressing"  # bound | progressing | blocked | out-of-scope
    next: str = ""
    scope: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    kai: dict[str, Any] = field(default_factory=dict)
    reading: dict[str, Any] = field(default_factory=dict)  # what `status -o json` prints for it

    @property
    def exit_code(self) -> int:
        return EXIT_BLOCKED if self.status == "blocked" else EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        return {"trainJob": self.trainjob, "status": self.status, "next": self.next, "reading": self.reading,
                "scope": self.scope, "plan": self.plan, "state": self.state, "kai": self.kai}

    def verdict(self, status: str, next_step: str) -> Report:
        self.status, self.next = status, next_step
        return self


@dataclass
class _Look:
    """What explain read of one TrainJob before its plan."""

    obj: dict[str, Any]
    jobset: dict[str, Any] | None
    pods: list[dict[str, Any]]
    podgroups: list[dict[str, Any]]
    reading: Reading
    now: datetime.datetime

    @property
    def marks(self) -> Facts:
        return facts(self.obj, self.jobset, main_of(self.obj, self.jobset, podgroups_of(self.obj, self.podgroups)))

    @property
    def released(self) -> bool:
        return self.marks.podgroup is not None and self.marks.running


def explain(session: ApiSession, settings: Settings, namespace: str, name: str,
            now: datetime.datetime | None = None) -> Report:
    try:
        obj = session.trainjob(namespace, name)
    except Transient as error:
        raise Unreachable(f"cannot read TrainJob {namespace}/{name}: {error}") from None
    if obj is None:
        raise Unusable(f"no TrainJob {namespace}/{name}")
    out = Report(f"{namespace}/{name}")
    look = _look(session, settings, obj, now or datetime.datetime.now(datetime.UTC), out)
    planned = _plan(session, settings, look, out)
    if isinstance(planned, Report):
        return planned
    return _made(session, settings, look, planned, out)


def _look(session: ApiSession, settings: Settings, obj: dict[str, Any], now: datetime.datetime, out: Report) -> _Look:
    """The reading ``status`` prints, and what kai_fn marked."""
    meta = obj.get("metadata") or {}
    pods = session.jobset_pods(meta.get("namespace", ""), meta.get("name", ""))
    reading, podgroups = survey.reading_of(session, settings, obj, pods)
    look = _Look(obj, survey.jobset_of(session, obj), pods, podgroups, reading, now)
    out.reading = reading.as_dict()
    out.state["since"] = status_mod.age(reading.age(now)) if reading.since else None
    marked = {**notes(obj), **notes(look.jobset), **labels(look.jobset)}
    out.state |= {"released": look.released, "suspend": look.marks.suspended,
                  "markers": {k: v for k, v in sorted(marked.items()) if k.startswith("kai-fn/")}}
    return look


def _plan(session: ApiSession, settings: Settings, look: _Look, out: Report) -> Plan | Report:
    """The plan kai_fn makes of it (:mod:`kai_fn.plan_inputs`, as the function plans it), or the verdict when there
    is none to act on."""
    reader = plan_inputs.Remembered(session)
    match plan_inputs.planned(reader, settings, look.obj):
        case decide.InvalidTrainJob(error):
            return out.verdict("blocked", f"fix the TrainJob: {error}")
        case decide.RuntimeMissing(where):
            out.scope = {"inScope": None, "why": f"{where} does not exist"}
            return out.verdict("blocked", f"create {where} or fix spec.runtimeRef")
        case decide.InvalidRuntime(where, error):
            return out.verdict("blocked", f"fix {where}: {error}")
        case Plan() as result:
            pass
    if result.ignored:
        out.scope = {"inScope": False, "why": result.ignored}
        return out.verdict("out-of-scope", "nothing for kai_fn: " + result.ignored)
    job = parse(TrainJob, look.obj)
    out.scope = {"inScope": True, "why": _why_in_scope(job, parse(Runtime, reader.runtime(target(job))))}
    out.plan = _plan_view(result)
    if (skipped := look.marks.skipped) is not None:
        return out.verdict("blocked", f"kai_fn skipped it ({skipped}): delete it and resubmit it once kai_fn's "
                                      "admission policy is installed")
    if result.blocked:
        return out.verdict("blocked", "fix " + "; ".join(str(p) for p in result.problems if p.blocking))
    return result


def _made(session: ApiSession, settings: Settings, look: _Look, result: Plan, out: Report) -> Report:
    """What exists of the gang and what KAI says of it, then the verdict."""
    podgroup = _podgroup(look.podgroups, result, look.marks.podgroup)
    out.state |= {"podGroup": podgroup["metadata"]["name"] if podgroup else None,
                  "jobSet": _jobset_state(result, look.jobset)}
    pods = look.pods if look.jobset else []
    found = reasons(look.podgroups, podgroup)
    out.kai = {
        "conditions": [{"reason": r.reason, "message": r.message, "queue": r.queue} for r in found],
        "pods": {rj: {"bound": b, "waiting": w} for rj, (b, w) in gang.per_replicated_job(pods).items()},
    }
    if result.placeholders:  # MPI's launcher: its place held in the gang until JobSet makes it
        held = session.placeholders(meta(look.obj).get("namespace", ""), meta(look.obj).get("uid", "")) \
            if look.released else []
        out.kai["placeholders"] = [{"name": meta(p).get("name"), "for": labels(p).get(keys.PLACEHOLDER_LABEL),
                                    "node": (p.get("spec") or {}).get("nodeName")} for p in held]
        out.kai["reservation"] = reservation(podgroup) or "not made yet: made when its JobSet is released"
    queue_rows, queue_problem = queue_view(session, result)
    out.kai["queue"] = queue_rows
    if not look.released:
        return out.verdict(*_unreleased(session, settings, look, facts(look.obj, look.jobset, podgroup),
                                        queue_problem))
    if queue_problem:
        return out.verdict("blocked", queue_problem)
    return out.verdict(*_released(result, podgroup, pods, found, out))


def _unreleased(session: ApiSession, settings: Settings, look: _Look, marks: Facts,
                queue_problem: str | None) -> tuple[str, str]:
    if marks.timed_out is not None:
        return "blocked", (f"it timed out waiting for the scheduler ({stamp(marks.timed_out)}) and was suspended: "
                           "fix what KAI reported, then set spec.suspend: false")
    if marks.podgroup is None and marks.has_jobset and not marks.jobset_suspended and not marks.named:
        return "blocked", ("its JobSet runs and was never named at admission, so its pods cannot join a gang: "
                           "install kai_fn's admission policy, then resubmit it")
    if queue_problem:
        return "blocked", queue_problem
    if look.reading.held_longer(look.now, RESYNC_PERIOD_SECONDS):
        absent = status_mod.absence(session, settings, None, look.now)
        if absent is not None:
            ref = f"{meta(look.obj).get('namespace')}/{meta(look.obj).get('name')}"
            return "blocked", (f"kai_fn looks absent ({absent}) and it has been held for "
                               f"{status_mod.age(look.reading.age(look.now))}: check the function (kubectl get "
                               "ksvc,pingsource,apiserversource -n kai-fn), or release it without a gang: "
                               f"kubectl kai-fn release {ref} --yes --reason '...'")
    return _before_release(marks)


def _released(result: Plan, podgroup: dict[str, Any] | None, pods: list[dict[str, Any]],
              found: tuple[gang.Reason, ...], out: Report) -> tuple[str, str]:
    if podgroup is None:
        return "blocked", "its PodGroup is gone, so its pods never schedule: delete the TrainJob and resubmit it"
    counted = judged(result, podgroup, pods)
    out.kai["gang"] = counted.summary()
    if described := segments.of_podgroup(podgroup):
        out.kai["segments"] = described
    if counted.bound:
        return "bound", "nothing: every pod of the gang is on a node"
    if found and not counted.any_bound:
        first = found[0]
        return "blocked", f"{first.reason}: " + _NEXT_FOR_REASON.get(first.reason, first.message or
                                                                    "read KAI's message above")
    return "progressing", f"wait for the scheduler ({counted.summary()})"


def _why_in_scope(job: TrainJob, runtime: Runtime) -> str:
    if runtime.spec.pod_group_policy and runtime.spec.pod_group_policy.kai is not None:
        return f"{runtime.kind} {runtime.metadata.name} has podGroupPolicy.kai"
    if keys.KAI_QUEUE_LABEL in job.metadata.labels:
        return f"the TrainJob carries {keys.KAI_QUEUE_LABEL}={job.metadata.labels[keys.KAI_QUEUE_LABEL]}"
    if keys.KAI_QUEUE_LABEL in runtime.metadata.labels:
        return f"{runtime.kind} {runtime.metadata.name} carries {keys.KAI_QUEUE_LABEL}"
    return f"its pods ask for {keys.KAI_SCHEDULER_NAME}"


def _plan_view(result: Plan) -> dict[str, Any]:
    view = plan_view.summary(result)
    view.pop("trainJob", None)
    if result.problems:
        view["problems"] = [str(p) for p in result.problems]
    return view


def _podgroup(podgroups: list[dict[str, Any]], result: Plan, marked: str | None) -> dict[str, Any] | None:
    """The gang's PodGroup (the marker's, else the plan's name) among the TrainJob's own."""
    name = marked or result.podgroup_name
    if not name or not result.podgroup:
        return None
    return next((p for p in podgroups if (p.get("metadata") or {}).get("name") == name), None)


def _jobset_state(result: Plan, jobset: dict[str, Any] | None) -> str:
    if jobset is None:
        return "missing"
    running = not suspended(jobset)
    if named_at_admission(jobset):
        named = "names the plan's PodGroups" if not name_differences(result, jobset) else "names other PodGroups"
        return f"named at admission, {named}" + (", running" if running else ", suspended")
    try:
        carries = not jobset_patch(result, jobset)
    except MissingReplicatedJob as missing:
        return f"lacks replicatedJob {missing.args[0]!r}"
    return ("carries the plan" if carries else "lacks the plan") + (", running" if running else ", suspended")


def _before_release(marks: Facts) -> tuple[str, str]:
    if marks.hold is not None:
        return "progressing", f"held: {marks.hold}: remove the annotation to release it"
    if marks.podgroup is not None and marks.suspended:
        if marks.kueue is not None:
            return "progressing", f"gang made; {marks.kueue}: wait for Kueue to resume it"
        return "progressing", "gang made and left suspended: set spec.suspend: false to release it"
    if not marks.has_jobset:
        return "progressing", "wait for Trainer to create its JobSet; kai_fn acts on the JobSet's event or the resync"
    return "progressing", "kai_fn makes its gang on the next event or resync"


def queue_view(session: ApiSession, result: Plan) -> tuple[list[dict[str, Any]], str | None]:
    """The queue and its ancestors against the gang, per resource in KAI's units (the pre-check's own arithmetic,
    ``kai_fn.core.queue_check``); and what blocks, if anything."""
    tree, refusal = plan_inputs.queue_check(session, result)
    if tree is None or not result.queue:
        return [], None
    rows = [
        {"queue": q.metadata.name, "resource": short, "request": _number(demand_of(result.gangs, short)),
         "quota": _raw(q, short, "quota"), "limit": _raw(q, short, "limit"),
         "allocated": ((q.model_extra or {}).get("status") or {}).get("allocated", {}).get(_STATUS_KEYS[short])}
        for q in tree.chain(result.queue) for short in RESOURCES
    ]
    if refusal is None:
        return rows, None
    if refusal.kind == "missing":
        return rows, f"QueueNotFound: create the Queue {result.queue}, or fix the kai.scheduler/queue label"
    if refusal.kind == "not-leaf":
        return rows, f"queue {result.queue} is not a leaf queue: name one of its children"
    request, bound = (show(v) if v is not None else "?" for v in (refusal.request, refusal.bound))
    return rows, (f"GangExceedsQueue: the gang needs {refusal.resource} {request} but queue {refusal.at} "
                  f"allows {bound}" + (" (its quota, for a non-preemptible gang)"
                                                     if refusal.bound_kind == "quota" else "")
                  + ": raise the limit or ask for less")


def _raw(queue: Queue, resource: str, kind: str) -> float | int | None:
    section = getattr(queue.spec.resources, resource, None) if queue.spec.resources else None
    return getattr(section, kind, None) if section else None


def _number(value: Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else round(float(value), 1)


# -- presentation ------------------------------------------------------------------------------------------------

def render(report: Report) -> str:
    out = [f"TrainJob {visible(report.trainjob)}: {report.status.upper()}", ""]
    scope = report.scope
    if scope:
        answer = {True: "yes", False: "no", None: "unknown"}[scope.get("inScope")]
        out += ["SCOPE", table([["in scope", f"{answer}: {scope.get('why')}"]]), ""]
    out += _render_plan(report.plan) + _render_state(report) + _render_kai(report)
    out.append(f"NEXT: {visible(report.next)}")
    return "\n".join(out)


def _render_plan(p: dict[str, Any]) -> list[str]:
    if not p:
        return []
    rows = [["podGroup", p.get("podGroup")], ["layout", p.get("layout")], ["minMember", p.get("minMember")],
            ["queue", p.get("queue")],
            ["minResources", ", ".join(f"{k}={v}" for k, v in (p.get("minResources") or {}).items()) or None]]
    out = ["PLAN", table(rows), ""]
    if len(p.get("podGroups") or []) > 1:
        stages = [[g["name"], ", ".join(g["replicatedJobs"]), g["minMember"], "main" if g.get("main") else ""]
                  for g in p["podGroups"]]
        out += [table(stages, ["STAGE PODGROUP", "REPLICATED JOBS", "MIN MEMBER", ""]), ""]
    sets = [[s["name"], s["count"], ", ".join(f"{k}={v}" for k, v in s["requests"].items())]
            for s in p.get("podSets", [])]
    out += [table(sets, ["POD SET", "COUNT", "REQUESTS PER POD"]), ""]
    return out + [f"  problem: {visible(problem)}" for problem in p.get("problems", [])]


def _render_state(report: Report) -> list[str]:
    if not report.state:
        return []
    s, seen = report.state, report.reading
    queue, size, gpus = status_mod.gang_cells(seen) if seen else (None, None, None)
    rows = [["state", f"{seen['state']}" + (f" for {s['since']}" if s.get("since") else "") + f": {seen['reason']}"]
            if seen else None,
            ["gang", f"queue {queue or '-'}, minMember {size or '-'}, GPUs {gpus or '-'}"] if seen else None,
            ["PodGroup", s.get("podGroup") or "none"] if "podGroup" in s else None,
            ["JobSet", s.get("jobSet")] if "jobSet" in s else None,
            ["released", "yes" if s.get("released") else f"no (TrainJob spec.suspend {s.get('suspend')})"],
            ["markers", ", ".join(f"{k}={v}" for k, v in s.get("markers", {}).items()) or "none"]]
    return ["STATE", table([r for r in rows if r]), ""]


def _render_kai(report: Report) -> list[str]:
    kai, out = report.kai, []
    if kai.get("conditions"):
        out += ["KAI SAYS", table([[c["reason"], c["queue"], c["message"]] for c in kai["conditions"]],
                                  ["REASON", "QUEUE", "MESSAGE"]), ""]
    if kai.get("queue"):
        staged = report.plan.get("layout") == "staged"
        out += ["QUEUE (KAI units: cpu millicores, memory MB, gpu devices; -1 unlimited"
                + ("; a staged gang needs room for its largest stage at once)" if staged else ")"),
                table([[r["queue"], r["resource"], r["request"], r["quota"], r["limit"], r["allocated"]]
                       for r in kai["queue"]], ["QUEUE", "RESOURCE", "GANG NEEDS", "QUOTA", "LIMIT", "ALLOCATED"]), ""]
    if "pods" in kai:
        rows = [[rj, c["bound"], c["waiting"]] for rj, c in kai["pods"].items()]
        out += ["PODS", table(rows, ["REPLICATED JOB", "BOUND", "WAITING"]) if rows else "  none yet", ""]
    if "reservation" in kai:
        rows = [[p["name"], p["for"], p["node"] or "-"] for p in kai.get("placeholders") or []]
        out += ["RESERVATION", f"  {visible(kai['reservation'])}"]
        out += [table(rows, ["PLACEHOLDER", "HOLDS THE PLACE OF", "NODE"]) if rows else "  no placeholder pod now", ""]
    return out


def run(target_ref: str, kubeconfig: str | None, output: str, settings: Settings,
        context: str | None = None) -> tuple[int, str]:
    """(exit code, what to print); Unusable for exit 2. ``context``: of the kubeconfig (default its current one)."""
    namespace, sep, name = target_ref.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise Unusable(f"{target_ref!r}: expected NAMESPACE/NAME")
    try:
        cluster = ApiServer.from_settings(settings, kubeconfig, context)
    except NoClusterConfig as error:
        raise Unusable(str(error)) from None
    try:
        report = explain(cluster.session(), settings, namespace, name)
    except Transient as error:
        raise Unreachable(f"lost the cluster while reading {namespace}/{name}: {error}") from None
    text = json.dumps(report.as_dict(), indent=2) if output == "json" else render(report)
    return report.exit_code, text
