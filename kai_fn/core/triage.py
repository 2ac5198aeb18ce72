"""The pass's constructor of a TrainJob's facts (:mod:`kai_fn.core.state`), and the object helpers it was read with
(:mod:`kai_fn.core.objects`) under their former module name.

Transitional: ``marks`` and ``Marks`` go once reconcile.py builds :class:`kai_fn.core.state.Facts` itself.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kai_fn.core import keys
from kai_fn.core.objects import (  # noqa: F401 -- the helpers, under the name their callers import
    controlled_by, deleting, hold_reason, labels, meta, notes, parse_time, queued_by_kueue, resumed_at, suspended,
)
from kai_fn.core.state import Facts, facts


@dataclass(frozen=True)
class Marks(Facts):
    """The facts, and the one flag reconcile.py still reads until kai_fn/function/migration.py takes it over."""

    legacy_owed: bool = False


def marks(trainjob: dict[str, Any], jobset: dict[str, Any] | None = None,
          podgroup: dict[str, Any] | None = None) -> Marks:
    base = facts(trainjob, jobset, podgroup)
    owed = notes(trainjob).get(keys.AUTO_SUSPENDED_ANNOTATION) == "true" and suspended(trainjob)
    return Marks(**{f.name: getattr(base, f.name) for f in dataclasses.fields(Facts)}, legacy_owed=owed)
