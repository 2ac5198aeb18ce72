"""An in-process Kubernetes API server for the tests, the benchmarks and ``python -m kai_fn demo``.

It is ``kmock.KubernetesEmulator`` serving real HTTP on 127.0.0.1 from its own event loop in a
background thread, so the synchronous official ``kubernetes`` client talks to it as to a cluster.
kmock stores objects and serves discovery; the subclass in ``server`` adds what a real API server (and the
JobSet admission webhook) enforces and kmock does not, so code a cluster would refuse fails here too:
Content-Type/body agreement of PATCH, 409 on stale resourceVersions, server-owned metadata,
status subresources, metadata validation, optional CRD schema validation, JobSet immutability.

Limits, on purpose: no watch, no server-side apply, no CRD defaulting or pruning of unknown
fields, no JobSet defaulting webhook, and the garbage collector runs only when asked.
"""
from __future__ import annotations

from kai_fn.local.emulator.faults import Call, Fault
from kai_fn.local.emulator.harness import Emulator
from kai_fn.local.emulator.kinds import KINDS, KindInfo, Validator

__all__ = ["Call", "Emulator", "Fault", "KINDS", "KindInfo", "Validator"]
