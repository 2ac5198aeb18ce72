"""``kubectl kai-fn status``: every TrainJob in kai_fn's scope, one line each, what needs attention first.

Read-only, at the cost :mod:`kai_fn.commands.survey` states, plus one GET of the resync heartbeat (the Lease,
:mod:`kai_fn.kube.lease`) when a TrainJob has been held longer than a resync period: held that long with the
function absent, nothing will release it, and the output says so plainly.

Exit 0 when nothing is ``held`` longer than ``--held-for`` (default 2m), 1 when something is, or when a TrainJob is
in a state ``--fail-on`` names (``blocked``, ``timed-out``, ...: for a cron job or CI), 2 for bad input or a cluster
that cannot be read (one line, no traceback).
"""
from __future__ import annotations

import datetime
import json
import re
from collections.abc import Sequence
from typing import Any

from kai_fn.commands import survey
from kai_fn.commands.tables import table
from kai_fn.commands.terminal import visible
from kai_fn.core.state import Phase, Reading, order
from kai_fn.kube import lease as heartbeat
from kai_fn.kube import ApiServer, ApiSession, NoClusterConfig, Transient
from kai_fn.settings import Settings

EXIT_OK, EXIT_HELD, EXIT_INPUT = 0, 1, 2
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?$")
_REASON_WIDTH = 70


class Unusable(Exception):
    """Bad input, or no cluster to ask: exit 2 with this one line."""


class Unreachable(Unusable):
    """The API server did not answer (or not in time): the CLI adds which server and context it asked."""


def duration(text: str) -> float:
    """``90``, ``90s``, ``2m``, ``1h30m`` in seconds; Unusable otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise Unusable(f"{text!r}: expected a duration such as 90s, 2m or 1h")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def age(seconds: float) -> str:
    """As kubectl shows ages: 45s, 7m, 3h, 2d."""
    seconds = max(int(seconds), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def connect(settings: Settings, kubeconfig: str | None, context: str | None = None) -> ApiSession:
    try:
        return ApiServer.from_settings(settings, kubeconfig, context).session()
    except NoClusterConfig as error:
        raise Unusable(str(error)) from None


def absence(session: ApiSession, settings: Settings, lease: str | None, now: datetime.datetime) -> str | None:
    """Why the function looks absent (see :meth:`heartbeat.Seen.absent`), or None when its heartbeat is fresh."""
    where = lease if lease is not None else settings.heartbeat_lease
    if not where:
        return "no heartbeat readable (KAI_FN_HEARTBEAT_LEASE is empty)"
    return heartbeat.read(session, where).absent(now)


def strand_notice(absent: str, count: int, scope: str) -> str:
    """What an operator reads when held TrainJobs have no one to release them."""
    return (f"kai_fn looks absent: {visible(absent)}. {count} TrainJob(s) held longer than a resync period "
            f"({heartbeat.RESYNC_PERIOD_SECONDS}s): nothing releases them while it is. Check the function "
            f"(kubectl get ksvc,pingsource,apiserversource -n kai-fn), or release them without a gang: "
            f"python -m kai_fn release --held {scope} --yes --reason '...'")


def rows(readings: list[Reading], now: datetime.datetime, stranded: set[str], wide: bool) -> str:
    header = ["NAMESPACE", "NAME", "STATE", "SINCE", "QUEUE", "GANG", "GPUS", "REASON"] + (["PODGROUP"] if wide else [])
    out = []
    for r in readings:
        reason = ("kai_fn looks absent; " + r.reason) if r.uid in stranded else r.reason
        if not wide and len(reason) > _REASON_WIDTH:
            reason = reason[: _REASON_WIDTH - 3] + "..."
        out.append([r.namespace, r.name, r.phase, age(r.age(now)) if r.since else None, *gang_cells(r.as_dict()), reason]
                   + ([r.gang.podgroup] if wide else []))
    return table(out, header, indent="")


def gang_cells(reading: dict[str, Any]) -> tuple[object, object, object]:
    """QUEUE, GANG and GPUS of a reading (:meth:`Reading.as_dict`), as ``status`` and ``explain`` both show them: the
    gang as made, or as planned before it is (said so)."""
    size = reading.get("minMember")
    if size and reading.get("planned"):
        size = f"{size} (planned)"
    return reading.get("queue"), size, reading.get("gpus")


def failing(readings: list[Reading], fail_on: Sequence[str], now: datetime.datetime, threshold: float) -> list[Reading]:
    """The TrainJobs in a state of ``fail_on`` (``held`` ones only once held longer than ``threshold``)."""
    return [r for r in readings if r.phase in fail_on and (r.phase is not Phase.HELD or r.age(now) > threshold)]


def run(namespace: str | None, kubeconfig: str | None, output: str, held_for: str, lease: str | None,
        settings: Settings, now: datetime.datetime | None = None, context: str | None = None,
        fail_on: Sequence[str] = ()) -> tuple[int, str, str]:
    """(exit code, stdout, stderr); Unusable for exit 2. ``context``: of the kubeconfig (default its current one).
    ``fail_on``: states that make the exit 1 too, for a cron job or CI (``--fail-on blocked``)."""
    threshold = duration(held_for)
    if lease is not None and (lease.count("/") != 1 or not all(lease.split("/"))):
        raise Unusable(f"{lease!r}: expected NAMESPACE/NAME of the heartbeat Lease")
    session = connect(settings, kubeconfig, context)
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        readings = order(survey.survey(session, settings, namespace), now)
        held = [r for r in readings if r.phase is Phase.HELD]
        absent = (absence(session, settings, lease, now)
                  if any(r.held_longer(now, heartbeat.RESYNC_PERIOD_SECONDS) for r in held) else None)
    except Transient as error:
        raise Unreachable(f"cannot read the cluster: {error}") from None
    stranded = {r.uid for r in held if absent is not None and r.held_longer(now, heartbeat.RESYNC_PERIOD_SECONDS)}
    overdue = [r for r in held if r.age(now) > threshold]
    failed = failing(readings, fail_on, now, threshold)
    code = EXIT_HELD if overdue or failed else EXIT_OK
    scope = f"-n {namespace}" if namespace else "-A"
    notes = []
    if failed:
        states = sorted({str(r.phase) for r in failed}, key=lambda p: [str(x) for x in Phase].index(p))
        notes.append(f"{len(failed)} TrainJob(s) {', '.join(states)} (--fail-on): exit 1; "
                     "kubectl kai-fn explain NAMESPACE/NAME says why and what to do")
    if stranded and absent:
        notes.append(strand_notice(absent, len(stranded), scope))
    elif overdue and not any(r.held_longer(now, heartbeat.RESYNC_PERIOD_SECONDS) for r in overdue):
        notes.append(f"{len(overdue)} TrainJob(s) held longer than {age(threshold)}, none yet longer than a resync "
                     f"period ({heartbeat.RESYNC_PERIOD_SECONDS}s): kai_fn's next resync may still release them "
                     "(the heartbeat is read after that); kubectl kai-fn explain NAMESPACE/NAME")
    elif overdue:
        notes.append(f"{len(overdue)} TrainJob(s) held longer than {age(threshold)}, while kai_fn's resync runs: "
                     "read its log for them (outcome retry?), or kubectl kai-fn explain NAMESPACE/NAME")
    if output == "json":
        items = [r.as_dict() | {"stranded": r.uid in stranded} for r in readings]
        return code, json.dumps(items, indent=2), "\n".join(notes)
    if not readings:
        text = "no TrainJob in kai_fn's scope" + (f" in namespace {namespace}" if namespace else "")
    else:
        text = rows(readings, now, stranded, output == "wide")
    return code, "\n".join([text, *("\n" + n for n in notes)]), ""
