"""The resync's heartbeat: proof that the function ran, readable while it is down.

After each successful resync the function sets the gauge ``kai_fn_last_resync_timestamp_seconds`` (for alerts, which
Prometheus can evaluate from the last scrape while the function is gone) and renews a Lease,
``KAI_FN_HEARTBEAT_LEASE`` (``kai-fn/kai-fn-resync``), for ``status`` and ``explain``, which read the cluster with an
operator's kubeconfig and know nothing of Prometheus.

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

from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kai_fn.function import metrics
from kai_fn.function.cluster import MERGE_PATCH, Session, Transient
from kai_fn.function.settings import Settings

log = logging.getLogger("kai_fn")
RESYNC_PERIOD_SECONDS = 60  # the PingSource's schedule, "* * * * *"
LEASE_SECONDS = 3 * RESYNC_PERIOD_SECONDS  # three missed resyncs: the function (or its PingSource) looks absent
_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"


def micro(moment: datetime.datetime) -> str:
    """A metav1.MicroTime, as the API server parses it (RFC 3339 with exactly six fraction digits)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def beat(session: Session, settings: Settings, now: datetime.datetime) -> str:
    """The end of a successful resync: the gauge, then the Lease (one PATCH); what happened, for the log line."""
    metrics.LAST_RESYNC.set(now.timestamp())
    if not settings.heartbeat_lease:
        return "heartbeat: off"
    namespace, _, name = settings.heartbeat_lease.partition("/")
    spec = {"holderIdentity": socket.gethostname(), "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro(now)}
    try:
        session.request("PATCH", _PATH, body={"spec": spec}, content_type=MERGE_PATCH, namespace=namespace, name=name)
    except (ApiException, Transient) as error:
        why = f"API {error.status}" if isinstance(error, ApiException) else str(error)
        log.warning("heartbeat not renewed", extra={"fields": {"lease": settings.heartbeat_lease, "reason": why}})
        return f"heartbeat: Lease {settings.heartbeat_lease} not renewed ({why})"
    return "heartbeat: renewed"


# -- the reading side, for status and explain ------------------------------------------------------------------

class _LeaseSpec(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    holder: str | None = Field(None, alias="holderIdentity")
    seconds: int | None = Field(None, alias="leaseDurationSeconds")
    renewed: datetime.datetime | None = Field(None, alias="renewTime")


class _Lease(BaseModel):
    model_config = ConfigDict(extra="ignore")
    spec: _LeaseSpec = _LeaseSpec()


class Seen(BaseModel):
    """The heartbeat as an operator can read it: when it was renewed, or why it cannot be read."""

    model_config = ConfigDict(frozen=True)
    lease: str
    renewed: datetime.datetime | None = None
    holder: str | None = None
    seconds: int = LEASE_SECONDS
    problem: str | None = None

    def absent(self, now: datetime.datetime) -> str | None:
        """Why the function looks absent, in a few words; None when its heartbeat is fresh."""
        if self.problem:
            return f"no heartbeat readable (Lease {self.lease}: {self.problem})"
        if self.renewed is None:
            return f"no resync recorded (Lease {self.lease} was never renewed)"
        age = (now - self.renewed).total_seconds()
        if age > self.seconds:
            return f"no resync for {int(age // 60)}m (Lease {self.lease} last renewed {micro(self.renewed)[:19]}Z)"
        return None


def read(session: Session, lease: str) -> Seen:
    """One GET of the Lease; what cannot be read is said, never raised."""
    namespace, _, name = lease.partition("/")
    try:
        raw = session.request("GET", _PATH, namespace=namespace, name=name)
        spec = _Lease.model_validate(raw or {}).spec
    except ApiException as error:
        return Seen(lease=lease, problem="not found" if error.status == 404 else f"API {error.status}")
    except Transient as error:
        return Seen(lease=lease, problem=str(error))
    except ValidationError:
        return Seen(lease=lease, problem="not a Lease kai_fn wrote")
    renewed = spec.renewed if spec.renewed is None or spec.renewed.tzinfo else spec.renewed.replace(tzinfo=datetime.UTC)
    return Seen(lease=lease, renewed=renewed, holder=spec.holder, seconds=spec.seconds or LEASE_SECONDS)
