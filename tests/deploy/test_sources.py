"""The ApiServerSources watch TrainJobs and kai_fn's PodGroups in labelled namespaces; the PingSource sends the
resync directly; whatever delivers to the function names its OIDC audience, and the manifests name the identities
the function will see."""
from __future__ import annotations

import json

import pytest

from kai_fn.core import keys
from kai_fn import settings
from tests.manifests import (
    BASE, BROKER, FUNCTION, KNATIVE, NAMESPACE, SCHEDULER_PLUGINS, SOURCE_SA, VARIANTS, by_kind, crd_plurals, one,
    render,
)


@pytest.mark.parametrize(
    "variant,sink",
    [
        (BASE, ("serving.knative.dev/v1", "Service", FUNCTION)),
        (SCHEDULER_PLUGINS, ("serving.knative.dev/v1", "Service", FUNCTION)),
        (BROKER, ("eventing.knative.dev/v1", "Broker", "kai-fn")),
    ],
)
def test_apiserversource_watches_trainjobs_in_labelled_namespaces(variant, sink):
    objs = render(variant)
    src = one(objs, "ApiServerSource", "kai-fn-trainjobs")
    spec = src["spec"]
    assert spec["mode"] == "Resource"
    assert spec["namespaceSelector"] == {"matchLabels": {"kai-fn.io/enabled": "true"}}
    assert spec["serviceAccountName"] == SOURCE_SA
    assert [(r["apiVersion"], r["kind"]) for r in spec["resources"]] == [("trainer.kubeflow.org/v1alpha1", "TrainJob")]
    ref = spec["sink"]["ref"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == sink
    assert "namespace" not in ref  # defaults to the source's own namespace
    one(objs, sink[1], sink[2], sink[0].rpartition("/")[0])


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_watched_kind_is_a_served_version_of_its_crd(variant):
    watched = [res for src in by_kind(render(variant), "ApiServerSource") for res in src["spec"]["resources"]]
    assert sorted(res["kind"] for res in watched) == ["JobSet", "PodGroup", "TrainJob"]
    for res in watched:
        group, version = res["apiVersion"].split("/")
        assert any(g == group and crd["kind"] == res["kind"] and version in crd["versions"]
                   for (g, _), crd in crd_plurals().items()), res


@pytest.mark.parametrize("variant, podgroup_api", [
    (BASE, "scheduling.run.ai/v2alpha2"), (BROKER, "scheduling.run.ai/v2alpha2"),
    (SCHEDULER_PLUGINS, "scheduling.x-k8s.io/v1alpha1")])
def test_the_podgroup_source_watches_only_kai_fns_podgroups_of_the_flavor_and_sinks_to_the_function(
        variant, podgroup_api):
    spec = one(render(variant), "ApiServerSource", "kai-fn-podgroups")["spec"]
    assert spec["mode"] == "Resource"  # the status is in the object; Reference mode would need a GET
    assert spec["namespaceSelector"] == {"matchLabels": {"kai-fn.io/enabled": "true"}}
    assert spec["serviceAccountName"] == SOURCE_SA
    (res,) = spec["resources"]
    assert (res["apiVersion"], res["kind"]) == (podgroup_api, "PodGroup")
    # The label kai_fn's planner puts on every PodGroup it makes (tests/core/test_plan.py checks the plan has it).
    assert res["selector"] == {"matchLabels": {keys.MANAGED_BY_LABEL: keys.MANAGED_BY}}
    ref = spec["sink"]["ref"]
    # Direct, also in the broker overlay: a lost status update is repaired by the resync's sweep of released gangs.
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == ("serving.knative.dev/v1", "Service", FUNCTION)


def test_optional_queue_label_selector_is_documented_but_off():
    text = (KNATIVE / BASE / "apiserversource.yaml").read_text()
    commented = "\n".join(line.strip().lstrip("#").strip() for line in text.splitlines() if line.strip().startswith("#"))
    assert "key: kai.scheduler/queue" in commented and "operator: Exists" in commented
    src = one(render(BASE), "ApiServerSource", "kai-fn-trainjobs")
    assert "selector" not in src["spec"]["resources"][0]


@pytest.mark.parametrize("variant", VARIANTS)
def test_pingsource_sends_resync_to_the_service_directly(variant):
    (ping,) = by_kind(render(variant), "PingSource")
    spec = ping["spec"]
    assert spec["schedule"] == "* * * * *"  # the schedule timeout fires at most a minute late
    assert spec["contentType"] == "application/json"
    assert json.loads(spec["data"]) == {"resync": True}
    ref = spec["sink"]["ref"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == ("serving.knative.dev/v1", "Service", FUNCTION)


# --------------------------------------------------------------------------- sender identity (OIDC)

AUDIENCE = "kai-fn"
SA_PREFIX = f"system:serviceaccount:{NAMESPACE}:"


def oidc_identity(name: str, group: str, kind: str) -> str:
    """The ServiceAccount Knative makes for a source or Trigger when authentication-oidc is on
    (knative.dev/eventing pkg/auth GetOIDCServiceAccountNameForResource; all of ours stay under 63 characters)."""
    account = f"{name}-oidc-{group}-{kind}".lower()
    assert len(account) <= 63
    return SA_PREFIX + account


@pytest.mark.parametrize(
    "variant,kind,name,sink",
    [
        (BASE, "ApiServerSource", "kai-fn-trainjobs", "sink"),
        (BASE, "ApiServerSource", "kai-fn-podgroups", "sink"),
        (BASE, "PingSource", "kai-fn-resync", "sink"),
        (BROKER, "ApiServerSource", "kai-fn-podgroups", "sink"),
        (BROKER, "PingSource", "kai-fn-resync", "sink"),
        (BROKER, "Trigger", "kai-fn-trainjobs", "subscriber"),
        (SCHEDULER_PLUGINS, "ApiServerSource", "kai-fn-trainjobs", "sink"),
    ],
)
def test_whatever_delivers_to_the_function_names_its_audience(variant, kind, name, sink):
    destination = one(render(variant), kind, name)["spec"][sink]
    assert destination["ref"]["name"] == FUNCTION
    assert destination["audience"] == AUDIENCE


def test_behind_the_broker_the_trainjob_source_takes_the_brokers_own_audience():
    src = one(render(BROKER), "ApiServerSource", "kai-fn-trainjobs")
    assert src["spec"]["sink"]["ref"]["kind"] == "Broker" and "audience" not in src["spec"]["sink"]


@pytest.mark.parametrize(
    "path,identity",
    [
        (BASE + "/service.yaml", oidc_identity("kai-fn-trainjobs", "sources.knative.dev", "ApiServerSource")),
        (BASE + "/service.yaml", oidc_identity("kai-fn-jobsets", "sources.knative.dev", "ApiServerSource")),
        (BASE + "/service.yaml", oidc_identity("kai-fn-podgroups", "sources.knative.dev", "ApiServerSource")),
        (BASE + "/service.yaml", oidc_identity("kai-fn-resync", "sources.knative.dev", "PingSource")),
        (BASE + "/apiserversource-jobsets.yaml",
         oidc_identity("kai-fn-jobsets", "sources.knative.dev", "ApiServerSource")),
        (BASE + "/apiserversource-podgroups.yaml",
         oidc_identity("kai-fn-podgroups", "sources.knative.dev", "ApiServerSource")),
        (BASE + "/apiserversource.yaml", oidc_identity("kai-fn-trainjobs", "sources.knative.dev", "ApiServerSource")),
        (BASE + "/pingsource.yaml", oidc_identity("kai-fn-resync", "sources.knative.dev", "PingSource")),
        (BROKER + "/trigger.yaml", oidc_identity("kai-fn-trainjobs", "eventing.knative.dev", "Trigger")),
    ],
)
def test_manifests_document_the_sender_identities_the_function_sees(path, identity):
    assert identity in (KNATIVE / path).read_text()


def test_documented_senders_are_a_valid_kai_fn_senders_value():
    text = (KNATIVE / BASE / "service.yaml").read_text()
    (line,) = [ln.strip().lstrip("#").strip() for ln in text.splitlines() if ln.strip().startswith(f"#   {SA_PREFIX}")]
    loaded = settings.load(KAI_FN_AUDIENCE=AUDIENCE, KAI_FN_SENDERS=line)
    assert set(loaded.senders) == {
        oidc_identity("kai-fn-trainjobs", "sources.knative.dev", "ApiServerSource"),
        oidc_identity("kai-fn-jobsets", "sources.knative.dev", "ApiServerSource"),
        oidc_identity("kai-fn-podgroups", "sources.knative.dev", "ApiServerSource"),
        oidc_identity("kai-fn-resync", "sources.knative.dev", "PingSource"),
    }
