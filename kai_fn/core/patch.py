"""The one RFC 6902 JSON Patch that decides a JobSet admission did not name (a suspended one, on Kubernetes 1.33):
the Plan's pod-template changes and kai_fn's decision (``kai-fn/podgroup`` or ``kai-fn/skipped``), with a caller's
own ops after them under the same guards (the migration's: :mod:`kai_fn.function.migration`).

A merge patch would replace the whole ``replicatedJobs`` list, so this is a JSON Patch: ``test`` ops pin
the JobSet's uid and the resourceVersion that was read, that it is still suspended (the JobSet webhook refuses
template changes otherwise) and the name at every index it touches. Nothing left to do gives an empty patch.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import jsonpatch

from kai_fn.core.plan import Plan

Op = dict[str, Any]


def escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def pointer(*parts: str | int) -> str:
    return "".join(f"/{escape(str(p))}" for p in parts)


def jobset_patch(plan: Plan | None, jobset: dict[str, Any], decision: dict[str, str] | None = None,
                 extra: Sequence[Op] = ()) -> list[Op]:
    """Ops that bring ``jobset`` to the plan (``None``: released without a gang) and, with ``decision``, decide it
    (those annotations set), then ``extra``, the caller's own: one that writes ``/spec/suspend`` is guarded by the
    JobSet still being suspended. ``[]`` when there is nothing to write."""
    adds: list[Op] = []
    touched: list[int] = []
    work = copy.deepcopy(jobset)
    _ensure(work, ("metadata", "annotations"), {**(plan.jobset_annotations if plan else {}), **(decision or {})}, adds)
    jobs = jobset.get("spec", {}).get("replicatedJobs", [])
    index = {rj.get("name"): i for i, rj in enumerate(jobs)}
    for change in plan.pod_templates if plan else ():
        if change.replicated_job not in index:
            raise MissingReplicatedJob(change.replicated_job)
        i = index[change.replicated_job]
        before = len(adds)
        meta = ("spec", "replicatedJobs", i, "template", "spec", "template", "metadata")
        _ensure(work, (*meta, "labels"), change.labels, adds)
        _ensure(work, (*meta, "annotations"), change.annotations, adds)
        if len(adds) > before:
            touched.append(i)
    adds += extra
    resuming = any(op.get("path") == "/spec/suspend" for op in extra)
    if not adds:
        return []
    guards: list[Op] = [{"op": "test", "path": "/metadata/uid", "value": jobset["metadata"]["uid"]}]
    if rv := jobset["metadata"].get("resourceVersion"):
        # 'add' replaces a map created since the read (another writer's keys with it): refuse a stale patch.
        guards.append({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
    if touched or resuming:  # the webhook takes template changes only while suspended; a resume only once
        guards.append({"op": "test", "path": "/spec/suspend", "value": True})
    guards += [{"op": "test", "path": pointer("spec", "replicatedJobs", i, "name"), "value": jobs[i]["name"]}
               for i in touched]
    return guards + adds


class MissingReplicatedJob(LookupError):
    """The live JobSet lacks a replicatedJob that the runtime has: it is not (yet) the JobSet Trainer makes."""


def _ensure(doc: dict[str, Any], path: tuple[str | int, ...], wanted: dict[str, str], ops: list[Op]) -> None:
    """Add ops for the keys of ``wanted`` that ``doc`` lacks at ``path``, creating missing maps whole.

    Each op is applied to ``doc`` (a working copy) at once, so later ops see the maps earlier ones created.
    """
    if not wanted:
        return
    node: Any = doc
    new: list[Op] = []
    for depth, part in enumerate(path):
        child = node.get(part) if isinstance(node, dict) else (node[part] if isinstance(part, int) else None)
        if child is None:
            value: Any = dict(wanted)
            for outer in reversed(path[depth + 1:]):
                value = {outer: value}
            new.append({"op": "add", "path": pointer(*path[: depth + 1]), "value": value})
            break
        node = child
    else:
        new = [{"op": "add", "path": pointer(*path, k), "value": v} for k, v in wanted.items() if node.get(k) != v]
    jsonpatch.apply_patch(doc, new, in_place=True)
    ops.extend(new)
