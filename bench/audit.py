"""The API server's audit log (Metadata level, write verbs; testbed/README.md) read for the chain benchmark: who
wrote what in a namespace, and when each TrainJob reached each stage on its way to a bound gang.

Every figure comes from the API server's own timestamps (``stageTimestamp`` of ``ResponseComplete``), so the stages
of both paths are measured by one clock, none of it by the benchmark's client.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

KAI_FN = "kai-fn (its ServiceAccount)"
TRAINER = "trainer (launcher)"
JOBSET = "jobset (launcher)"
PODGROUPER = "kai podgrouper"
_KAI = {"scheduler": "kai scheduler", "binder": "kai binder", "podgroupcontroller": "kai podgroupcontroller",
        "queuecontroller": "kai queuecontroller", "podgrouper": PODGROUPER}
_UID = 37  # "-" and a UUID: PodGroups are named pg-<owner>-<owner's uid>


@dataclass(frozen=True)
class Write:
    at: float  # Unix seconds, the API server's clock
    component: str
    verb: str
    resource: str  # with its subresource: "pods/binding"
    name: str
    code: int


def component(event: dict[str, Any]) -> str:
    """Who wrote: the function by its ServiceAccount, everyone else by userAgent. The launcher runs Trainer and JobSet
    in one process with one client, so its writes are split by what they write: TrainJobs, PodGroups, ConfigMaps and
    JobSet specs are Trainer's; Jobs, Services, JobSet status and the rest JobSet's."""
    user = event["user"]["username"]
    agent = event.get("userAgent", "")
    ref = event.get("objectRef") or {}
    if user.startswith("system:serviceaccount:kai-fn:"):
        return KAI_FN
    if agent.startswith("launcher/"):
        resource, sub = ref.get("resource"), ref.get("subresource")
        if resource in ("trainjobs", "podgroups", "configmaps") or (resource == "jobsets" and sub != "status"):
            return TRAINER
        return JOBSET
    if agent.startswith("kube-controller-manager/"):
        return "kube-controller-manager " + agent.rsplit("/", 1)[-1]
    if agent.startswith(("OpenAPI-Generator", "python")):
        return "bench client (submits)"
    name = agent.split("/", 1)[0]
    return _KAI.get(name, name or user)


def writes(audit: Path, offset: int, namespace: str, end: int | None = None) -> Iterator[Write]:
    """Every write answered in ``namespace`` between two sizes of the log (any status code)."""
    with audit.open() as f:
        f.seek(offset)
        while end is None or f.tell() < end:
            line = f.readline()
            if not line:
                return
            e = json.loads(line)
            ref = e.get("objectRef") or {}
            if e.get("stage") != "ResponseComplete" or ref.get("namespace") != namespace:
                continue
            what = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            at = datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")).timestamp()
            yield Write(at, component(e), e["verb"], what, ref.get("name") or "",
                        (e.get("responseStatus") or {}).get("code", 0))


def by_component(found: list[Write]) -> Counter[tuple[str, str]]:
    """Successful writes by (component, "verb resource")."""
    return Counter((w.component, f"{w.verb} {w.resource}") for w in found if 200 <= w.code < 300)


def owner_of_podgroup(name: str) -> str:
    """The TrainJob a flat PodGroup is for: kai_fn names it ``pg-<TrainJob>-<uid>``, KAI's podgrouper
    ``pg-<JobSet>-<uid>``, and Trainer names the JobSet like its TrainJob."""
    return name[3:-_UID] if name.startswith("pg-") and len(name) > 3 + _UID else name


def owner_of_pod(name: str) -> str:
    """``<JobSet>-<replicatedJob>-<index>-<pod index>-<suffix>``: the runtime's one replicatedJob is ``node``."""
    return name.split("-node-")[0]


STAGES = ("JobSet created", "PodGroup written", "released", "JobSet resumed", "first pod created", "pods created",
          "first pod bound", "last pod bound")


@dataclass
class Marks:
    """When one TrainJob reached each stage (Unix seconds); absent: never, or not on this path."""

    created: float
    at: dict[str, float] = field(default_factory=dict)

    def first(self, stage: str, t: float) -> None:
        self.at[stage] = min(self.at.get(stage, t), t)

    def last(self, stage: str, t: float) -> None:
        self.at[stage] = max(self.at.get(stage, t), t)


def stages(found: list[Write], pods_created: dict[str, float]) -> dict[str, Marks]:
    """Per TrainJob: created, its JobSet created (Trainer's first write of it), its PodGroup written (by kai_fn or KAI's
    podgrouper), released by kai_fn (its patch of the held JobSet, which resumes it too; before the gate moved, its
    first patch of the TrainJob, and the JobSet resumed at Trainer's first write of it after that), its first and last
    pod created (``pods_created``: a pod's name to when a watch first saw it; the audit
    log names no pod on create), its first and last pod bound."""
    marks: dict[str, Marks] = {}
    ok = sorted((w for w in found if 200 <= w.code < 300), key=lambda w: w.at)
    for w in ok:
        if w.resource == "trainjobs" and w.verb == "create":
            marks[w.name] = Marks(w.at)
    for w in ok:
        if w.resource == "jobsets" and w.component == TRAINER and (m := marks.get(w.name)):
            released = m.at.get("released")
            if "JobSet created" not in m.at:
                m.first("JobSet created", w.at)
            elif released is not None and w.at >= released:
                m.first("JobSet resumed", w.at)
        elif w.resource == "podgroups" and w.verb == "create" and (m := marks.get(owner_of_podgroup(w.name))):
            m.first("PodGroup written", w.at)
        elif w.resource == "jobsets" and w.verb == "patch" and w.component == KAI_FN and (m := marks.get(w.name)):
            m.first("released", w.at)
            m.first("JobSet resumed", w.at)
        elif w.resource == "trainjobs" and w.verb == "patch" and w.component == KAI_FN and (m := marks.get(w.name)):
            m.first("released", w.at)
        elif w.resource == "pods/binding" and (m := marks.get(owner_of_pod(w.name))):
            m.first("first pod bound", w.at)
            m.last("last pod bound", w.at)
    for pod, t in pods_created.items():
        if m := marks.get(owner_of_pod(pod)):
            m.first("first pod created", t)
            m.last("pods created", t)
    return marks
