"""Scenario 9, beside KAI's podgrouper: every TrainJob on KAI ends with one PodGroup, whoever made it.

- in a namespace kai_fn takes (``kai-fn.io/enabled``): kai_fn's PodGroup; its JobSet and each pod carry
  ``kai.scheduler/skip-podgrouper``, so the podgrouper makes none and leaves the pods' ``pod-group-name`` alone;
- in one it does not: the podgrouper groups the TrainJob as KAI does, ``pg-<name>-<uid>`` of its top owner, which
  for a TrainJob is its JobSet (the uid is the JobSet's), and the gang binds. Both bind on the same kind of pool."""
from __future__ import annotations

import pytest
from kubernetes import client

from tests.chain.conftest import REPORT, wait_for
from tests.chain.gangs import bound, group_of, pods, table

MANAGED_BY = "app.kubernetes.io/managed-by"
SKIP = "kai.scheduler/skip-podgrouper"


@pytest.mark.parametrize("enabled, maker", [(True, "kai-fn"), (False, "kai's podgrouper")],
                         ids=["taken-by-kai-fn", "left-to-the-podgrouper"])
def test_each_trainjob_gets_one_podgroup_and_binds(chain, pool, namespaces, enabled, maker):
    nodes = pool(f"pgr-{int(enabled)}")
    nodes.ensure("2x8")
    ns = namespaces("pgr", enabled=enabled)
    chain.runtime(ns, pool=nodes.name)
    job = chain.trainjob(ns, "tj", num_nodes=2)
    seen = lambda: table(chain, ns)  # noqa: E731

    trainers = wait_for("the gang binds whole", lambda: (ps := pods(chain, ns, "tj")) and len(bound(ps)) == 2 and ps,
                        explain=seen)
    groups = client.CustomObjectsApi(chain.api).list_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", ns, "podgroups")["items"]
    assert len(groups) == 1, f"{len(groups)} PodGroups: {[g['metadata']['name'] for g in groups]}"
    group = groups[0]
    assert {group_of(p) for p in trainers} == {group["metadata"]["name"]}
    made_by_kai_fn = (group["metadata"].get("labels") or {}).get(MANAGED_BY) == "kai-fn"
    assert made_by_kai_fn is enabled, group["metadata"]
    jobset = client.CustomObjectsApi(chain.api).get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", "tj")
    owner = job if enabled else jobset
    assert group["metadata"]["name"] == f"pg-tj-{owner['metadata']['uid']}"
    skip = (jobset["metadata"].get("annotations") or {}).get(SKIP)
    assert (skip == "true") is enabled
    assert {(p.metadata.annotations or {}).get(SKIP) == "true" for p in trainers} == {enabled}
    spec = group["spec"]
    REPORT.append(f"podgrouper: {maker}'s PodGroup: minMember {spec.get('minMember')}, minSubGroup "
                  f"{spec.get('minSubGroup')}, subGroups {[g['name'] for g in spec.get('subGroups') or []]}")
