"""The resync's heartbeat: proof that the function ran, readable while it is down.

After each successful resync the function sets the gauge ``kai_fn_last_resync_timestamp_seconds`` (for alerts, which
Prometheus can evaluate from the last scrape while the function is gone) and renews a Lease,
``KAI_FN_HEARTBEAT_LEASE`` (``kai-fn/kai-fn-resync``), for ``status`` and ``explain``, which read it
(:mod:`kai_fn.kube.lease`) with an operator's kubeconfig and know nothing of Prometheus.

Why a Lease: it is the API's own object for "this holder was alive at ``renewTime``; believe it for
``leaseDurationSeconds``" (kubelets and controller managers use it the same way), ``kubectl get lease`` shows its
holder and age, renewing it is one small PATCH a minute, and it is namespaced: the function's grant is a Role in its
own namespace on that one name (``resourceNames``), ``patch`` only, since the manifests ship the Lease. Markers on
TrainJobs would cost a write per TrainJob each minute and say nothing where none exists; a ConfigMap would hold the
same fields without the meaning. A heartbeat that cannot be written is logged and never fails the resync.
"""
from __future__ import annotations

import datetime
import logging
import socket

from kai_fn.function import metrics
from kai_fn.kube import MERGE_PATCH, ApiError, ApiSession
from kai_fn.kube.lease import LEASE_SECONDS, PATH, micro
from kai_fn.settings import Settings

log = logging.getLogger("kai_fn")


def beat(session: ApiSession, settings: Settings, now: datetime.datetime) -> str:
    """The end of a successful resync: the gauge, then the Lease (one PATCH); what happened, for the log line."""
    metrics.LAST_RESYNC.set(now.timestamp())
    if not settings.heartbeat_lease:
        return "heartbeat: off"
    namespace, _, name = settings.heartbeat_lease.partition("/")
    spec = {"holderIdentity": socket.gethostname(), "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro(now)}
    try:
        session.request("PATCH", PATH, body={"spec": spec}, content_type=MERGE_PATCH, namespace=namespace, name=name)
    except ApiError as error:
        why = str(error)
        log.warning("heartbeat not renewed", extra={"fields": {"lease": settings.heartbeat_lease, "reason": why}})
        return f"heartbeat: Lease {settings.heartbeat_lease} not renewed ({why})"
    return "heartbeat: renewed"
