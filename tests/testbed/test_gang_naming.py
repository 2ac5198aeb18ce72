"""The gang named at admission (knative/components/admission-policy), on a real API server with JobSet's webhooks: the
policy's CEL and kai_fn's planner (:mod:`kai_fn.core.stages`) name the same PodGroup for every replicatedJob, on
Trainer v2.3.0's own runtimes, on the chain's shapes and on generated ``dependsOn`` graphs; a JobSet it must not
touch comes back as it was sent; what CREATE wrote survives Trainer's server-side re-applies."""
from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.rest import ApiException

from kai_fn.local import runtimes, shapes
from kai_fn.local.process import REPO
from kai_fn.local.chain import wait_for_policy
from tests.gang_naming_table import (
    JOBSETS, NAMED, TABLE, check, check_kept_when_updated, jobset, named_before_pods_skipped, names_planned,
    names_written, pods_skipping,
)
from tests.testbed.kai_fn_install import ENABLED, apply, create_trainjob, enabled_namespace, trainjob

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

POLICY_FILE = REPO / "knative" / "components" / "admission-policy" / "policy.yaml"
POLICY = "kai-fn-name-gangs"


def _policy_objects(path: Path = POLICY_FILE) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _named(testbed: LiveCluster, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return client.CustomObjectsApi(testbed.api).create_namespaced_custom_object(
        *JOBSETS, namespace, "jobsets", copy.deepcopy(body), dry_run="All")


@pytest.fixture(scope="module")
def naming(testbed: LiveCluster) -> Iterator[str]:
    """The policy loaded (the API server loads it asynchronously: a dry-run create says when it acts) in a namespace
    that opted in; removed afterwards, as the testbed may be shared."""
    apply(testbed, _policy_objects())
    namespace = enabled_namespace(testbed, "naming")
    probe = jobset([shapes.node()])
    deadline = time.monotonic() + 120
    while NAMED not in (_try_named(testbed, namespace, probe)["metadata"].get("labels") or {}):
        assert time.monotonic() < deadline, f"{POLICY} did not take effect within 120 s"
        time.sleep(0.5)
    yield namespace
    for plural in ("mutatingadmissionpolicybindings", "mutatingadmissionpolicies"):
        testbed.kubectl("delete", f"{plural}.admissionregistration.k8s.io", POLICY, "--ignore-not-found")
    wait_for_policy(testbed.api, namespace, "kai-scheduler", acting=False)  # unloaded asynchronously too
    client.CoreV1Api(testbed.api).delete_namespace(namespace)


def _try_named(testbed: LiveCluster, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        return _named(testbed, namespace, body)
    except ApiException as e:  # 503 while the CRD's schema or the policy is not loaded yet
        if e.status != 503:
            raise
        return {"metadata": {}}


# -- the same names as the planner ---------------------------------------------------------------------------------

def _official() -> list[tuple[str, list[dict[str, Any]], dict[str, Any] | None]]:
    found = []
    for name, runtime in runtimes.official().items():
        user = runtimes.as_user(runtime)
        found.append((name, runtimes.jobs_of(user), user["spec"].get("mlPolicy")))
    return found


OFFICIAL = _official()


@pytest.mark.parametrize("jobs,ml_policy", [c[1:] for c in OFFICIAL], ids=[c[0] for c in OFFICIAL])
def test_trainers_own_runtimes_are_named_as_the_planner_names_them(testbed: LiveCluster, naming: str,
                                                                    jobs: list[dict[str, Any]],
                                                                    ml_policy: dict[str, Any] | None):
    sent = jobset(jobs)
    assert names_written(_named(testbed, naming, sent)) == names_planned(sent, ml_policy)


def test_trainer_v2_3_ships_nine_runtimes():
    assert len(OFFICIAL) == 9, [c[0] for c in OFFICIAL]


_NAMES = ("node", "launcher", "dataset-initializer", "model-initializer", "a", "b", "c", "d", "e", "f")
_ANCESTORS = (None, "trainer", "dataset-initializer", "model-initializer")


@st.composite
def graphs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """replicatedJobs as JobSet's webhook admits them: unique names, no dependsOn on the first, each dependsOn (at
    most five) on an earlier job, Ready or Complete; some with Trainer's ancestor label; chains up to the policy's
    depth."""
    names = draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=len(_NAMES), unique=True))
    jobs: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        job = shapes.initializer(name) if i % 2 else shapes.node()
        job["name"] = name
        ancestor = draw(st.sampled_from(_ANCESTORS))
        job["template"].pop("metadata", None)
        if ancestor:
            job["template"]["metadata"] = {"labels": {shapes.ANCESTOR: ancestor}}
        job.pop("dependsOn", None)
        if i:
            on = draw(st.lists(st.sampled_from(names[:i]), max_size=5, unique=True))
            if on:
                job["dependsOn"] = [{"name": n, "status": draw(st.sampled_from(("Ready", "Complete")))} for n in on]
        jobs.append(job)
    return jobs


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(jobs=graphs())
def test_generated_dependson_graphs_are_named_as_the_planner_names_them(testbed: LiveCluster, naming: str,
                                                                       jobs: list[dict[str, Any]]):
    sent = jobset(jobs)
    assert names_written(_named(testbed, naming, sent)) == names_planned(sent)


# -- the scenario table the emulator's twin shares ------------------------------------------------------------------

@pytest.mark.parametrize("make,in_enabled,named,ml_policy,segments", [c[1:] for c in TABLE], ids=[c[0] for c in TABLE])
def test_the_shared_table_on_the_real_policy(testbed: LiveCluster, naming: str, make, in_enabled: bool, named: bool,
                                            ml_policy, segments):
    namespace = naming if in_enabled else enabled_namespace(testbed, "naming-off", labels=None)
    sent = make()
    check(sent, _named(testbed, namespace, sent), named, ml_policy, segments)


# -- what survives ----------------------------------------------------------------------------------------------------

def _trainer_apply(testbed: LiveCluster, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply as Trainer's TrainJob controller makes it: field manager ``trainer``, forced, the JobSet
    whole as Trainer builds it (without anything admission added)."""
    objs = client.CustomObjectsApi(testbed.api)
    objs.patch_namespaced_custom_object(*JOBSETS, namespace, "jobsets", body["metadata"]["name"],
                                        copy.deepcopy(body), field_manager="trainer", force=True,
                                        _content_type="application/apply-patch+yaml")
    return objs.get_namespaced_custom_object(*JOBSETS, namespace, "jobsets", body["metadata"]["name"])


@pytest.mark.parametrize("suspend", [False, True], ids=["running", "suspended-by-its-trainjob"])
def test_trainers_re_applies_never_drop_the_names(testbed: LiveCluster, naming: str, suspend: bool):
    """Trainer applies its JobSet whole, without what admission added, on each reconcile that touches it."""
    owner = create_trainjob(testbed, naming, trainjob(f"reapply-{suspend}".lower(), "torch-distributed"))
    # A real owner: the garbage collector deletes a JobSet whose owner does not exist.
    sent = jobset(list(shapes.SHAPES[1].jobs), owner=owner["metadata"]["name"], uid=owner["metadata"]["uid"])
    sent["spec"]["suspend"] = suspend
    first = _trainer_apply(testbed, naming, sent)
    again = _trainer_apply(testbed, naming, sent)
    assert names_written(first) == names_written(again) == names_planned(sent)
    assert set(pods_skipping(again).values()) == {True}
    assert again["metadata"]["generation"] == first["metadata"]["generation"]  # the apply changed no spec
    assert again["metadata"]["labels"][NAMED] == "true"
    client.CustomObjectsApi(testbed.api).delete_namespaced_custom_object(*JOBSETS, naming, "jobsets",
                                                                         sent["metadata"]["name"])


def test_a_write_that_drops_a_name_of_a_suspended_jobset_gets_it_back(testbed: LiveCluster, naming: str):
    """JobSet's webhook lets a suspended JobSet's pod templates change: the names are written again at every UPDATE
    of a JobSet named at its CREATE."""
    owner = create_trainjob(testbed, naming, trainjob("dropped", "torch-distributed"))
    sent = jobset([shapes.node()], owner="dropped", uid=owner["metadata"]["uid"])
    sent["spec"]["suspend"] = True
    objs = client.CustomObjectsApi(testbed.api)
    objs.create_namespaced_custom_object(*JOBSETS, naming, "jobsets", sent)
    path = "/spec/replicatedJobs/0/template/spec/template/metadata/annotations/pod-group-name"
    after = objs.patch_namespaced_custom_object(*JOBSETS, naming, "jobsets", "dropped", [{"op": "remove", "path": path}],
                                                _content_type="application/json-patch+json")
    assert names_written(after) == names_planned(sent)


def test_a_running_jobset_named_before_its_pods_were_told_to_skip_keeps_its_pod_templates(testbed: LiveCluster,
                                                                                         naming: str):
    """After an upgrade, the policy's UPDATE of a JobSet an earlier policy named adds no mark to its pod templates:
    JobSet's webhook refuses a running JobSet's pod template changed, and Trainer's re-apply would fail with it."""
    namespace = enabled_namespace(testbed, "naming-upgrade", labels=None)  # opts in once its JobSet runs
    owner = create_trainjob(testbed, namespace, trainjob("upgraded", "torch-distributed"))
    sent = named_before_pods_skipped(jobset([shapes.node()], owner="upgraded", uid=owner["metadata"]["uid"]))
    objs = client.CustomObjectsApi(testbed.api)
    objs.create_namespaced_custom_object(*JOBSETS, namespace, "jobsets", copy.deepcopy(sent))
    client.CoreV1Api(testbed.api).patch_namespace(namespace, {"metadata": {"labels": ENABLED}})
    wait_for_policy(testbed.api, namespace, "kai-scheduler")
    check_kept_when_updated(objs, namespace, sent)
    client.CoreV1Api(testbed.api).delete_namespace(namespace)
