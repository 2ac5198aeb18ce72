"""``plan``'s reader (:class:`kai_fn.plan_inputs.Reader`) over the files it is given instead of a cluster: the runtime,
the Topologies (``--topology``), the PriorityClasses that exist (``--priority-class``) and KAI's defaults ConfigMap
(``--kai-defaults``). What is not given is left unchecked, as a read the caller may not make: a Topology's levels, a
named PriorityClass's existence (taken to exist), KAI's defaults (absent)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kai_fn.core.runtime import RuntimeTarget
from kai_fn.plan_inputs import Unread


@dataclass(frozen=True)
class Files:
    runtime_doc: dict[str, Any]
    topologies: dict[str, dict[str, Any]]
    classes: Sequence[dict[str, Any]] | None = None  # None: no --priority-class given
    defaults: dict[str, Any] | None = None  # None: no --kai-defaults given

    def runtime(self, target: RuntimeTarget) -> dict[str, Any] | None:
        return self.runtime_doc  # the file given is the runtime, whatever the TrainJob names

    def topology(self, name: str) -> dict[str, Any] | None:
        if name not in self.topologies:
            raise Unread(f"no --topology file names {name}")
        return self.topologies[name]

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.defaults is None:
            raise Unread("no --kai-defaults file")
        return self.defaults

    def priority_classes(self) -> list[dict[str, Any]]:
        if self.classes is None:
            raise Unread("no --priority-class file")
        return list(self.classes)
