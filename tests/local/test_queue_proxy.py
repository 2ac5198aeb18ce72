"""What Serving's revision reconciler hands queue-proxy for knative/base's Service (kai_fn/local/queue_proxy.py); the
real queue-proxy runs with it on the chain (tests/chain/test_queue_proxy.py)."""
from __future__ import annotations

import json

import yaml

from kai_fn.local.process import REPO
from kai_fn.local.queue_proxy import queue_env, readiness_probe, request_lines, service_settings

SERVICE = yaml.safe_load((REPO / "knative" / "base" / "service.yaml").read_text())


def test_settings_come_from_the_service():
    s = service_settings([{"kind": "Namespace"}, SERVICE])
    spec = SERVICE["spec"]["template"]["spec"]
    assert (s.name, s.container_concurrency, s.timeout_seconds) == (
        "kai-fn", spec["containerConcurrency"], spec["timeoutSeconds"])
    assert s.readiness_probe == {"httpGet": {"path": "/healthz"}}


def test_the_readiness_probe_is_the_users_pointed_at_the_user_port():
    assert json.loads(readiness_probe({"httpGet": {"path": "/healthz"}}, 41234)) == {
        "httpGet": {"path": "/healthz", "port": 41234, "host": "127.0.0.1", "scheme": "HTTP"}, "successThreshold": 1}


def test_no_probe_is_a_tcp_check_and_a_period_brings_kubernetes_defaults():
    assert json.loads(readiness_probe(None, 7)) == {"tcpSocket": {"host": "127.0.0.1", "port": 7},
                                                    "successThreshold": 1}
    p = json.loads(readiness_probe({"httpGet": {"path": "/h", "port": 9}, "periodSeconds": 5}, 7))
    assert (p["httpGet"]["port"], p["failureThreshold"], p["timeoutSeconds"]) == (9, 3, 1)


def test_env_is_the_reconcilers_with_free_ports():
    env = queue_env(service_settings([SERVICE]), user_port=1, serving_port=2, admin_port=3, metrics_port=4,
                    request_metrics_port=5, pod="p")
    assert (env["USER_PORT"], env["QUEUE_SERVING_PORT"], env["QUEUE_ADMIN_PORT"], env["QUEUE_METRICS_PORT"]) == (
        "1", "2", "3", "4")
    assert (env["CONTAINER_CONCURRENCY"], env["REVISION_TIMEOUT_SECONDS"]) == ("8", "300")
    obs = json.loads(env["OBSERVABILITY_CONFIG"])
    assert obs["requestMetrics"] == {"protocol": "prometheus", "endpoint": "127.0.0.1:5"} and obs["enableRequestLog"]
    for required in ("SERVING_NAMESPACE", "SERVING_CONFIGURATION", "SERVING_REVISION", "SERVING_POD",
                     "SERVING_POD_IP", "SERVING_LOGGING_CONFIG", "SERVING_LOGGING_LEVEL", "QUEUE_SERVING_TLS_PORT"):
        assert required in env


def test_request_lines_are_read_from_its_log():
    log = ('{"severity":"INFO","message":"Starting queue-proxy"}\n'
           '{"httpRequest": {"requestMethod": "POST", "status": 202, "latency": "0.01s"}, "traceId": ""}\n')
    assert [line["httpRequest"]["status"] for line in request_lines(log)] == [202]
