"""The resync's heartbeat: each successful resync sets ``kai_fn_last_resync_timestamp_seconds`` and renews the Lease
``KAI_FN_HEARTBEAT_LEASE``, so an alert and ``status`` can tell the function ran; one that fails leaves both as they
were, and a Lease that cannot be written never fails the resync."""
from __future__ import annotations

import datetime
import time

import pytest

from kai_fn.kube.lease import LEASE_SECONDS
from kai_fn.local.emulator import Fault
from tests.ce import ping, send
from tests.conftest import seed
from tests.function.test_metrics import scrape

LEASE_API = "coordination.k8s.io/v1"
NS, NAME = "kai-fn", "kai-fn-resync"
GAUGE = ("kai_fn_last_resync_timestamp_seconds", frozenset())


def lease(renewed: str | None = None) -> dict:
    """As knative/base ships it: no renewTime until the first resync."""
    spec = {"leaseDurationSeconds": LEASE_SECONDS} | ({"renewTime": renewed} if renewed else {})
    return {"apiVersion": LEASE_API, "kind": "Lease", "metadata": {"name": NAME, "namespace": NS}, "spec": spec}


def renewed(api) -> datetime.datetime:
    text = api.get(LEASE_API, "Lease", NS, NAME)["spec"]["renewTime"]
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC)


def test_a_successful_resync_sets_the_gauge_and_renews_the_lease_with_one_patch(api, function):
    seed(api, lease())
    before = time.time()
    answer = send(function.url, ping())
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "done")
    assert before - 1 <= scrape(function.url)[GAUGE] <= time.time()
    assert [(c.verb, c.resource, c.status) for c in api.writes()] == [("patch", "leases", 200)]
    spec = api.get(LEASE_API, "Lease", NS, NAME)["spec"]
    assert spec["leaseDurationSeconds"] == 180 and spec["holderIdentity"]
    assert abs(renewed(api).timestamp() - scrape(function.url)[GAUGE]) < 1


@pytest.mark.parametrize("listed", ["trainjobs", "jobsets", "podgroups"])
def test_a_resync_that_cannot_list_what_it_joins_leaves_gauge_and_lease_as_they_were(api, function, listed):
    """The resync joins three LISTs (TrainJobs, JobSets, kai_fn's PodGroups): without any of them it did not run."""
    seed(api, lease())
    assert send(function.url, ping()).status == 200
    last, stamp = scrape(function.url)[GAUGE], renewed(api)
    api.reset_calls()
    api.faults = lambda call: Fault(status=500) if call.verb == "list" and call.resource == listed else None
    assert send(function.url, ping()).status == 503
    assert [c for c in api.calls if c.resource == "leases"] == []
    assert (scrape(function.url)[GAUGE], renewed(api)) == (last, stamp)


@pytest.mark.parametrize("fault", [None, Fault(status=403), Fault(status=500)], ids=["missing", "403", "500"])
def test_a_lease_that_cannot_be_renewed_is_logged_and_the_resync_still_succeeds(api, function, fault):
    if fault is not None:
        seed(api, lease())
        api.faults = lambda call: fault if call.resource == "leases" else None
    before = time.time()
    answer = send(function.url, ping())
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "done")
    assert scrape(function.url)[GAUGE] >= before - 1


def test_without_a_heartbeat_lease_the_resync_writes_none_and_still_sets_the_gauge(api, functions):
    fn = functions(KAI_FN_HEARTBEAT_LEASE="")
    before = time.time()
    assert send(fn.url, ping()).status == 200
    assert [c for c in api.calls if c.resource == "leases"] == []
    assert scrape(fn.url)[GAUGE] >= before - 1

