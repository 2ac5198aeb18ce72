"""The emulator's twin of the gang-naming admission policy (kai_fn/local/emulator/naming.py) on the scenario table the
real policy runs on a real API server (tests/testbed/test_gang_naming.py): the same JobSets named, the same names."""
from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
from kubernetes.client import CoreV1Api, CustomObjectsApi, V1Namespace, V1ObjectMeta

from kai_fn.local import shapes
from kai_fn.local.emulator import Emulator
from tests.gang_naming_table import (
    JOBSETS, TABLE, check, check_kept_when_updated, jobset, named_before_pods_skipped, names_written,
)

ENABLED, OFF = "naming-on", "naming-off"


@pytest.fixture(scope="module")
def naming() -> Iterator[Emulator]:
    with Emulator(name_gangs=True) as emulator:
        core = CoreV1Api(emulator.client())
        core.create_namespace(V1Namespace(metadata=V1ObjectMeta(name=ENABLED, labels={"kai-fn.io/enabled": "true"})))
        core.create_namespace(V1Namespace(metadata=V1ObjectMeta(name=OFF)))
        yield emulator


@pytest.mark.parametrize("make,in_enabled,named,ml_policy,segments", [c[1:] for c in TABLE], ids=[c[0] for c in TABLE])
def test_the_shared_table_on_the_twin(naming, make, in_enabled, named, ml_policy, segments):
    sent = make()
    made = CustomObjectsApi(naming.client()).create_namespaced_custom_object(
        *JOBSETS, ENABLED if in_enabled else OFF, "jobsets", copy.deepcopy(sent), dry_run="All")
    check(sent, made, named, ml_policy, segments)


def test_a_write_that_drops_a_name_of_a_named_jobset_gets_it_back(naming):
    objs = CustomObjectsApi(naming.client())
    sent = jobset([{"name": "node", "template": {"spec": {"template": {"spec": {
        "schedulerName": "kai-scheduler", "containers": [{"name": "node", "image": "x"}]}}}}}], owner="dropped")
    sent["spec"]["suspend"] = True
    made = objs.create_namespaced_custom_object(*JOBSETS, ENABLED, "jobsets", copy.deepcopy(sent))
    path = "/spec/replicatedJobs/0/template/spec/template/metadata/annotations/pod-group-name"
    after = objs.patch_namespaced_custom_object(*JOBSETS, ENABLED, "jobsets", "dropped", [{"op": "remove", "path": path}],
                                                _content_type="application/json-patch+json")
    assert names_written(after) == names_written(made) != {"node": None}


def test_a_running_jobset_named_before_its_pods_were_told_to_skip_keeps_its_pod_templates(naming):
    """The twin of the real policy's upgrade case (tests/testbed/test_gang_naming.py)."""
    core, objs = CoreV1Api(naming.client()), CustomObjectsApi(naming.client())
    core.create_namespace(V1Namespace(metadata=V1ObjectMeta(name="naming-upgrade")))
    sent = named_before_pods_skipped(jobset([shapes.node()], owner="upgraded"))
    objs.create_namespaced_custom_object(*JOBSETS, "naming-upgrade", "jobsets", copy.deepcopy(sent))
    core.patch_namespace("naming-upgrade", {"metadata": {"labels": {"kai-fn.io/enabled": "true"}}})
    check_kept_when_updated(objs, "naming-upgrade", sent)
