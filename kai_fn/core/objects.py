"""Reading Kubernetes objects as the API server's JSON: metadata, marks, times, suspension, ownership."""
from __future__ import annotations

import datetime
from typing import Any

from kai_fn.core import keys


# Times kai_fn reads from annotations anyone may have written: outside these years a mark is no mark, so that no
# arithmetic on it (a deadline, an age) can overflow.
_YEARS = range(1970, 3000)


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text or not isinstance(text, str) or len(text) > 40:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo and moment.year in _YEARS else None


def meta(obj: dict[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("metadata") or {}


def notes(obj: dict[str, Any] | None) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return meta(obj).get("labels") or {}


def deleting(obj: dict[str, Any] | None) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def suspended(obj: dict[str, Any] | None) -> bool:
    spec = (obj or {}).get("spec")  # an event's body, not yet parsed: any JSON
    return isinstance(spec, dict) and spec.get("suspend") is True


def controlled_by(jobset: dict[str, Any], uid: str | None) -> bool:
    return any(o.get("uid") == uid and o.get("controller") for o in meta(jobset).get("ownerReferences") or [])


def hold_reason(trainjob: dict[str, Any]) -> str | None:
    """Why kai_fn must make no gang yet (or, once made, not let it start): its TrainJob asks to wait."""
    if notes(trainjob).get(keys.HOLD_ANNOTATION) == "true":
        return f"{keys.HOLD_ANNOTATION} is true"
    return None


def queued_by_kueue(trainjob: dict[str, Any]) -> str | None:
    if keys.KUEUE_QUEUE_LABEL in labels(trainjob):
        return f"Kueue admits it ({keys.KUEUE_QUEUE_LABEL})"
    return None


def resumed_at(jobset: dict[str, Any] | None) -> datetime.datetime | None:
    """When JobSet's controller last resumed it (its ``Suspended`` condition turned False), or when kai_fn did."""
    for condition in ((jobset or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Suspended" and condition.get("status") == "False":
            if (moment := parse_time(condition.get("lastTransitionTime"))) is not None:
                return moment
    return parse_time(notes(jobset).get(keys.RELEASED_AT_ANNOTATION))

def stamp(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC to the second, as Kubernetes writes times."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
