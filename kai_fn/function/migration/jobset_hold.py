"""The migration from 0.2.0's JobSet hold: each JobSet it held is decided and released once, here.

0.2.0's MutatingAdmissionPolicy ``kai-fn-hold-jobsets`` suspended each JobSet of a TrainJob in scope at its CREATE
and labelled it ``kai-fn/held: "true"``; kai_fn released it with its decision. A JobSet still held when this version
starts (or made while both policies run: then named as well) is **owed**: labelled so, suspended, undecided (neither
``kai-fn/podgroup`` nor ``kai-fn/skipped``). Only the JobSet a TrainJob controls is ever looked at, so a tenant's own
JobSet carrying the label is nothing to kai_fn (the marks policy refuses the label at CREATE anyway).

To the core an owed JobSet is what admission did not name (:func:`seen`: a JobSet both policies wrote loses its
``kai-fn/named`` there), so the pass plans and decides it as it decides a suspended JobSet on Kubernetes 1.33: the
gang (PodGroups; placeholders when it starts), then one guarded patch with the pod templates and the decision. Here
(:func:`released`) that patch also lifts the hold: the label removed and, unless its TrainJob asks to wait or is
suspended, ``spec.suspend: false`` with ``kai-fn/released-at``. Out of scope (or its namespace not in
``KAI_FN_NAMESPACES``): let go without a gang, ``kai-fn/skipped: out-of-scope``, resumed unless its TrainJob is
suspended. A refusal leaves it held, with the Warning, as 0.2.0 did. The pass does this for the JobSets it is sent;
the resync (:func:`resync`) for those no other pass is owed: a JobSet outside ``KAI_FN_NAMESPACES``, or one whose
gang was made before the JobSet existed. Nothing else in kai_fn knows of that hold.
"""
from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from kai_fn.core import keys, objects
from kai_fn.core.decide import Action, Context, LetGo, MakeGang
from kai_fn.core.objects import stamp
from kai_fn.core.patch import Op, jobset_patch, pointer
from kai_fn.core.state import Entry
from kai_fn.core.state import Facts as State
from kai_fn.function.cluster import CachedSession
from kai_fn.function.inventory import owed as pass_owed
from kai_fn.settings import Settings

HELD_LABEL = "kai-fn/held"
_DECISION = (keys.MARKER_PODGROUP, keys.MARKER_SKIPPED)


def marked(jobset: dict[str, Any] | None) -> bool:
    """The JobSet carries 0.2.0's label."""
    return objects.labels(jobset).get(HELD_LABEL) == "true"


def owed(jobset: dict[str, Any] | None) -> bool:
    """0.2.0 held it and it is still held: labelled, suspended, undecided."""
    return (jobset is not None and marked(jobset) and objects.suspended(jobset)
            and not any(k in objects.notes(jobset) for k in _DECISION))


def seen(jobset: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JobSet as the core is to decide it: an owed one without ``kai-fn/named`` (the pod templates the naming
    policy wrote are kept, and patched no further where they already carry the plan), any other as it is."""
    if jobset is None or not owed(jobset) or keys.NAMED_LABEL not in objects.labels(jobset):
        return jobset
    view = copy.deepcopy(jobset)
    del view["metadata"]["labels"][keys.NAMED_LABEL]
    return view


def released(action: Action, state: State, context: Context) -> Action:
    """The core's action on an owed JobSet, with the hold lifted (module docstring); any other action as it is."""
    jobset = context.jobset
    if jobset is None or not owed(jobset):
        return action
    if isinstance(action, LetGo):
        ops = jobset_patch(None, jobset, {keys.MARKER_SKIPPED: "out-of-scope"}, lifted(resume=not state.suspended))
        return LetGo(action.why, tuple(ops))
    if not isinstance(action, MakeGang):
        return action  # refused: it stays held, with the Warning
    after = jsonpatch.apply_patch(jobset, list(action.ops))
    decision = {k: v for k, v in objects.notes(after).items() if k in (keys.MARKER_PODGROUP, keys.RESERVES_ANNOTATION)}
    if keys.MARKER_PODGROUP not in decision:
        return action  # told to wait while its TrainJob runs: no decision yet, so the hold stays
    resume = action.waits is None
    if resume:
        decision[keys.RELEASED_AT_ANNOTATION] = stamp(context.now)
    ops = jobset_patch(action.plan, jobset, decision, lifted(resume))
    return MakeGang(action.plan, tuple(ops), action.waits, action.precheck,
                    placeholders=action.plan.placeholders if resume else (), remember=action.remember)


def lifted(resume: bool) -> list[Op]:
    """The ops that lift the hold: its label removed and, with ``resume``, ``spec.suspend: false``."""
    ops: list[Op] = [{"op": "remove", "path": pointer("metadata", "labels", HELD_LABEL)}]
    return ops + ([{"op": "replace", "path": "/spec/suspend", "value": False}] if resume else [])


def due(settings: Settings, entries: list[Entry]) -> list[Entry]:
    """The owed JobSets no other pass of the resync takes (``pass_owed`` false: outside ``KAI_FN_NAMESPACES``, or
    its gang made before the JobSet existed)."""
    return [e for e in entries if owed(e.jobset) and not objects.deleting(e.trainjob) and not pass_owed(e, settings)]


def migrate(session: CachedSession, settings: Settings, entry: Entry) -> str:
    """One listed JobSet 0.2.0 holds: a pass on it (the caller holds its TrainJob)."""
    from kai_fn.function.reconcile import Reconciler  # the pass calls this package: imported when run

    return Reconciler(session, settings, entry.trainjob, entry.jobset).run().result
