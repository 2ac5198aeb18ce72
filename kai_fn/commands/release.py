"""``kubectl kai-fn release``: the operator's way out when kai_fn owes a TrainJob its gang and work must start now
(the function is down, or a refusal cannot be fixed in time).

A TrainJob whose JobSet was named at admission (or is not made yet) gets **its gang**: the PodGroups of kai_fn's pure
plan (:func:`kai_fn.core.plan.plan`, read with the operator's own credentials), made as kai_fn would make them, so its
pods, waiting unbound for them, bind whole; kai_fn, back, finds them its own and makes no second gang. No queue
pre-check: the operator decides, KAI's own limits still apply. A JobSet admission did not name (suspended: one the
previous version held, or one on Kubernetes 1.33) is let go without a gang: patched once, guarded by the
resourceVersion it was read at, with ``kai-fn/skipped: released-by-operator`` (so kai_fn, back, leaves it alone) and,
when its TrainJob runs (none but kai_fn would resume it), ``spec.suspend: false``. Either way a Normal Event
``ReleasedByOperator`` on the TrainJob names who (the kubeconfig's user, by a SelfSubjectReview), why (``--reason``)
and what was done.

By name it releases a ``held`` or ``blocked`` TrainJob and refuses any other in one line; ``--held`` (with ``-n`` or
``-A``) releases every ``held`` one, never a ``blocked`` one (kai_fn refused those for a reason: name them). Either
way, one in a namespace that did not opt in (``kai-fn.io/enabled=true``) is refused in one line naming it: kai_fn
makes nothing there, and neither does its command (a GET of each namespace, with the operator's credentials).

Exit 0: every TrainJob asked for was released (with ``--held``: also when none is held). 1: nothing was written
because ``--yes`` is missing (what would be released is printed), or one was refused, could not be planned or changed
meanwhile (the others are released). 2: bad input, no such TrainJob, or a cluster that cannot be read (one line).
"""
from __future__ import annotations

import datetime
import socket
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kai_fn import plan_inputs
from kai_fn.commands import survey
from kai_fn.commands.status import Unreachable, Unusable, age, connect
from kai_fn.commands.tables import table
from kai_fn.commands.terminal import visible
from kai_fn.core import decide, keys, objects
from kai_fn.core.patch import jobset_patch
from kai_fn.core.plan import Plan
from kai_fn.core.state import Phase, Reading, facts, named_at_admission
from kai_fn.kube import Gone, GuardFailed, ApiSession, Stale, Transient
from kai_fn.settings import Settings
from kai_fn.kube.events import event_body

EXIT_OK, EXIT_NOT_DONE, EXIT_INPUT = 0, 1, 2
RELEASED_BY_OPERATOR = "ReleasedByOperator"
COMPONENT = "kai-fn-release"
RELEASABLE_BY_NAME = (Phase.HELD, Phase.BLOCKED)


class Outcome(StrEnum):
    RELEASED = "released"
    CHANGED = "changed"  # the JobSet changed since it was read: its guard failed, nothing written
    GONE = "gone"  # the JobSet was deleted meanwhile
    NOT_PLANNED = "not-planned"  # kai_fn's plan makes no gang of it: nothing written


@dataclass(frozen=True)
class Released:
    """What became of one TrainJob asked for."""

    namespace: str
    name: str
    outcome: Outcome
    event_posted: bool = False
    with_gang: bool = False
    why: str = ""  # NOT_PLANNED: what stops the plan

    def line(self) -> str:
        ref = f"{self.namespace}/{self.name}"
        if self.outcome is Outcome.CHANGED:
            return f"{ref}: changed since it was read; not released (run again to see where it stands)"
        if self.outcome is Outcome.GONE:
            return f"{ref}: deleted meanwhile"
        if self.outcome is Outcome.NOT_PLANNED:
            return f"{ref}: kai_fn would make no gang ({visible(self.why)}); nothing released"
        how = "with its gang" if self.with_gang else "without a gang"
        return f"released {ref} {how}" + ("" if self.event_posted else " (its Event could not be posted)")


@dataclass(frozen=True)
class Candidate:
    trainjob: dict[str, Any]
    reading: Reading


def who(session: ApiSession) -> str:
    """The caller's user name, as the API server authenticated it (SelfSubjectReview, Kubernetes 1.28+)."""
    try:
        user = session.self_review()
    except Transient as error:
        return f"an unidentified user (SelfSubjectReview: {error.status or error})"
    return str(user.get("username") or "an unidentified user")


def named(session: ApiSession, settings: Settings, refs: list[str]) -> tuple[list[Candidate], list[str]]:
    """The TrainJobs named NAMESPACE/NAME that may be released, and one line for each that may not."""
    found, refused = [], []
    for ref in refs:
        namespace, sep, name = ref.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise Unusable(f"{ref!r}: expected NAMESPACE/NAME")
        obj = session.trainjob(namespace, name)
        if obj is None:
            raise Unusable(f"no TrainJob {ref}")
        reading, _ = survey.reading_of(session, settings, obj)
        if reading.phase in RELEASABLE_BY_NAME:
            found.append(Candidate(obj, reading))
        else:
            refused.append(f"{visible(ref)}: not held ({reading.phase}: {visible(reading.reason)}); nothing to release")
    return found, refused


def held(session: ApiSession, settings: Settings, namespace: str | None) -> list[Candidate]:
    return [Candidate(obj, r) for obj, r in survey.entries(session, settings, namespace) if r.phase is Phase.HELD]


def opted_in(session: ApiSession, candidates: list[Candidate]) -> tuple[list[Candidate], list[str]]:
    """The candidates whose namespace opted in, and one line for each of the others (one GET per namespace)."""
    answers: dict[str, bool] = {}
    kept, refused = [], []
    for candidate in candidates:
        namespace, name = candidate.reading.namespace, candidate.reading.name
        if namespace not in answers:
            found = session.namespace(namespace)
            answers[namespace] = objects.labels(found).get(keys.OPT_IN_LABEL) == "true" if found else False
        if answers[namespace]:
            kept.append(candidate)
        else:
            refused.append(f"{visible(f'{namespace}/{name}')}: namespace {visible(namespace)} has not opted in "
                           f"({keys.OPT_IN_LABEL}=true); nothing released")
    return kept, refused


def release_one(session: ApiSession, settings: Settings, candidate: Candidate, user: str, reason: str) -> Released:
    """The gang made (a JobSet named at admission, or none yet), or one guarded patch of a suspended JobSet; then
    the Event."""
    meta = candidate.trainjob["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    jobset = survey.jobset_of(session, candidate.trainjob)
    if _gets_its_gang(jobset):
        return _with_gang(session, settings, candidate, user, reason)
    marks = facts(candidate.trainjob, jobset)
    try:
        if jobset is not None:
            resume = marks.jobset_suspended and not marks.suspended  # none but kai_fn would resume it
            ops = jobset_patch(None, jobset, {keys.MARKER_SKIPPED: keys.SKIPPED_BY_OPERATOR},
                               [{"op": "replace", "path": "/spec/suspend", "value": False}] if resume else [])
            if ops:
                session.patch_jobset(namespace, name, ops)
    except (Stale, GuardFailed):
        return Released(namespace, name, Outcome.CHANGED)
    except Gone:
        return Released(namespace, name, Outcome.GONE)
    message = (f"released without a gang by {user}: {reason}. kai_fn will make no gang for it "
               f"({keys.MARKER_SKIPPED}: {keys.SKIPPED_BY_OPERATOR}); it was {candidate.reading.phase}: "
               f"{candidate.reading.reason}")
    return Released(namespace, name, Outcome.RELEASED, event_posted=_post(session, candidate, message))


def _gets_its_gang(jobset: dict[str, Any] | None) -> bool:
    """Its JobSet was named at admission, or is not made yet (the policy will name it): it is released with its gang."""
    return jobset is None or named_at_admission(jobset)


def _with_gang(session: ApiSession, settings: Settings, candidate: Candidate, user: str, reason: str) -> Released:
    """The PodGroups (and placeholders) of kai_fn's plan, made with the operator's credentials, then the Event."""
    meta = candidate.trainjob["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    match plan_inputs.planned(plan_inputs.Remembered(session), settings, candidate.trainjob):
        case decide.RuntimeMissing(where):
            return Released(namespace, name, Outcome.NOT_PLANNED, why=f"{where} does not exist")
        case decide.InvalidTrainJob(error) | decide.InvalidRuntime(_, error):
            return Released(namespace, name, Outcome.NOT_PLANNED, why=error)
        case Plan() as planned:
            pass
    if not planned.actionable:
        why = planned.ignored or "; ".join(str(p) for p in planned.problems if p.blocking)
        return Released(namespace, name, Outcome.NOT_PLANNED, why=why)
    made = [pg["metadata"]["name"] for pg in planned.podgroups if session.create_podgroup(pg)]
    for pod in () if objects.suspended(candidate.trainjob) else planned.placeholders:
        session.create_pod(pod)
    message = (f"released with its gang by {user}: {reason}. The PodGroups of kai_fn's plan were made "
               f"({', '.join(made) or 'all existed already'}); it was {candidate.reading.phase}: "
               f"{candidate.reading.reason}")
    return Released(namespace, name, Outcome.RELEASED, event_posted=_post(session, candidate, message),
                    with_gang=True)


def _would(session: ApiSession, candidates: list[Candidate]) -> str:
    with_gang = [_gets_its_gang(survey.jobset_of(session, c.trainjob)) for c in candidates]
    if all(with_gang):
        return "would release, with its gang made from kai_fn's plan:"
    return "would release, without a gang:" if not any(with_gang) else "would release (with its gang where named):"


def _post(session: ApiSession, candidate: Candidate, message: str) -> bool:
    body = event_body(candidate.trainjob, RELEASED_BY_OPERATOR, message, warning=False)
    body |= {"source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
             "reportingInstance": socket.gethostname()[:128]}
    return session.create_event(candidate.trainjob["metadata"]["namespace"], body)


def run(refs: list[str], all_held: bool, namespace: str | None, everywhere: bool, yes: bool, reason: str | None,
        kubeconfig: str | None, settings: Settings, now: datetime.datetime | None = None,
        context: str | None = None) -> tuple[int, str]:
    """(exit code, what to print); Unusable for exit 2. ``context``: of the kubeconfig (default its current one)."""
    if all_held == bool(refs):
        raise Unusable("name TrainJobs as NAMESPACE/NAME, or give --held with -n NAMESPACE or -A")
    if all_held and not (namespace or everywhere):
        raise Unusable("--held needs -n NAMESPACE or -A")
    if refs and (namespace or everywhere):
        raise Unusable("-n and -A go with --held; name TrainJobs as NAMESPACE/NAME")
    if yes and not (reason or "").strip():
        raise Unusable("--yes needs --reason TEXT: it is recorded in the Event on each TrainJob")
    session = connect(settings, kubeconfig, context)
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        if all_held:
            candidates, refused = held(session, settings, namespace), list[str]()
        else:
            candidates, refused = named(session, settings, refs)
        candidates, elsewhere = opted_in(session, candidates)
        refused += elsewhere
        listing = table([[c.reading.namespace, c.reading.name, c.reading.phase, age(c.reading.age(now)),
                          c.reading.reason] for c in candidates], ["NAMESPACE", "NAME", "STATE", "SINCE", "REASON"],
                        indent="  ")
        if not candidates:
            lines = refused or ["nothing held" + (f" in namespace {namespace}" if namespace else "")]
            return (EXIT_NOT_DONE if refused else EXIT_OK), "\n".join(lines)
        if not yes:
            return EXIT_NOT_DONE, "\n".join([*refused, _would(session, candidates), listing,
                                             "nothing released: add --yes --reason TEXT to release them"])
        user = who(session)
        done = [release_one(session, settings, c, user, reason or "") for c in candidates]
    except Transient as error:
        raise Unreachable(f"cannot read or write the cluster: {error}") from None
    failed = refused or any(r.outcome is not Outcome.RELEASED for r in done)
    return (EXIT_NOT_DONE if failed else EXIT_OK), "\n".join([*refused, *(r.line() for r in done)])
