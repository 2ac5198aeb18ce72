"""The heartbeat Lease as the commands read it (kai_fn/kube/lease.py): when it was renewed, or why it cannot be
read; never an exception."""
from __future__ import annotations

import datetime
import re

import pytest

from kai_fn.kube import ApiServer, api_client
from kai_fn.kube.lease import Seen, read
from kai_fn.local.emulator import Fault
from tests.conftest import seed

LEASE = "kai-fn/kai-fn-resync"


NOW = datetime.datetime(2026, 5, 1, 12, 0, tzinfo=datetime.UTC)
SEEN = {
    "renewed a minute ago: present": (Seen(lease="kai-fn/kai-fn-resync", renewed=NOW - datetime.timedelta(
        seconds=60)), None),
    "renewed 4 minutes ago, for 3: absent": (Seen(lease="kai-fn/kai-fn-resync", renewed=NOW - datetime
                                             .timedelta(minutes=4)), r"no resync for 4m \(Lease kai-fn/kai-fn-resync "
                                                                     r"last renewed 2026-05-01T11:56:00Z\)"),
    "never renewed": (Seen(lease="kai-fn/kai-fn-resync"), r"never renewed"),
    "unreadable": (Seen(lease="kai-fn/kai-fn-resync", problem="API 403 Forbidden"),
                   r"no heartbeat readable \(Lease kai-fn/kai-fn-resync: API 403 Forbidden\)"),
}


@pytest.mark.parametrize("seen, absent", SEEN.values(), ids=list(SEEN))
def test_the_function_looks_absent_when_its_lease_is_older_than_its_duration_or_unreadable(seen, absent):
    said = seen.absent(NOW)
    assert (said is None) if absent is None else re.search(absent, said), said


def lease(spec: dict) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "kai-fn-resync", "namespace": "kai-fn"}, "spec": spec}


@pytest.mark.parametrize("spec, fault, seen", [
    (None, None, Seen(lease=LEASE, problem="not found")),
    ({}, Fault(status=403), Seen(lease=LEASE, problem="API 403 Forbidden")),
    ({}, Fault(status=503), Seen(lease=LEASE, problem="API 503 Service Unavailable")),
    ({"leaseDurationSeconds": "soon"}, None, Seen(lease=LEASE, problem="not a Lease kai_fn wrote")),
    ({}, None, Seen(lease=LEASE)),
    ({"holderIdentity": "kai-fn-1", "leaseDurationSeconds": 90, "renewTime": "2026-05-01T11:59:00.000000Z"}, None,
     Seen(lease=LEASE, holder="kai-fn-1", seconds=90, renewed=NOW - datetime.timedelta(minutes=1))),
], ids=["missing", "forbidden", "unavailable", "not-a-lease", "never-renewed", "renewed"])
def test_reading_the_lease_says_what_it_found_and_never_raises(api, spec, fault, seen):
    if spec is not None:
        seed(api, lease(spec))
    api.faults = lambda call: fault
    assert read(ApiServer(api_client(str(api.kubeconfig)), 5.0).session(), LEASE) == seen
