"""Knative's own source adapters and the stand-ins (kai_fn/local/source.py), side by side on the real API server.
For the ApiServerSource adapter, the same changes (add, update, delete of a TrainJob, of a PodGroup kai_fn labels
and of one it does not, in a labelled namespace and in one that is not) must reach a recording sink as the same
events, down to the bytes of the body and the case of the header names; for mtping, the resync ping. Where they
differed, the real adapter was right and the stand-in was fixed (knative/README.md, "Knative's adapters, measured").
"""
from __future__ import annotations

import base64
import json
import re
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kai_fn.local.adapter import RealApiServerSource, narrowed, source_spec
from kai_fn.local.ping import RealPingSource
from kai_fn.local.source import PODGROUPS, TRAINJOBS, ApiServerSource, PingSource
from tests.manifests import BASE, render
from tests.testbed.adapters import KAI_PG, TRAINER, Objects, install, namespace, podgroup, sources, trainjob
from kai_fn.local.sink import Answer, Request, ScriptedSink

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

AUDIENCE = "kai-fn"
RUN = "kai-fn.test/parity"
# Values that are per emission or per connection; every other header must match value for value.
PER_EMISSION = {"Ce-Id", "Ce-Time", "Host", "Authorization"}
GO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")  # Go's RFC3339Nano, UTC


@dataclass
class Run:
    real: list[Request]
    standin: list[Request]
    on: str
    off: str


def claims(authorization: str | None) -> dict[str, Any]:
    assert authorization and authorization.startswith("Bearer ")
    payload = authorization.split()[1].split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def side_by_side(testbed: LiveCluster, logs: Path, *, mode: str = "Resource",
                 kinds: tuple[str, ...] = ("TrainJob", "PodGroup")) -> Run:
    """Real adapters (knative/base's sources, ``mode`` as given) and stand-ins, each to a sink of its own, while
    each object of ``kinds`` is created, labelled and deleted in a labelled namespace and in one that is not."""
    tag = uuid.uuid4().hex[:5]
    on = namespace(testbed, f"parity-on-{tag}", enabled=True, labels={RUN: tag})
    off = namespace(testbed, f"parity-off-{tag}", enabled=False)
    objects = Objects(testbed)
    pick = {"TrainJob": ("kai-fn-trainjobs", TRAINJOBS, [(TRAINER, trainjob("tj"))]),
            "PodGroup": ("kai-fn-podgroups", PODGROUPS["kai"], [(KAI_PG, podgroup("pg")),
                                                                (KAI_PG, podgroup("other", managed=False))])}
    try:
        with ExitStack() as stack:
            real, standin = (stack.enter_context(ScriptedSink()) for _ in range(2))
            for kind in kinds:
                name, resource, _ = pick[kind]
                # the manifest's source, in ``mode``, blind to other tests' namespaces (their churn would redeploy it)
                spec = narrowed(replace(source_spec(sources()[name]), mode=mode), {RUN: tag})
                adapter = stack.enter_context(RealApiServerSource(testbed.api, spec, real.url, logs / f"{name}.log"))
                token = testbed.sa_token("kai-fn", adapter.spec.oidc_service_account, [AUDIENCE])
                # narrowed as the real one is: another module's namespaces, still being deleted, send nothing
                stack.enter_context(ApiServerSource(testbed.api, resource, standin.url, mode=mode,
                                                    namespace_selector=f"{RUN}={tag}",
                                                    token=lambda t=token: t))  # type: ignore[arg-type]
            for ns in (on, off):
                for kind in kinds:
                    for gvr, body in pick[kind][2]:
                        obj = body["metadata"]["name"]
                        objects.create(gvr, ns, body)
                        objects.label(gvr, ns, obj, changed="yes")
                        objects.delete(gvr, ns, obj)
            for sink in (real, standin):
                sink.wait(lambda got: len(got) >= 3 * len(kinds), 30)
                sink.settle(quiet=1.0, timeout=10)
            return Run(list(real.requests), list(standin.requests), on, off)
    finally:
        for ns in (on, off):
            testbed.kubectl("delete", "namespace", ns, "--wait=false")


@pytest.fixture(scope="module")
def run(testbed: LiveCluster, tmp_path_factory: pytest.TempPathFactory) -> Run:
    install(testbed)
    return side_by_side(testbed, tmp_path_factory.mktemp("adapters"))


@pytest.fixture(scope="module")
def ref_run(testbed: LiveCluster, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The same for TrainJobs in Reference mode (the API's default; knative/base uses Resource)."""
    install(testbed)
    return side_by_side(testbed, tmp_path_factory.mktemp("adapters-ref"), mode="Reference", kinds=("TrainJob",))


def of_kind(requests: list[Request], kind: str) -> list[Request]:
    return [r for r in requests if r.ce.get("kind") == kind]


@pytest.mark.parametrize("side", ["real", "standin"])
def test_only_labelled_namespaces_and_selected_podgroups_are_sent(run: Run, side: str):
    got = getattr(run, side)
    expected = [(f"dev.knative.apiserver.resource.{a}", run.on, n) for n in ("tj", "pg") for a in ("add", "update",
                                                                                                       "delete")]
    assert sorted(r.key for r in got) == sorted(expected)
    for kind in ("TrainJob", "PodGroup"):  # each source in the order of the changes
        assert [r.key[0].rsplit(".", 1)[1] for r in of_kind(got, kind)] == ["add", "update", "delete"]


def pairs(run: Run) -> list[tuple[Request, Request]]:
    """Each real event with the stand-in's for the same change: add, update and delete of each kind."""
    kinds = sorted({r.ce.get("kind") for r in run.real})
    found = [(r, s) for kind in kinds for r, s in zip(of_kind(run.real, kind), of_kind(run.standin, kind),
                                                       strict=True)]
    assert len(found) == 3 * len(kinds) and kinds in (["TrainJob"], ["PodGroup", "TrainJob"]), [r.key for r, _ in found]
    return found


def test_header_names_match_in_their_case(run: Run):
    matched = pairs(run)
    for real, standin in matched:
        assert sorted(k for k, _ in standin.headers) == sorted(k for k, _ in real.headers), real.key


def test_header_values_match_except_per_emission_ones(run: Run):
    matched = pairs(run)
    for real, standin in matched:
        same = {k: v for k, v in real.headers if k not in PER_EMISSION}
        assert {k: v for k, v in standin.headers if k not in PER_EMISSION} == same, real.key


def test_ids_are_uuids_and_times_are_gos_rfc3339nano(run: Run):
    matched = pairs(run)
    for real, standin in matched:
        for r in (real, standin):
            uuid.UUID(r.header("Ce-Id"))
            assert GO_TIME.match(r.header("Ce-Time") or ""), (r.key, r.header("Ce-Time"))


def test_both_are_binary_mode_with_the_same_body_bytes(run: Run):
    matched = pairs(run)
    for real, standin in matched:
        assert real.header("Content-Type") == "application/json"  # binary mode: structured would be cloudevents+json
        assert standin.body == real.body, real.key


def test_tokens_are_for_the_audience_and_name_the_sources_oidc_account(run: Run):
    matched = pairs(run)
    for real, standin in matched:
        a, b = claims(real.header("Authorization")), claims(standin.header("Authorization"))
        assert a["aud"] == b["aud"] == [AUDIENCE]
        assert a["sub"] == b["sub"]
    assert {claims(r.header("Authorization"))["sub"] for r in run.real} == {
        "system:serviceaccount:kai-fn:kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource",
        "system:serviceaccount:kai-fn:kai-fn-podgroups-oidc-sources.knative.dev-apiserversource"}


def test_reference_mode_sends_the_same_object_reference(ref_run: Run):
    assert [r.key for r in ref_run.real] == [(f"dev.knative.apiserver.ref.{a}", ref_run.on, "tj")
                                            for a in ("add", "update", "delete")]
    for real, standin in pairs(ref_run):
        assert standin.body == real.body
        assert {k: v for k, v in standin.headers if k not in PER_EMISSION} == \
            {k: v for k, v in real.headers if k not in PER_EMISSION}
    assert ref_run.real[0].data == {"kind": "TrainJob", "namespace": ref_run.on, "name": "tj",
                                    "apiVersion": "trainer.kubeflow.org/v1alpha1"}


@pytest.fixture(scope="module")
def pings(testbed: LiveCluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Request], list[Request]]:
    """Knative's mtping (kai_fn/local/ping.py) for knative/base's PingSource, every second, and the stand-in."""
    manifest = next(o for o in render(BASE) if o["kind"] == "PingSource")
    with ScriptedSink() as real, ScriptedSink() as standin:
        with RealPingSource(testbed.api, manifest, real.url, tmp_path_factory.mktemp("mtping") / "mtping.log",
                            schedule="@every 1s") as source:
            token = testbed.sa_token("kai-fn", source.sender.rsplit(":", 1)[1], [AUDIENCE])
            with PingSource(standin.url, 1.0, token=lambda: token):
                for sink in (real, standin):
                    sink.wait(lambda got: len(got) >= 2, 20)
        return list(real.requests), list(standin.requests)


def test_the_resync_ping_is_mtpings_to_the_byte(pings: tuple[list[Request], list[Request]]):
    real, standin = pings[0][0], pings[1][0]
    assert standin.body == real.body == b'{"resync": true}'  # spec.data as written, not re-encoded
    assert sorted(k for k, _ in standin.headers) == sorted(k for k, _ in real.headers)
    assert {k: v for k, v in standin.headers if k not in PER_EMISSION} == \
        {k: v for k, v in real.headers if k not in PER_EMISSION}
    assert claims(real.header("Authorization"))["sub"] == claims(standin.header("Authorization"))["sub"] == \
        "system:serviceaccount:kai-fn:kai-fn-resync-oidc-sources.knative.dev-pingsource"


@pytest.mark.parametrize("namespaces, in_flight", [(1, 1), (2, 2)])
def test_the_stand_in_delivers_one_at_a_time_per_namespace_like_the_adapter(testbed: LiveCluster, namespaces,
                                                                            in_flight):
    """tests/testbed/test_adapter_delivery.py pins this for the real adapter."""
    install(testbed)
    tag = uuid.uuid4().hex[:5]
    nss = [namespace(testbed, f"standin-{tag}-{i}", enabled=True) for i in range(namespaces)]
    objects = Objects(testbed)
    try:
        with ScriptedSink(lambda r, n: Answer(200, delay=0.3)) as sink, \
                ApiServerSource(testbed.api, TRAINJOBS, sink.url):
            order = [(nss[i % namespaces], f"tj-{i}") for i in range(4)]
            for ns, name in order:
                objects.create(TRAINER, ns, trainjob(name))
            sink.wait(lambda got: len(got) >= 4, 30)
        assert sink.max_in_flight == in_flight
        for ns in nss:
            assert [r.key[2] for r in sink.requests if r.key[1] == ns] == [n for s, n in order if s == ns]
    finally:
        for ns in nss:
            testbed.kubectl("delete", "namespace", ns, "--wait=false")
