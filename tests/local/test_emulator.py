"""The emulator refuses what a real API server refuses, over real HTTP through the official client."""
from __future__ import annotations

import copy
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest
import urllib3
from kubernetes.client import ApiException, CoreV1Api, CustomObjectsApi

from kai_fn.local.emulator import KINDS, Call, Emulator, Fault
from tests import crds

NS = "team-a"
PG = ("scheduling.run.ai", "v2alpha2", "podgroups")
PG_API = "scheduling.run.ai/v2alpha2"
JS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
JS_API = "jobset.x-k8s.io/v1alpha2"
TJ = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
TJ_API = "trainer.kubeflow.org/v1alpha1"
JSON_PATCH = "application/json-patch+json"


def crd_errors(obj: dict[str, Any]) -> list[str]:
    """Validate kinds that have an upstream CRD; core kinds such as Event pass untouched."""
    return crds.errors(obj) if crds.known(obj) else []


@pytest.fixture
def api() -> Iterator[Emulator]:
    with Emulator(validate=crd_errors) as emulator:
        yield emulator


@pytest.fixture
def co(api: Emulator) -> CustomObjectsApi:
    return CustomObjectsApi(api.client())


def podgroup(name: str = "pg", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": PG_API, "kind": "PodGroup", "metadata": {"name": name, "namespace": NS},
            "spec": {"minMember": 2, "queue": "default-queue", **spec}}


def jobset(suspend: bool) -> dict[str, Any]:
    return {
        "apiVersion": JS_API, "kind": "JobSet", "metadata": {"name": "train", "namespace": NS},
        "spec": {"suspend": suspend, "replicatedJobs": [{
            "name": "node", "replicas": 1,
            "template": {"spec": {"template": {
                "metadata": {"labels": {"app": "train"}},
                "spec": {"containers": [{"name": "node", "image": "trainer:1"}]},
            }}},
        }]},
    }


def refused(code: int, reason: str) -> str:
    """``pytest.raises(ApiException, match=...)`` for an answer of this HTTP status and Status reason."""
    return rf'(?s)^\({code}\)\n.*"reason": ?"{reason}"'


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> tuple[int, str, str]:
    body = json.loads(exc.value.body)
    assert body["kind"] == "Status" and body["code"] == exc.value.status
    return exc.value.status, body["reason"], body["message"]


def raw(api: Emulator, method: str, path: str, body: Any, content_type: str) -> tuple[int, dict[str, Any]]:
    """Send exactly these bytes and this Content-Type, which the official client would rewrite."""
    request = urllib.request.Request(api.url + path, data=json.dumps(body).encode(), method=method,
                                     headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# --- connection and CRUD -------------------------------------------------------------------------

def test_kubeconfig_points_the_official_client_at_the_emulator(api: Emulator) -> None:
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=api.kubeconfig, client_configuration=config)
    assert config.host == api.url
    core = CoreV1Api(kubernetes.client.ApiClient(config))
    created = core.create_namespace({"metadata": {"name": NS}})
    assert core.read_namespace(NS).metadata.uid == created.metadata.uid
    assert created.status.phase == "Active"


def test_create_assigns_server_fields_and_returns_the_stored_object(api: Emulator, co: CustomObjectsApi) -> None:
    body = podgroup()
    body["metadata"].pop("namespace")
    created = co.create_namespaced_custom_object(*PG[:2], NS, PG[2], body)
    meta = created["metadata"]
    assert uuid.UUID(meta["uid"]).version == 4
    assert meta["resourceVersion"].isdigit() and meta["generation"] == 1 and meta["creationTimestamp"].endswith("Z")
    assert meta["namespace"] == NS
    assert created == api.get(PG_API, "PodGroup", NS, "pg") == co.get_namespaced_custom_object(*PG[:2], NS, PG[2], "pg")
    assert api.calls[0].status == 201


@pytest.mark.parametrize(("case", "mutate", "code", "reason"), [
    ("duplicate", lambda o: o, 409, "AlreadyExists"),
    ("namespace differs from URL", lambda o: o["metadata"].update(namespace="other"), 400, "BadRequest"),
    ("no name", lambda o: o["metadata"].pop("name"), 422, "Invalid"),
    ("resourceVersion set", lambda o: o["metadata"].update(resourceVersion="7"), 500, "InternalError"),
    ("label value with slash", lambda o: o["metadata"].update(labels={"kai.scheduler/queue": "a/b"}), 422, "Invalid"),
    ("annotation value not a string", lambda o: o["metadata"].update(annotations={"k": True}), 422, "Invalid"),
    ("ownerReference without uid", lambda o: o["metadata"].update(
        ownerReferences=[{"apiVersion": TJ_API, "kind": "TrainJob", "name": "t"}]), 422, "Invalid"),
    ("uppercase name", lambda o: o["metadata"].update(name="PG"), 422, "Invalid"),
])
def test_create_refusals(api: Emulator, co: CustomObjectsApi, case: str, mutate: Callable[[dict[str, Any]], Any],
                         code: int, reason: str) -> None:
    existing = api.put(podgroup())
    body = podgroup()
    mutate(body)
    with pytest.raises(ApiException, match=refused(code, reason)) as exc:
        co.create_namespaced_custom_object(*PG[:2], NS, PG[2], body)
    assert status_of(exc)[:2] == (code, reason)
    assert api.list(PG_API, "PodGroup") == [existing]


@pytest.mark.parametrize(("api_version", "kind"), sorted(KINDS))
def test_get_of_a_missing_object_is_a_404_status_for_every_kind(api: Emulator, api_version: str, kind: str) -> None:
    info = KINDS[api_version, kind]
    scope = f"/namespaces/{NS}" if info.namespaced else ""
    prefix = f"/apis/{api_version}" if info.group else f"/api/{api_version}"
    request = urllib.request.Request(f"{api.url}{prefix}{scope}/{info.plural}/missing")
    with pytest.raises(urllib.error.HTTPError, match="^HTTP Error 404: Not Found$") as exc:
        urllib.request.urlopen(request, timeout=5)
    body = json.loads(exc.value.read())
    assert (exc.value.code, body["kind"], body["reason"]) == (404, "Status", "NotFound")
    assert '"missing" not found' in body["message"]


def test_unknown_resource_is_404(api: Emulator, co: CustomObjectsApi) -> None:
    with pytest.raises(ApiException, match=refused(404, "NotFound")) as exc:
        co.list_namespaced_custom_object("example.com", "v1", NS, "widgets")
    assert status_of(exc)[:2] == (404, "NotFound")


def test_list_honours_namespace_and_label_selector(api: Emulator, co: CustomObjectsApi) -> None:
    for name, namespace, labels in [("a", NS, {"team": "x", "tier": "gpu"}), ("b", NS, {"team": "y"}),
                                    ("c", "other", {"team": "x"})]:
        obj = podgroup(name)
        obj["metadata"].update(namespace=namespace, labels=labels)
        api.put(obj)

    def names(selector: str = "", namespace: str | None = NS) -> list[str]:
        if namespace is None:
            listing = co.list_cluster_custom_object(*PG, label_selector=selector)
        else:
            listing = co.list_namespaced_custom_object(*PG[:2], namespace, PG[2], label_selector=selector)
        assert listing["kind"] == "PodGroupList" and listing["apiVersion"] == PG_API
        assert listing["metadata"]["resourceVersion"].isdigit()
        return [item["metadata"]["name"] for item in listing["items"]]

    assert names() == ["a", "b"]
    assert sorted(names(namespace=None)) == ["a", "b", "c"]
    assert names("team=x") == ["a"]
    assert names("team=x,tier") == ["a"]
    assert names("!tier") == ["b"]
    assert names("team!=x", namespace=None) == ["b"]
    assert names("team in (x,y),tier notin (cpu)") == ["a", "b"]


@pytest.mark.parametrize("limit, selector, pages", [
    (2, "", [["a", "b"], ["c", "d"], ["e"]]),
    (5, "", [["a", "b", "c", "d", "e"]]),
    (0, "", [["a", "b", "c", "d", "e"]]),
    (1, "team=x", [["a"], ["c"], ["e"]]),
], ids=["pages-of-two", "one-page-exactly", "no-limit", "pages-of-a-selection"])
def test_list_serves_limit_and_continue_as_the_api_server_does(api: Emulator, co: CustomObjectsApi, limit: int,
                                                               selector: str, pages: list[list[str]]) -> None:
    """Each page holds at most ``limit`` objects and a continue token while more remain; following the tokens
    lists each object once, in key order, at the first page's resourceVersion. The count of those left is said
    only for a list no selector narrows (as the real server)."""
    for name in "ebdca":
        obj = podgroup(name)
        obj["metadata"]["labels"] = {"team": "x" if name in "ace" else "y"}
        api.put(obj)
    served, token, remaining, versions = [], None, [], set()
    while True:
        listing = co.list_namespaced_custom_object(*PG[:2], NS, PG[2], label_selector=selector, limit=limit,
                                                   **({"_continue": token} if token else {}))
        served.append([item["metadata"]["name"] for item in listing["items"]])
        versions.add(listing["metadata"]["resourceVersion"])
        remaining.append(listing["metadata"].get("remainingItemCount"))
        token = listing["metadata"].get("continue")
        if not token:
            break
    left = [sum(len(p) for p in pages[i + 1:]) or None for i in range(len(pages))]
    assert (served, len(versions), remaining) == (pages, 1, [None] * len(pages) if selector else left)


def test_a_list_continued_with_a_token_it_did_not_make_is_400(api: Emulator, co: CustomObjectsApi) -> None:
    with pytest.raises(ApiException, match=refused(400, "BadRequest")) as exc:
        co.list_namespaced_custom_object(*PG[:2], NS, PG[2], limit=1, _continue="bm90IGEgdG9rZW4")
    assert status_of(exc)[2] == "invalid continue token: continue key is not valid"


def test_delete_with_finalizers_waits_for_their_removal(api: Emulator, co: CustomObjectsApi) -> None:
    obj = podgroup()
    obj["metadata"]["finalizers"] = ["kai-fn/cleanup"]
    api.put(obj)
    co.delete_namespaced_custom_object(*PG[:2], NS, PG[2], "pg")
    pending = api.get(PG_API, "PodGroup", NS, "pg")
    assert pending is not None and pending["metadata"]["deletionTimestamp"]
    co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", {"metadata": {"finalizers": None}})
    assert api.get(PG_API, "PodGroup", NS, "pg") is None
    with pytest.raises(ApiException, match=refused(404, "NotFound")) as exc:
        co.delete_namespaced_custom_object(*PG[:2], NS, PG[2], "pg")
    assert status_of(exc)[:2] == (404, "NotFound")


def test_put_update_needs_the_current_resource_version(api: Emulator, co: CustomObjectsApi) -> None:
    stored = api.put(podgroup())
    replacement = copy.deepcopy(stored)
    replacement["spec"]["minMember"] = 5
    del replacement["metadata"]["resourceVersion"]
    with pytest.raises(ApiException, match=refused(422, "Invalid")) as exc:
        co.replace_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", replacement)
    assert status_of(exc)[:2] == (422, "Invalid")
    replacement["metadata"]["resourceVersion"] = "0"
    with pytest.raises(ApiException, match=refused(409, "Conflict")) as exc:
        co.replace_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", replacement)
    assert status_of(exc)[:2] == (409, "Conflict")
    replacement["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    updated = co.replace_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", replacement)
    assert updated["spec"]["minMember"] == 5 and updated["metadata"]["generation"] == 2


def test_event_must_live_in_the_namespace_of_its_object(api: Emulator) -> None:
    core = CoreV1Api(api.client())
    event = {"metadata": {"generateName": "pg."}, "reason": "Created", "message": "m", "type": "Normal",
             "involvedObject": {"apiVersion": PG_API, "kind": "PodGroup", "name": "pg", "namespace": "other"}}
    with pytest.raises(ApiException, match=refused(422, "Invalid")) as exc:
        core.create_namespaced_event(NS, event)
    assert status_of(exc)[:2] == (422, "Invalid")
    event["involvedObject"]["namespace"] = NS
    created = core.create_namespaced_event(NS, event)
    assert created.metadata.name.startswith("pg.") and len(api.list("v1", "Event", NS)) == 1


def test_dry_run_answers_without_storing(api: Emulator, co: CustomObjectsApi) -> None:
    answer = co.create_namespaced_custom_object(*PG[:2], NS, PG[2], podgroup(), dry_run="All")
    assert answer["metadata"]["uid"] and api.get(PG_API, "PodGroup", NS, "pg") is None


def test_require_namespaces_and_namespace_deletion_takes_its_objects() -> None:
    with Emulator(require_namespaces=True) as api:
        co, core = CustomObjectsApi(api.client()), CoreV1Api(api.client())
        with pytest.raises(ApiException, match=refused(404, "NotFound")) as exc:
            co.create_namespaced_custom_object(*PG[:2], NS, PG[2], podgroup())
        assert status_of(exc)[:2] == (404, "NotFound") and 'namespaces "team-a" not found' in status_of(exc)[2]
        core.create_namespace({"metadata": {"name": NS}})
        co.create_namespaced_custom_object(*PG[:2], NS, PG[2], podgroup())
        core.delete_namespace(NS)
        assert api.list(PG_API, "PodGroup") == []


def test_stop_does_not_wait_for_hung_requests_and_emulators_stop_in_any_order() -> None:
    first, second = Emulator().start(), Emulator().start()
    first.faults = lambda call: Fault(hang=120)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError, match="Read timed out"):
        CustomObjectsApi(first.client()).create_namespaced_custom_object(
            *PG[:2], NS, PG[2], podgroup(), _request_timeout=0.1)
    started = time.monotonic()
    first.stop()
    assert time.monotonic() - started < 30, "stop waited for the hung request"
    assert CustomObjectsApi(second.client()).create_namespaced_custom_object(*PG[:2], NS, PG[2], podgroup())
    second.stop()


# --- PATCH ---------------------------------------------------------------------------------------

LABEL_OP = [{"op": "add", "path": "/metadata/labels", "value": {"kai.scheduler/queue": "q"}}]


@pytest.mark.parametrize(("case", "body", "content_type", "code"), [
    ("JSON Patch declared as merge patch", LABEL_OP, "application/merge-patch+json", 422),
    ("object declared as JSON Patch", {"metadata": {"labels": {"a": "b"}}}, JSON_PATCH, 400),
    ("strategic merge on a custom resource", {"metadata": {"labels": {"a": "b"}}},
     "application/strategic-merge-patch+json", 415),
    ("plain JSON", {"metadata": {"labels": {"a": "b"}}}, "application/json", 415),
    ("server-side apply (not emulated)", {"metadata": {"labels": {"a": "b"}}}, "application/apply-patch+yaml", 415),
    ("failed test op", [{"op": "test", "path": "/spec/minMember", "value": 9}] + LABEL_OP, JSON_PATCH, 422),
    ("test op true against 1", [{"op": "test", "path": "/spec/minMember", "value": True}] + LABEL_OP, JSON_PATCH, 422),
    ("replace of a missing path", [{"op": "replace", "path": "/spec/nope/x", "value": 1}], JSON_PATCH, 422),
    ("stale resourceVersion in a merge patch", {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}},
     "application/merge-patch+json", 409),
    ("uid change", {"metadata": {"uid": "0f0f0f0f-0000-4000-8000-000000000000"}}, "application/merge-patch+json", 422),
    ("name change", {"metadata": {"name": "other"}}, "application/merge-patch+json", 400),
])
def test_patch_refusals_change_nothing(api: Emulator, case: str, body: Any, content_type: str, code: int) -> None:
    api.put(podgroup("first"))
    stored = api.put(podgroup(minMember=1))
    status, answer = raw(api, "PATCH", f"/apis/{PG_API}/namespaces/{NS}/podgroups/pg", body, content_type)
    assert (status, answer["kind"], answer["code"]) == (code, "Status", code)
    assert api.get(PG_API, "PodGroup", NS, "pg") == stored
    assert api.calls[-1].status == code and api.calls[-1].content_type == content_type


def test_client_sends_a_list_as_merge_patch_unless_told_and_it_is_refused(api: Emulator, co: CustomObjectsApi) -> None:
    """A real API server answers 422 "couldn't get version/kind; json parse error: cannot unmarshal array"."""
    stored = api.put(podgroup())
    with pytest.raises(ApiException, match=refused(422, "Invalid")) as exc:
        co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", LABEL_OP)
    code, reason, _ = status_of(exc)
    assert (code, reason) == (422, "Invalid")
    assert api.calls[-1].content_type == "application/merge-patch+json"
    assert api.get(PG_API, "PodGroup", NS, "pg") == stored


def test_client_rewrites_an_object_declared_as_json_patch_to_strategic_merge(api: Emulator,
                                                                            co: CustomObjectsApi) -> None:
    stored = api.put(podgroup())
    with pytest.raises(ApiException, match=refused(415, "UnsupportedMediaType")) as exc:
        co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", {"spec": {"minMember": 3}},
                                          _content_type=JSON_PATCH)
    assert status_of(exc)[:2] == (415, "UnsupportedMediaType")
    assert api.calls[-1].content_type == "application/strategic-merge-patch+json"
    assert api.get(PG_API, "PodGroup", NS, "pg") == stored


def test_json_patch_with_content_type_is_applied(api: Emulator, co: CustomObjectsApi) -> None:
    stored = api.put(podgroup())
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": stored["metadata"]["resourceVersion"]},
           {"op": "replace", "path": "/spec/minMember", "value": 4},
           {"op": "add", "path": "/metadata/labels", "value": {"kai.scheduler/queue": "q"}}]
    patched = co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", ops, _content_type=JSON_PATCH)
    assert patched["spec"]["minMember"] == 4 and patched["metadata"]["labels"] == {"kai.scheduler/queue": "q"}
    assert int(patched["metadata"]["resourceVersion"]) > int(stored["metadata"]["resourceVersion"])
    assert patched["metadata"]["generation"] == 2
    assert api.calls[-1].content_type == JSON_PATCH and api.calls[-1].body == ops


def test_core_kinds_take_strategic_merge_patch(api: Emulator) -> None:
    core = CoreV1Api(api.client())
    core.create_namespace({"metadata": {"name": NS}})
    patched = core.patch_namespace(NS, {"metadata": {"labels": {"team": "a"}}})
    assert patched.metadata.labels == {"team": "a"}
    assert api.calls[-1].content_type == "application/strategic-merge-patch+json"


def test_merge_patch_null_deletes_and_labels_do_not_bump_generation(api: Emulator, co: CustomObjectsApi) -> None:
    obj = podgroup()
    obj["metadata"]["labels"] = {"a": "1", "b": "2"}
    api.put(obj)
    patched = co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", {"metadata": {"labels": {"a": None}}})
    assert patched["metadata"]["labels"] == {"b": "2"} and patched["metadata"]["generation"] == 1


def test_json_patch_replacing_resource_version_with_a_stale_one_conflicts(api: Emulator, co: CustomObjectsApi) -> None:
    api.put(podgroup("first"))
    stored = api.put(podgroup())
    ops = [{"op": "replace", "path": "/metadata/resourceVersion", "value": "1"},
           {"op": "replace", "path": "/spec/minMember", "value": 4}]
    with pytest.raises(ApiException, match=refused(409, "Conflict")) as exc:
        co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", ops, _content_type=JSON_PATCH)
    assert status_of(exc)[:2] == (409, "Conflict")
    assert api.get(PG_API, "PodGroup", NS, "pg") == stored


def test_no_op_patch_keeps_resource_version(api: Emulator, co: CustomObjectsApi) -> None:
    stored = api.put(podgroup())
    patched = co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", {"spec": {"minMember": 2}})
    assert patched == stored


def test_status_is_a_subresource(api: Emulator, co: CustomObjectsApi) -> None:
    api.put({"apiVersion": TJ_API, "kind": "TrainJob", "metadata": {"name": "t", "namespace": NS},
             "spec": {"runtimeRef": {"name": "torch"}}, "status": {"conditions": []}})
    jobs = [{"name": "node", "active": 1, "failed": 0, "ready": 1, "succeeded": 0, "suspended": 0}]
    main = co.patch_namespaced_custom_object(*TJ[:2], NS, TJ[2], "t", {"status": {"jobsStatus": jobs}})
    assert main["status"] == {"conditions": []}
    sub = co.patch_namespaced_custom_object_status(*TJ[:2], NS, TJ[2], "t",
                                                   {"status": {"jobsStatus": jobs}, "spec": {"suspend": True}})
    assert sub["status"]["jobsStatus"] == jobs and "suspend" not in sub["spec"]
    assert sub["metadata"]["generation"] == 1


# --- the JobSet webhook --------------------------------------------------------------------------

POD = "/spec/replicatedJobs/0/template/spec/template"
POD_LABEL = {"op": "add", "path": f"{POD}/metadata/labels/kai.scheduler~1queue", "value": "q"}


@pytest.mark.parametrize(("case", "suspended", "ops", "allowed"), [
    ("pod label while suspended", True, [POD_LABEL], True),
    ("pod annotation, nodeSelector, tolerations, schedulingGates while suspended", True, [
        {"op": "add", "path": f"{POD}/metadata/annotations", "value": {"pod-group-name": "train"}},
        {"op": "add", "path": f"{POD}/spec/nodeSelector", "value": {"pool": "gpu"}},
        {"op": "add", "path": f"{POD}/spec/tolerations", "value": [{"key": "gpu", "operator": "Exists"}]},
        {"op": "add", "path": f"{POD}/spec/schedulingGates", "value": [{"name": "kai-fn"}]},
    ], True),
    ("pod label while running", False, [POD_LABEL], False),
    ("pod label together with suspending", False, [{"op": "replace", "path": "/spec/suspend", "value": True},
                                                   POD_LABEL], True),
    ("container image while suspended", True, [
        {"op": "replace", "path": f"{POD}/spec/containers/0/image", "value": "trainer:2"}], False),
    ("schedulerName while suspended", True, [
        {"op": "add", "path": f"{POD}/spec/schedulerName", "value": "kai-scheduler"}], False),
    ("replicatedJob added while suspended", True, [
        {"op": "add", "path": "/spec/replicatedJobs/-", "value": {"name": "extra", "template": {}}}], False),
    ("replicatedJob removed while suspended", True, [{"op": "remove", "path": "/spec/replicatedJobs/0"}], False),
    ("JobSet labels while running", False, [
        {"op": "add", "path": "/metadata/labels", "value": {"kai-fn/podgroup": "train"}}], True),
    ("resume", True, [{"op": "replace", "path": "/spec/suspend", "value": False}], True),
])
def test_jobset_webhook(api: Emulator, co: CustomObjectsApi, case: str, suspended: bool,
                        ops: list[dict[str, Any]], allowed: bool) -> None:
    """JobSet's validator returns a field error, which controller-runtime relays whole: the API server answers 422
    Invalid, as it does on a real testbed (tests/testbed/test_gang_naming.py)."""
    stored = api.put(jobset(suspended))
    if allowed:
        patched = co.patch_namespaced_custom_object(*JS[:2], NS, JS[2], "train", ops, _content_type=JSON_PATCH)
        assert patched["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]
        return
    with pytest.raises(ApiException, match=refused(422, "Invalid")) as exc:
        co.patch_namespaced_custom_object(*JS[:2], NS, JS[2], "train", ops, _content_type=JSON_PATCH)
    code, reason, message = status_of(exc)
    assert (code, reason) == (422, "Invalid") and message.startswith('admission webhook "vjobset.kb.io" denied')
    assert "spec.replicatedJobs" in message and "field is immutable" in message
    assert api.get(JS_API, "JobSet", NS, "train") == stored


def test_jobset_merge_patch_replaces_the_whole_list_and_is_refused(api: Emulator, co: CustomObjectsApi) -> None:
    stored = api.put(jobset(True))
    with pytest.raises(ApiException, match=refused(422, "Invalid")) as exc:
        co.patch_namespaced_custom_object(*JS[:2], NS, JS[2], "train", {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"metadata": {"labels": {"q": "x"}}}}}}]}})
    assert status_of(exc)[0] == 422
    assert api.get(JS_API, "JobSet", NS, "train") == stored


# --- schema validation ---------------------------------------------------------------------------

def test_validate_hook_refuses_crd_invalid_objects(api: Emulator, co: CustomObjectsApi) -> None:
    with pytest.raises(ApiException, match=refused(422, "Invalid")) as exc:
        co.create_namespaced_custom_object(*PG[:2], NS, PG[2], podgroup(minMember="x"))
    code, reason, message = status_of(exc)
    assert (code, reason) == (422, "Invalid") and "spec.minMember" in message
    assert api.get(PG_API, "PodGroup", NS, "pg") is None

    stored = co.create_namespaced_custom_object(*PG[:2], NS, PG[2], podgroup())
    with pytest.raises(ApiException, match=refused(422, "Invalid")) as exc:
        co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", {"spec": {"minMember": "x"}})
    assert status_of(exc)[:2] == (422, "Invalid")
    assert api.get(PG_API, "PodGroup", NS, "pg") == stored


def test_validation_ratchets_problems_the_stored_object_already_had(api: Emulator, co: CustomObjectsApi) -> None:
    api.put(podgroup(minMember="x"))
    patched = co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", {"metadata": {"labels": {"a": "b"}}})
    assert patched["metadata"]["labels"] == {"a": "b"}


def test_put_bypasses_validation_and_events_are_not_schema_checked(api: Emulator) -> None:
    assert api.put(podgroup(minMember="x"))["spec"]["minMember"] == "x"
    event = CoreV1Api(api.client()).create_namespaced_event(NS, {
        "metadata": {"name": "e1"}, "involvedObject": {"kind": "PodGroup", "name": "pg", "namespace": NS}})
    assert event.metadata.uid


# --- faults --------------------------------------------------------------------------------------

def only(verb: str, fault: Fault) -> Callable[[Call], Fault | None]:
    return lambda call: fault if call.verb == verb else None


def test_status_fault_answers_a_status_body_and_changes_nothing(api: Emulator, co: CustomObjectsApi) -> None:
    api.faults = only("create", Fault(status=503))
    with pytest.raises(ApiException, match=refused(503, "ServiceUnavailable")) as exc:
        co.create_namespaced_custom_object(*PG[:2], NS, PG[2], podgroup())
    assert status_of(exc)[:2] == (503, "ServiceUnavailable")
    assert api.get(PG_API, "PodGroup", NS, "pg") is None
    assert api.calls[-1].fault == Fault(status=503) and api.calls[-1].status == 503


def test_hang_times_the_client_out_and_changes_nothing(api: Emulator, co: CustomObjectsApi) -> None:
    stored = api.put(podgroup())
    api.faults = only("patch", Fault(status=503, hang=1.0))
    with pytest.raises(urllib3.exceptions.ReadTimeoutError, match="Read timed out"):
        co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", {"spec": {"minMember": 3}}, _request_timeout=0.2)
    assert api.get(PG_API, "PodGroup", NS, "pg") == stored
    assert len(api.writes()) == 1


def test_hang_without_status_lands_the_write_after_the_client_gave_up(api: Emulator, co: CustomObjectsApi) -> None:
    api.put(podgroup())
    api.faults = only("patch", Fault(hang=0.4))
    with pytest.raises(urllib3.exceptions.ReadTimeoutError, match="Read timed out"):
        co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", {"spec": {"minMember": 3}}, _request_timeout=0.1)
    # Under load the client may give up before the emulator has even recorded the call: wait for the patch's answer.
    deadline = time.monotonic() + 30

    def answered() -> list[int | None]:
        return [c.status for c in api.calls if c.verb == "patch" and c.status is not None]

    while not answered() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert answered() == [200]
    assert api.get(PG_API, "PodGroup", NS, "pg")["spec"]["minMember"] == 3


def test_after_fault_applies_the_write_but_loses_the_response(api: Emulator, co: CustomObjectsApi) -> None:
    api.faults = only("create", Fault(status=500, after=True))
    with pytest.raises(ApiException, match=refused(500, "InternalError")) as exc:
        co.create_namespaced_custom_object(*PG[:2], NS, PG[2], podgroup())
    assert status_of(exc)[:2] == (500, "InternalError")
    assert api.get(PG_API, "PodGroup", NS, "pg") is not None


def test_retry_after_header_and_details(api: Emulator, co: CustomObjectsApi) -> None:
    api.put(podgroup())
    api.faults = only("patch", Fault(status=429, retry_after=2))
    with pytest.raises(ApiException, match=refused(429, "TooManyRequests")) as exc:
        co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", {"spec": {"minMember": 3}})
    assert status_of(exc)[:2] == (429, "TooManyRequests")
    assert exc.value.headers["Retry-After"] == "2"
    assert json.loads(exc.value.body)["details"] == {"retryAfterSeconds": 2}


def test_client_retries_get_after_retry_after_by_itself(api: Emulator, co: CustomObjectsApi) -> None:
    """urllib3's default Retry repeats idempotent requests answered 503+Retry-After: fault tests must count calls."""
    stored = api.put(podgroup())
    remaining = [2]

    def flaky(call: Call) -> Fault | None:
        if call.verb == "get" and remaining[0]:
            remaining[0] -= 1
            return Fault(status=503, retry_after=0)
        return None

    api.faults = flaky
    assert co.get_namespaced_custom_object(*PG[:2], NS, PG[2], "pg") == stored
    assert [c.status for c in api.calls] == [503, 503, 200]


# --- the call log and concurrency ----------------------------------------------------------------

def test_calls_record_what_was_asked_and_answered(api: Emulator, co: CustomObjectsApi) -> None:
    co.create_namespaced_custom_object(*PG[:2], NS, PG[2], podgroup())
    co.get_namespaced_custom_object(*PG[:2], NS, PG[2], "pg")
    co.list_cluster_custom_object("scheduling.run.ai", "v2", "queues")
    co.patch_namespaced_custom_object(*PG[:2], NS, PG[2], "pg", [{"op": "remove", "path": "/spec/queue"}],
                                      _content_type=JSON_PATCH)
    co.delete_namespaced_custom_object(*PG[:2], NS, PG[2], "pg")
    seen = [(c.method, c.verb, c.group, c.version, c.resource, c.namespace, c.name, c.content_type, c.status)
            for c in api.calls]
    assert seen == [
        ("POST", "create", "scheduling.run.ai", "v2alpha2", "podgroups", NS, None, None, 201),
        ("GET", "get", "scheduling.run.ai", "v2alpha2", "podgroups", NS, "pg", None, 200),
        ("GET", "list", "scheduling.run.ai", "v2", "queues", None, None, None, 200),
        ("PATCH", "patch", "scheduling.run.ai", "v2alpha2", "podgroups", NS, "pg", JSON_PATCH, 200),
        ("DELETE", "delete", "scheduling.run.ai", "v2alpha2", "podgroups", NS, "pg", None, 200),
    ]
    assert api.calls[0].body["spec"] == podgroup()["spec"]
    assert [c.verb for c in api.writes()] == ["create", "patch", "delete"]
    api.reset_calls()
    assert api.calls == []


def test_concurrent_creates_of_one_object_yield_one_201_and_409s(api: Emulator) -> None:
    barrier = threading.Barrier(50)
    outcomes: list[int] = []
    lock = threading.Lock()

    def create() -> None:
        client = CustomObjectsApi(api.client())
        barrier.wait()
        try:
            client.create_namespaced_custom_object(*PG[:2], NS, PG[2], podgroup())
            code = 201
        except ApiException as exc:
            code = exc.status
        with lock:
            outcomes.append(code)

    threads = [threading.Thread(target=create) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(outcomes) == [201] + [409] * 49
    assert sorted(c.status for c in api.calls) == [201] + [409] * 49
    assert len(api.list(PG_API, "PodGroup")) == 1


def test_concurrent_patches_lose_no_update_while_the_harness_reads(api: Emulator) -> None:
    first = api.put(podgroup())
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            assert api.get(PG_API, "PodGroup", NS, "pg") is not None
            assert api.calls is not None

    def label(i: int) -> None:
        CustomObjectsApi(api.client()).patch_namespaced_custom_object(
            *PG[:2], NS, PG[2], "pg", {"metadata": {"labels": {f"l{i}": "x"}}})

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=label, args=(i,)) for i in range(30)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join(10)
    stop.set()
    reader.join(10)
    final = api.get(PG_API, "PodGroup", NS, "pg")
    assert final is not None and len(final["metadata"]["labels"]) == 30
    assert int(final["metadata"]["resourceVersion"]) == int(first["metadata"]["resourceVersion"]) + 30


def test_collect_garbage_deletes_dependents_of_a_vanished_owner(api: Emulator) -> None:
    owner = api.put({"apiVersion": TJ_API, "kind": "TrainJob", "metadata": {"name": "t", "namespace": NS}})
    ref = {"apiVersion": TJ_API, "kind": "TrainJob", "name": "t", "uid": owner["metadata"]["uid"], "controller": True}
    live, stale = podgroup("live"), podgroup("stale")
    live["metadata"]["ownerReferences"] = [ref]
    stale["metadata"]["ownerReferences"] = [{**ref, "uid": str(uuid.uuid4())}]
    api.put(live)
    api.put(stale)
    assert api.collect_garbage() == [(PG_API, "PodGroup", NS, "stale")]
    api.delete(TJ_API, "TrainJob", NS, "t")
    assert api.collect_garbage() == [(PG_API, "PodGroup", NS, "live")]
