"""What kai_fn takes as its own: a PodGroup or placeholder pod of the name kai_fn would give it is the gang's only when
it is what kai_fn would have made. Creation is idempotent (a 409 keeps the one there), so without this check anyone
who can create such an object first (a tenant, another controller) would decide the gang's size, queue and marks.

Each check lists what differs, in words, for the Warning; an empty list means the object is kai_fn's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kai_fn.core import keys


@dataclass(frozen=True)
class Foreign:
    """An object of the gang's name that kai_fn did not make (or that differs from the plan): never the gang. The
    pass decides on it (a Warning, no gang), as on any other refusal."""

    kind: str  # PodGroup | pod
    namespace: str
    name: str
    differences: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} is not the one kai_fn plans: " + "; ".join(
            self.differences[:5])


def foreign(live: dict[str, Any], planned: dict[str, Any]) -> Foreign | None:
    """The object of a planned PodGroup's or placeholder's name, as read, judged: None when it is the one kai_fn
    plans (kai_fn's to keep), else what differs."""
    kind = "pod" if planned.get("kind") == "Pod" else "PodGroup"
    found = placeholder_differences(live, planned) if kind == "pod" else podgroup_differences(live, planned)
    meta = _meta(planned)
    return Foreign(kind, meta["namespace"], meta["name"], tuple(found)) if found else None

# Fields KAI's own controllers may set on a PodGroup kai_fn made; neither changes who is in the gang.
_SET_BY_KAI = frozenset({"markUnschedulable", "schedulingBackoff"})
# Marks kai_fn writes on a gang after its JobSet is released: never on one it is about to release.
_LATER_MARKS = (keys.GANG_BOUND_ANNOTATION, keys.TIMED_OUT_ANNOTATION, keys.RESERVATION_ENDED_ANNOTATION)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _owner_differences(live: dict[str, Any], planned: dict[str, Any]) -> list[str]:
    want = _meta(planned)["ownerReferences"][0]["uid"]
    refs = [r for r in _meta(live).get("ownerReferences") or [] if isinstance(r, dict) and r.get("controller")]
    if not any(r.get("uid") == want and r.get("kind") == keys.TRAINJOB_KIND for r in refs):
        return [f"no controller ownerReference to TrainJob uid {want}"]
    return []


def _map_differences(live: dict[str, Any], planned: dict[str, Any], what: str) -> list[str]:
    have = _meta(live).get(what) or {}
    return [f"{what} {key}={have.get(key)!r}, not {value!r}" for key, value in _meta(planned).get(what, {}).items()
            if have.get(key) != value]


def podgroup_differences(live: dict[str, Any], planned: dict[str, Any]) -> list[str]:
    """How the PodGroup in the cluster differs from the one kai_fn plans: owner, kai_fn's labels and annotations,
    every spec field (none added but what KAI sets itself), and no mark of a later stage of the gang."""
    found = _owner_differences(live, planned) + _map_differences(live, planned, "labels")
    found += _map_differences(live, planned, "annotations")
    notes = _meta(live).get("annotations") or {}
    found += [f"annotation {key} is set already" for key in _LATER_MARKS if key in notes]
    have, want = live.get("spec") or {}, planned.get("spec") or {}
    for key in sorted(set(have) | set(want)):
        if key in _SET_BY_KAI and key not in want:
            continue
        if have.get(key) != want.get(key):
            found.append(f"spec.{key} is {have.get(key)!r}, not {want.get(key)!r}")
    return found


# What makes a gang: who is in it, how many must start together, and whose queue it takes. The rest of a made
# PodGroup's spec (priority, topology, ...) is planned from reads (PriorityClasses, KAI's ConfigMap) a later look
# does not repeat.
_GANG_SHAPE = ("minMember", "minSubGroup", "subGroups", "queue")


def gang_edits(live: dict[str, Any], planned: dict[str, Any]) -> list[str]:
    """How the spec of a PodGroup kai_fn made differs now from the plan's, in the fields that make the gang: edited
    by someone the admission policy let through (an operator, a cluster admin) or before it was installed."""
    have, want = live.get("spec") or {}, planned.get("spec") or {}
    return [f"spec.{key} is {have.get(key)!r}, not {want.get(key)!r}" for key in _GANG_SHAPE
            if have.get(key) != want.get(key)]


def placeholder_differences(live: dict[str, Any], planned: dict[str, Any]) -> list[str]:
    """How a pod of a placeholder's name differs from the placeholder kai_fn plans: owner, labels, the PodGroup it
    joins, and what it holds (each container's image and resources)."""
    found = _owner_differences(live, planned) + _map_differences(live, planned, "labels")
    group = keys.KAI_POD_GROUP_ANNOTATION
    if (_meta(live).get("annotations") or {}).get(group) != _meta(planned)["annotations"][group]:
        found.append(f"annotation {group} is not {_meta(planned)['annotations'][group]!r}")

    def held(pod: dict[str, Any]) -> list[tuple[Any, Any]]:
        return [(c.get("image"), c.get("resources")) for c in (pod.get("spec") or {}).get("containers") or []]

    if held(live) != held(planned):
        found.append("its containers hold other resources than the placeholder's")
    return found


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    """Controlled by the TrainJob of ``uid`` (labels alone can be written by anyone who can create the object)."""
    return any(isinstance(r, dict) and r.get("controller") and r.get("uid") == uid
               for r in _meta(obj).get("ownerReferences") or [])
