"""The overlays change only what they are for: the broker overlay the delivery path, scheduler-plugins the flavor."""
from __future__ import annotations

import re
from typing import Any

import pytest

from kai_fn.settings import SOURCE_SENDERS, load
from tests import kustomize
from kai_fn.core import keys
from tests.manifests import (
    BASE, BROKER, FUNCTION, NAMESPACE, SCHEDULER_PLUGINS, bound_triples, container, crd_plurals, env_of,
    ksvc, one, render,
)


# --------------------------------------------------------------------------- broker overlay


def trigger_passes(spec: dict[str, Any], event: dict[str, str]) -> bool:
    """The Trigger's `filters` (exact / any / all / not), as the broker evaluates them."""

    def ev(f: dict[str, Any]) -> bool:
        (dialect, arg), = f.items()
        if dialect == "exact":
            return all(event.get(k) == v for k, v in arg.items())
        if dialect == "any":
            return any(ev(x) for x in arg)
        if dialect == "all":
            return all(ev(x) for x in arg)
        if dialect == "not":
            return not ev(arg)
        raise AssertionError(f"dialect {dialect} not modelled")

    return all(ev(f) for f in spec.get("filters", []))


ADD = "dev.knative.apiserver.resource.add"
UPDATE = "dev.knative.apiserver.resource.update"
DELETE = "dev.knative.apiserver.resource.delete"


@pytest.mark.parametrize(
    "event,delivered",
    [
        ({"type": ADD, "kind": "TrainJob"}, True),
        ({"type": UPDATE, "kind": "TrainJob"}, True),
        ({"type": DELETE, "kind": "TrainJob"}, False),
        ({"type": "dev.knative.apiserver.ref.add", "kind": "TrainJob"}, False),
        ({"type": ADD, "kind": "JobSet"}, False),
        ({"type": ADD}, False),
        ({"type": "dev.knative.sources.ping"}, False),
    ],
    ids=["add", "update", "delete", "reference-mode", "other-kind", "no-kind", "ping"],
)
def test_trigger_delivers_only_trainjob_add_and_update(event, delivered):
    trigger = one(render(BROKER), "Trigger", "kai-fn-trainjobs")
    assert trigger_passes(trigger["spec"], event) is delivered


def test_trigger_legacy_filter_fallback_still_narrows_to_trainjobs():
    trigger = one(render(BROKER), "Trigger", "kai-fn-trainjobs")
    assert trigger["spec"]["filter"] == {"attributes": {"kind": "TrainJob"}}


def _iso_duration_seconds(text: str) -> float:
    m = re.fullmatch(r"PT(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?", text)
    assert m and any(m.groups()), f"not an ISO-8601 duration: {text}"
    return int(m.group(1) or 0) * 60 + float(m.group(2) or 0)


def test_trigger_retries_with_exponential_backoff_into_a_dead_letter_service():
    objs = render(BROKER)
    trigger = one(objs, "Trigger", "kai-fn-trainjobs")
    spec = trigger["spec"]
    one(objs, "Broker", spec["broker"])
    sub = spec["subscriber"]["ref"]
    assert (sub["apiVersion"], sub["kind"], sub["name"]) == ("serving.knative.dev/v1", "Service", FUNCTION)
    delivery = spec["delivery"]
    assert delivery["retry"] >= 3
    assert delivery["backoffPolicy"] == "exponential"
    assert 0 < _iso_duration_seconds(delivery["backoffDelay"]) <= 10
    dls = delivery["deadLetterSink"]["ref"]
    assert dls["kind"] == "Service" and dls["apiVersion"] == "serving.knative.dev/v1"
    assert dls["name"] != FUNCTION
    ksvc(objs, dls["name"])


def _without(objs, *ids):
    return sorted(
        (o for o in objs if kustomize.object_id(o) not in ids), key=lambda o: kustomize.object_id(o)
    )


def test_broker_overlay_changes_only_the_source_sink_and_the_senders_and_adds_its_objects():
    base, broker = render(BASE), render(BROKER)
    added = {
        ("eventing.knative.dev", "Broker", NAMESPACE, "kai-fn"),
        ("eventing.knative.dev", "Trigger", NAMESPACE, "kai-fn-trainjobs"),
        ("serving.knative.dev", "Service", NAMESPACE, "kai-fn-dead-letter"),
    }
    assert {kustomize.object_id(o) for o in broker} - {kustomize.object_id(o) for o in base} == added
    expected = render(BASE)
    one(expected, "ApiServerSource", "kai-fn-trainjobs")["spec"]["sink"] = {
        "ref": {"apiVersion": "eventing.knative.dev/v1", "kind": "Broker", "name": "kai-fn"},
    }  # no audience: the Broker announces its own
    env = {e["name"]: e for e in container(ksvc(expected))["env"]}
    env["KAI_FN_SENDERS"]["value"] = ",".join([  # TrainJob events come from the Trigger
        "system:serviceaccount:kai-fn:kai-fn-trainjobs-oidc-eventing.knative.dev-trigger",
        *(s for s in SOURCE_SENDERS if "trainjobs" not in s)])
    assert _without(broker, *added) == _without(expected)
    assert load(KAI_FN_AUDIENCE="kai-fn", KAI_FN_SENDERS=env["KAI_FN_SENDERS"]["value"]).senders


# --------------------------------------------------------------------------- scheduler-plugins overlay


@pytest.mark.parametrize("variant,flavor", [(BASE, "kai"), (BROKER, "kai"), (SCHEDULER_PLUGINS, "scheduler-plugins")])
def test_podgroup_flavor_env(variant, flavor):
    assert env_of(container(ksvc(render(variant))))["KAI_PODGROUP_FLAVOR"] == flavor


@pytest.mark.parametrize(
    "variant,group",
    [(BASE, "scheduling.run.ai"), (BROKER, "scheduling.run.ai"), (SCHEDULER_PLUGINS, "scheduling.x-k8s.io")],
)
def test_podgroup_api_group_granted_matches_the_flavor(variant, group):
    granted = {g for g, r, _ in bound_triples(render(variant), FUNCTION) if r == "podgroups"}
    assert granted == {group}
    assert (group, "podgroups") in crd_plurals()


def test_scheduler_plugins_overlay_changes_only_flavor_env_podgroup_group_and_drops_kai_only_lists():
    expected = render(BASE)
    for e in container(ksvc(expected))["env"]:
        if e["name"] == "KAI_PODGROUP_FLAVOR":
            e["value"] = "scheduler-plugins"
    role = one(expected, "ClusterRole", "kai-fn-podgroups")
    role["rules"] = role["rules"][:2]  # the KAI-only list of Queues goes
    role["rules"][0]["apiGroups"] = role["rules"][1]["apiGroups"] = ["scheduling.x-k8s.io"]
    one(expected, "ClusterRole", "kai-fn-source")["rules"][2]["apiGroups"] = ["scheduling.x-k8s.io"]
    policy = one(expected, "MutatingAdmissionPolicy", keys.NAMING_POLICY_NAME)
    condition = policy["spec"]["matchConditions"][1]
    condition["expression"] = condition["expression"].replace("'kai-scheduler'", "'scheduler-plugins-scheduler'")
    # Coscheduling's label on the main wave, no placeholders: tests/deploy/test_admission_policy.py says how.
    sp = one(render(SCHEDULER_PLUGINS), "MutatingAdmissionPolicy", keys.NAMING_POLICY_NAME)["spec"]
    policy["spec"]["variables"][5]["expression"] = sp["variables"][5]["expression"]
    policy["spec"]["mutations"] = sp["mutations"]
    one(expected, "ApiServerSource", "kai-fn-podgroups")["spec"]["resources"][0]["apiVersion"] = \
        "scheduling.x-k8s.io/v1alpha1"
    assert _without(render(SCHEDULER_PLUGINS)) == _without(expected)
