"""The path a TrainJob took on the chain, as measured (issue 37, item 4): its JobSet's every version (suspended? held?
named at its create?), each pod as first seen (does it name its PodGroup?), whether a pod was bound before its
PodGroup existed, and who wrote the JobSet. Read by tests/chain/test_shape_paths.py.

Who wrote what, and when, comes from the API server's audit log when the testbed keeps one
(``KAI_FN_TESTBED_AUDIT_LOG`` in the environment that started it: bench/audit.py reads it); without one, kai_fn's
writes of the JobSet are read off its ``managedFields`` (kai_fn writes as field manager ``kai-fn``) and a binding
before the PodGroup off the pod watch (whole seconds).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client

from bench import audit
from kai_fn.core import keys
from kai_fn.function.migration.jobset_hold import HELD_LABEL
from kai_fn.local import k8s
from kai_fn.local.podwatch import PodSeen, PodWatch
from tests.chain.gangs import JOBSET


def audit_log() -> Path | None:
    """The testbed's audit log, when the environment that started it asked for one."""
    named = os.environ.get("KAI_FN_TESTBED_AUDIT_LOG")
    return Path(named) if named and Path(named).is_file() else None


@dataclass
class JobSetSeen:
    first: dict[str, Any]  # as created: the first version the watch saw
    versions: set[str] = field(default_factory=set)
    suspended: bool = False  # spec.suspend true in some version
    held: bool = False  # labelled kai-fn/held in some version


class JobSetWatch:
    """Every version of a namespace's JobSets, from a watch started before any exists (as PodWatch, for pods)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.seen: dict[str, JobSetSeen] = {}
        self.errors = 0
        self.crashed: BaseException | None = None  # a bug, not the API: raised when the watch ends
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=f"jobsetwatch-{namespace}", daemon=True)

    def __enter__(self) -> JobSetWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self.crashed is not None:
            raise self.crashed

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as bug:
            self.crashed = bug

    def _run(self) -> None:
        objs = client.CustomObjectsApi(self.api)
        while not self._stop.is_set():
            try:
                listed = objs.list_namespaced_custom_object(*JOBSET, self.namespace, "jobsets")
                for js in listed["items"]:
                    self._saw(js)
                stream = k8s.Stream(objs.list_namespaced_custom_object, *JOBSET, self.namespace, "jobsets",
                                    resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=5,
                                    _request_timeout=10)
                for event in stream:
                    self._saw(event["object"])
                    if self._stop.is_set():
                        break
            except (client.ApiException, urllib3.exceptions.HTTPError, OSError):  # a watch that expired: list
                # again (a version missed meanwhile is counted as an error); a bug in _saw is raised, not counted
                self.errors += 1
                self._stop.wait(0.5)

    def _saw(self, js: dict[str, Any]) -> None:
        meta = js.get("metadata") or {}
        if "name" not in meta:
            return
        seen = self.seen.setdefault(meta["name"], JobSetSeen(js))
        seen.versions.add(meta.get("resourceVersion", ""))
        seen.suspended |= (js.get("spec") or {}).get("suspend") is True
        seen.held |= (meta.get("labels") or {}).get(HELD_LABEL) == "true"


@dataclass
class Path_:
    """One TrainJob's path. ``named``: the PodGroups admission named on its JobSet's templates at the create;
    ``made``: the PodGroups kai_fn made for it; ``unnamed``: pods whose first version named no PodGroup;
    ``bound_early``: pods bound before their PodGroup existed; ``jobset_writes``: kai_fn's writes of its JobSet;
    ``podgroup_first``: by the API server's clock for the PodGroup and the watch's (on the same machine) for the pod,
    so read to a tenth of a second."""

    trainjob: str
    jobset: bool = False
    suspended: bool = False
    held: bool = False
    named_at_create: bool = False
    templates: int = 0
    named: set[str] = field(default_factory=set)
    segments: bool = False
    pods: int = 0
    unnamed: list[str] = field(default_factory=list)
    bound_pods: int = 0  # pods the watch saw bound
    audited_bindings: int | None = None  # their bindings found in the audit log (None: no audit log)
    bound_early: list[str] = field(default_factory=list)
    podgroup_first: bool | None = None  # its first PodGroup made before its first pod (None: no audit log)
    jobset_writes: int = 0
    made: set[str] = field(default_factory=set)
    placeholders: int = 0
    bound: bool = False
    warnings: list[str] = field(default_factory=list)

    def admission_wrote(self) -> str:
        if not self.named_at_create:
            return "nothing"
        return (f"{len(self.named)} PodGroup name{'s' if len(self.named) != 1 else ''} on {self.templates} "
                f"template{'s' if self.templates != 1 else ''}" + (", segment keys" if self.segments else ""))

    def function_made(self) -> str:
        if not self.made:
            return "nothing" + (f" ({', '.join(sorted(set(self.warnings)))})" if self.warnings else "")
        return (f"{len(self.made)} PodGroup{'s' if len(self.made) != 1 else ''}"
                + (f", {self.placeholders} placeholder{'s' if self.placeholders != 1 else ''}"
                   if self.placeholders else ""))


@dataclass
class Writes:
    """From the audit log: kai_fn's writes of each JobSet, each PodGroup's create and each pod's binding."""

    jobsets: dict[str, int] = field(default_factory=dict)
    podgroups: dict[str, float] = field(default_factory=dict)
    bindings: dict[str, float] = field(default_factory=dict)


def writes_in(log: Path, offset: int, namespace: str) -> Writes:
    out = Writes()
    for w in audit.writes(log, offset, namespace, log.stat().st_size):
        if not 200 <= w.code < 300:
            continue
        if w.component == audit.KAI_FN and w.resource.startswith("jobsets"):
            out.jobsets[w.name] = out.jobsets.get(w.name, 0) + 1
        elif w.resource == "podgroups" and w.verb == "create":
            out.podgroups.setdefault(w.name, w.at)
        elif w.resource == "pods/binding":
            out.bindings.setdefault(w.name, w.at)
    return out


def path_of(api: client.ApiClient, ns: str, trainjob: str, jobsets: JobSetWatch, pods: PodWatch,
            found: Writes | None) -> Path_:
    objs = client.CustomObjectsApi(api)
    uid = objs.get_namespaced_custom_object(keys.TRAINER_GROUP, "v1alpha1", ns, "trainjobs", trainjob)["metadata"]["uid"]
    path = Path_(trainjob)
    if (seen := jobsets.seen.get(trainjob)) is not None:
        templates = [rj["template"]["spec"]["template"].get("metadata") or {}
                     for rj in seen.first["spec"]["replicatedJobs"]]
        path.jobset, path.suspended, path.held = True, seen.suspended, seen.held
        path.named_at_create = (seen.first["metadata"].get("labels") or {}).get(keys.NAMED_LABEL) == "true"
        path.templates = len(templates)
        path.named = {n for t in templates if (n := (t.get("annotations") or {}).get(keys.KAI_POD_GROUP_ANNOTATION))}
        path.segments = any(keys.SEGMENT_SIZE_LABEL in (t.get("labels") or {}) for t in templates)
    mine = [p for p in pods.snapshot() if p.jobset == trainjob or p.labels.get(keys.TRAINJOB_UID_LABEL) == uid]
    path.pods = len(mine)
    path.unnamed = [p.name for p in mine if not p.group]
    path.placeholders = sum(1 for p in mine if keys.PLACEHOLDER_LABEL in p.labels)
    path.bound_pods = sum(1 for p in mine if p.bound_at is not None)
    path.bound_early = _bound_early(mine, pods, found)
    if found is not None:
        path.audited_bindings = sum(1 for p in mine if p.name in found.bindings)
        made_at = [found.podgroups[n] for n in path.named if n in found.podgroups]
        clock = time.time() - time.monotonic()  # PodWatch's times are monotonic
        if made_at and mine:
            path.podgroup_first = min(made_at) < min(p.first_seen for p in mine) + clock
    path.jobset_writes = found.jobsets.get(trainjob, 0) if found else _managed_by_kai_fn(objs, ns, trainjob)
    path.made = {pg["metadata"]["name"] for pg in objs.list_namespaced_custom_object(
        keys.KAI_GROUP, "v2alpha2", ns, "podgroups", label_selector=f"{keys.TRAINJOB_UID_LABEL}={uid}")["items"]}
    path.warnings = [e.reason for e in client.CoreV1Api(api).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={trainjob}").items
        if e.involved_object.kind == "TrainJob" and e.type == "Warning"]
    return path


def _bound_early(mine: list[PodSeen], pods: PodWatch, found: Writes | None) -> list[str]:
    if found is None:
        return [v for v in pods.violations if any(f"pod {p.name} " in v for p in mine)]
    return [p.name for p in mine if p.name in found.bindings
            and found.bindings[p.name] < found.podgroups.get(p.group or "", float("inf"))]


def _managed_by_kai_fn(objs: client.CustomObjectsApi, ns: str, name: str) -> int:
    js = objs.get_namespaced_custom_object(*JOBSET, ns, "jobsets", name)
    return sum(1 for m in js["metadata"].get("managedFields") or [] if m.get("manager") == keys.FIELD_MANAGER)
