"""kai_fn's PodGroup metadata against KAI Scheduler v0.17.0's own podgrouper (testbed/kaioracle, linked against
github.com/kai-scheduler/KAI-scheduler), field by field, for named cases (one or more per row of issue 30's table)
and generated ones (tests/testbed/podgrouper_cases.py).

Every field KAI's PodGroup carries besides the gang is the same on kai_fn's main PodGroup, or differs in one of the
ways docs/how-it-decides.md ("Same as KAI's podgrouper") lists: kai_fn's own labels and annotations (``kai-fn/*``,
``app.kubernetes.io/managed-by``) win; the top-owner metadata names the TrainJob, the PodGroup's owner, where KAI's
names the JobSet; the queue falls to the runtime's label (kai_fn's own source) where KAI falls to ``default-queue``;
``stalenessGracePeriod`` is kai_fn's ``-1s`` where the user says nothing; a replicatedJob's topology is the main
PodGroup's only where that wave is the one replicatedJob with one replica (else a warning). Name, owner, minMember and
subgroups are the gang, different on purpose, and not compared.
"""
from __future__ import annotations

from typing import Any
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings

from kai_fn.core.models import Runtime, TrainJob, parse
from kai_fn.core.plan import NEVER_STALE, Plan, plan
from tests.testbed.gobuild import LineOracle
from tests.testbed.podgrouper_cases import CLASSES, NODE_POOL, RUNTIME_QUEUE, TOPOLOGY, Case, cases

pytestmark = pytest.mark.testbed

OWN = ("kai-fn/", "app.kubernetes.io/managed-by")
TOP_OWNER = "kai.scheduler/top-owner-metadata"


class Oracle(LineOracle):
    """KAI's podgrouper, one process for the whole module."""

    def __call__(self, case: Case) -> dict[str, Any]:
        return self.ask(case.oracle_input())


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    o = Oracle("kaioracle")
    yield o
    o.close()


def kai_fn_plan(case: Case) -> Plan:
    result = plan(parse(TrainJob, case.trainjob()), parse(Runtime, case.runtime()), cluster=case.cluster())
    assert result.podgroup is not None, f"kai_fn refused the case: {result.problems}"
    return result


def theirs(kv: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in kv.items() if not k.startswith(OWN) and k != TOP_OWNER}


def compare(case: Case, answer: dict[str, Any]) -> None:
    """Every field of KAI's PodGroup but the gang, against kai_fn's main PodGroup: equal, or an intended difference."""
    result = kai_fn_plan(case)
    kai, mine = answer["podGroup"], result.podgroup
    ks, ms = kai["spec"], mine["spec"]
    assert ms["queue"] == (RUNTIME_QUEUE if ks["queue"] == "default-queue" else ks["queue"])
    assert ms.get("priorityClassName") == ks.get("priorityClassName")
    assert ms.get("preemptibility") == ks.get("preemptibility")
    assert ms.get("preemptionDelay") == ks.get("preemptionDelay")
    assert ms.get("stalenessGracePeriod") == ks.get("stalenessGracePeriod", NEVER_STALE)
    assert theirs(mine["metadata"]["labels"]) == theirs(kai["metadata"].get("labels") or {})
    assert theirs(mine["metadata"]["annotations"]) == theirs(kai["metadata"].get("annotations") or {})
    assert mine["metadata"]["annotations"][TOP_OWNER] == answer["trainJobTopOwnerMetadata"]
    own_level = ks.get("topologyConstraint") or {}
    leaf = next((s.get("topologyConstraint") for s in ks["subGroups"] if s["name"] == "node-replica-0"), None)
    if own_level.get("topology"):
        expected = own_level
    elif case.node_replicas == 1:
        expected = leaf
    else:
        expected = None
    assert ms.get("topologyConstraint") == expected
    dropped = [p for p in result.problems if "not applied" in p.message]
    assert bool(dropped) == (leaf is not None and expected is not leaf)


NAMED = [
    # priorityClassName
    pytest.param(Case(), id="priority-nothing-named-is-train"),
    pytest.param(Case(job_labels={"priorityClassName": "build"}), id="priority-trainjob-label"),
    pytest.param(Case(jobset_labels={"priorityClassName": "inference"}, job_labels={"priorityClassName": "build"}),
                 id="priority-jobset-label-wins"),
    pytest.param(Case(pod_labels={"priorityClassName": "build"}), id="priority-pod-label"),
    pytest.param(Case(pod_priority="inference"), id="priority-pod-spec"),
    pytest.param(Case(job_labels={"priorityClassName": "gone"}, pod_priority="build"),
                 id="priority-missing-class-passed-over"),
    pytest.param(Case(classes=()), id="priority-train-even-where-it-does-not-exist"),
    pytest.param(Case(defaults="types", types=({"typeName": "TrainJob", "group": "trainer.kubeflow.org",
                                                 "priorityName": "inference", "preemptibility": "non-preemptible"},)),
                 id="defaults-trainjob-kind"),
    pytest.param(Case(job_labels={"priorityClassName": "build"},
                      defaults="types", types=({"typeName": "TrainJob", "priorityName": "inference"},)),
                 id="defaults-trainjob-kind-beats-the-trainjobs-label"),
    pytest.param(Case(defaults="types", types=({"typeName": "JobSet", "group": "jobset.x-k8s.io",
                                                 "priorityName": "build", "preemptibility": "Preemptible"},)),
                 id="defaults-jobset-kind"),
    pytest.param(Case(defaults="missing", job_labels={"priorityClassName": "gone"}), id="defaults-configmap-missing"),
    pytest.param(Case(defaults="unreadable"), id="defaults-configmap-unreadable"),
    pytest.param(Case(defaults="types", types=({"typeName": "TrainJob", "preemptibility": "sometimes"},)),
                 id="defaults-invalid-preemptibility-passed-over"),
    # preemptibility
    pytest.param(Case(job_labels={"kai.scheduler/preemptibility": "non-preemptible"}), id="preemptibility-owner"),
    pytest.param(Case(pod_labels={"kai.scheduler/preemptibility": "preemptible"}), id="preemptibility-pod"),
    # labels, node pool, annotations, user
    pytest.param(Case(job_labels={"team": "a"}, jobset_labels={"team": "b", "cost": "x"},
                      pod_labels={NODE_POOL: "pool-a", "user": "ann"}, pod_notes={"user": "ann"},
                      job_notes={"note": "job"}, jobset_notes={"note": "template"}), id="owner-labels-annotations-pool"),
    pytest.param(Case(pod_labels={NODE_POOL: "pool-a", "pool": "pool-b"}, node_pool_key="pool"),
                 id="node-pool-label-key-flag"),
    # queue
    pytest.param(Case(job_labels={"kai.scheduler/queue": "q-team"}), id="queue-owner"),
    pytest.param(Case(pod_labels={"kai.scheduler/queue": "q-pod"}), id="queue-pod"),
    pytest.param(Case(job_labels={"project": "ml"}, pod_labels={NODE_POOL: "pool-a"}), id="queue-project-and-pool"),
    pytest.param(Case(pod_labels={"project": "ml"}), id="queue-project"),
    pytest.param(Case(), id="queue-kai-fns-own-source-where-kai-says-default-queue"),
    # preemption delay, staleness
    pytest.param(Case(job_notes={"kai.scheduler/preemption-delay": "90s"}), id="preemption-delay-owner"),
    pytest.param(Case(job_notes={"kai.scheduler/preemption-delay": "-1s"},
                      pod_notes={"kai.scheduler/preemption-delay": "5m"}), id="preemption-delay-pod-after-a-bad-one"),
    pytest.param(Case(jobset_notes={"kai.scheduler/staleness-grace-period": "2m"}), id="staleness-asked-for"),
    pytest.param(Case(pod_notes={"kai.scheduler/staleness-grace-period": "never"}), id="staleness-bad-value"),
    # topology
    pytest.param(Case(job_notes={TOPOLOGY[0]: "racks", TOPOLOGY[1]: "rack"}), id="topology-owner"),
    pytest.param(Case(node_topology={TOPOLOGY[0]: "racks", TOPOLOGY[2]: "rack"}), id="topology-replicated-job"),
    pytest.param(Case(node_topology={TOPOLOGY[0]: "racks", TOPOLOGY[1]: "zone"}, initializer=True),
                 id="topology-replicated-job-in-a-staged-gang"),
    pytest.param(Case(node_topology={TOPOLOGY[0]: "racks", TOPOLOGY[1]: "zone"}, node_replicas=2),
                 id="topology-replicated-job-with-replicas-is-a-warning"),
    pytest.param(Case(node_topology={TOPOLOGY[0]: "racks"}), id="topology-replicated-job-without-a-level"),
]


@pytest.mark.parametrize("case", NAMED)
def test_named_cases_match_kais_podgrouper(oracle: Oracle, case: Case):
    compare(case, oracle(case))


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_generated_cases_match_kais_podgrouper(oracle: Oracle, case: Case):
    compare(case, oracle(case))


def test_the_cases_exercise_every_priority_class_and_both_defaults_kinds():
    """The named cases name each class KAI installs and the defaults of both kinds KAI reads for a TrainJob."""
    cases_ = [p.values[0] for p in NAMED]
    named = {c.pod_priority for c in cases_} | {c.job_labels.get("priorityClassName") for c in cases_} | \
        {c.jobset_labels.get("priorityClassName") for c in cases_} | {c.pod_labels.get("priorityClassName") for c in cases_}
    assert set(CLASSES) <= named | {"train"}
    assert {t["typeName"] for c in cases_ for t in c.types} == {"TrainJob", "JobSet"}
