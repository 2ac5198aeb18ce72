"""One bad object never stops the others: each TrainJob's work in a pass, the resync, the sweep and the timeout
check runs through :func:`apart`, as a controller keeps one key's error to that key.

An object whose work fails unexpectedly (a bug, or data no check foresaw) is logged with its traceback, counted in
``kai_fn_object_errors_total`` and told on its TrainJob with a ``Unprocessable`` Warning; the caller goes on with
the next object, and the resync, the timeout check and the heartbeat still run. What a retry can fix (``Transient``
and the like) is the caller's to catch first.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from kai_fn.core import objects
from kai_fn.function import metrics, report
from kai_fn.function.cluster import CachedSession
from kai_fn.kube import Transient
from kai_fn.kube.events import event_body

log = logging.getLogger("kai_fn")
T = TypeVar("T")


def apart(stage: str, session: CachedSession, trainjob: dict[str, Any] | None, work: Callable[[], T],
          failed: T, let_through: tuple[type[Exception], ...] = ()) -> T:
    """``work()``, or ``failed`` when it raised anything but ``let_through`` (what a retry may fix)."""
    try:
        return work()
    except let_through:
        raise
    except Exception as error:  # noqa: BLE001 - the point: an object's failure stays that object's
        meta = objects.meta(trainjob)
        why = f"{type(error).__name__}: {error}"[:300]
        metrics.OBJECT_ERRORS.labels(stage).inc()
        log.error("object failed", exc_info=error, extra={"fields": {
            "stage": stage, "namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid"),
            "reason": f"{why}; the other objects go on"}})
        _warn(session, trainjob, stage, error, why)
        return failed


def tally_of(stage: str, session: CachedSession, trainjob: dict[str, Any] | None, work: Callable[[], str],
             retried: tuple[type[Exception], ...] = (Transient,)) -> str:
    """One object's result in a run's tally: ``work()``, ``retry`` when it raised one of ``retried`` (the next run
    tries again), ``error`` when it raised anything else (:func:`apart`)."""
    def attempt() -> str:
        try:
            return work()
        except retried:
            return "retry"

    return apart(stage, session, trainjob, attempt, "error")


def _warn(session: CachedSession, trainjob: dict[str, Any] | None, stage: str, error: Exception, why: str) -> None:
    meta = objects.meta(trainjob)
    if not isinstance(meta.get("name"), str) or not isinstance(meta.get("namespace"), str):
        return
    message = (f"kai_fn could not process this TrainJob ({stage}): {why}. Its JobSet stays as it is; the resync "
               f"tries it again each minute. Check its annotations, labels and runtime, or report a bug.")
    try:
        session.create_event(meta["namespace"], event_body(
            trainjob or {}, report.UNPROCESSABLE, message, warning=True, key=f"{stage}|{type(error).__name__}"))
    except Exception:  # noqa: BLE001 - the Warning is best effort; the log line above says it all
        metrics.EVENTS_NOT_WRITTEN.labels(report.UNPROCESSABLE).inc()
