"""knative/base's NetworkPolicy admits only what must reach the function's pods (issue 39, item 2): Knative's data
path to queue-proxy, Knative's autoscaler to queue-proxy's autoscaling metrics, and the monitoring namespace to the
metrics ports. The function's event port is in no rule: only queue-proxy, over localhost, reaches it."""
from __future__ import annotations

import kubernetes_validate
import pytest

from tests.manifests import FUNCTION, K8S_VERSIONS, VARIANTS, container, env_of, ksvc, one, render

QUEUE_PROXY_SERVING = {8012, 8013, 8112}
AUTOSCALER_METRICS = 9090
QUEUE_PROXY_REQUEST_METRICS = 9091


def admitted(variant: str) -> dict[int, set[str]]:
    """Port -> the namespaces (by name) whose pods may reach it."""
    policy = one(render(variant), "NetworkPolicy", FUNCTION)
    out: dict[int, set[str]] = {}
    for rule in policy["spec"]["ingress"]:
        sources = {peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for peer in rule["from"]}
        assert all(set(peer) == {"namespaceSelector"} for peer in rule["from"]), "only whole namespaces, by name"
        for port in rule["ports"]:
            out.setdefault(port["port"], set()).update(sources)
    return out


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_policy_selects_the_functions_pods_and_is_valid(variant):
    policy = one(render(variant), "NetworkPolicy", FUNCTION)
    assert policy["spec"]["podSelector"] == {"matchLabels": {"serving.knative.dev/service": FUNCTION}}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(policy, version, strict=True)


@pytest.mark.parametrize("variant", VARIANTS)
def test_only_knatives_data_path_and_the_scrapers_are_admitted_and_never_to_the_event_port(variant):
    ports = admitted(variant)
    svc = ksvc(render(variant))
    event_port = container(svc)["ports"][0]["containerPort"]
    metrics_port = int(env_of(container(svc))["KAI_FN_METRICS_PORT"])
    assert event_port not in ports
    assert ports == {
        **{p: {"knative-serving", "kourier-system"} for p in QUEUE_PROXY_SERVING},
        AUTOSCALER_METRICS: {"knative-serving"},
        metrics_port: {"monitoring"},
        QUEUE_PROXY_REQUEST_METRICS: {"monitoring"},
    }
    assert int(svc["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]) == metrics_port
