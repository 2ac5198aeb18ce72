"""The function's heartbeat Lease, as an operator reads it: when the resync last renewed it, or why it cannot tell.

The function renews ``KAI_FN_HEARTBEAT_LEASE`` after each successful resync (:mod:`kai_fn.function.heartbeat`);
``status`` and ``explain`` read it with an operator's kubeconfig to tell a function that is down from one that is
slow.
"""
from __future__ import annotations

import datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kai_fn.kube.errors import ApiError, NotFound, Transient
from kai_fn.kube.session import ApiSession

RESYNC_PERIOD_SECONDS = 60  # the PingSource's schedule, "* * * * *"
LEASE_SECONDS = 3 * RESYNC_PERIOD_SECONDS  # three missed resyncs: the function (or its PingSource) looks absent
PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"


def micro(moment: datetime.datetime) -> str:
    """A metav1.MicroTime, as the API server parses it (RFC 3339 with exactly six fraction digits)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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


def read(session: ApiSession, lease: str) -> Seen:
    """One GET of the Lease; what cannot be read is said, never raised."""
    namespace, _, name = lease.partition("/")
    try:
        raw = session.request("GET", PATH, namespace=namespace, name=name)
        spec = _Lease.model_validate(raw or {}).spec
    except NotFound:
        return Seen(lease=lease, problem="not found")
    except Transient as error:
        return Seen(lease=lease, problem=str(error))
    except ApiError as error:
        return Seen(lease=lease, problem=f"API {error.status}")
    except ValidationError:
        return Seen(lease=lease, problem="not a Lease kai_fn wrote")
    renewed = spec.renewed if spec.renewed is None or spec.renewed.tzinfo else spec.renewed.replace(tzinfo=datetime.UTC)
    return Seen(lease=lease, renewed=renewed, holder=spec.holder, seconds=spec.seconds or LEASE_SECONDS)
