"""Least privilege, proved: every API call the function makes in its scenarios is granted, and every grant is used.

The scenarios run the real function server against the emulator; each request is recorded as
(apiGroup, resource, verb) and compared with what the rendered manifests bind to the function's ServiceAccount.
The rendered roles themselves use no wildcard, name only upstream resources and bind existing ServiceAccounts.
"""
from __future__ import annotations

import pytest

from tests.ce import ping, ref, resource, send
from tests.conftest import JOBSET, KAI_PG, SP_PG, TRAINER, sample_object, seed
from tests.function.test_gang_status import OVER_LIMIT, place
from tests.manifests import (
    ADMISSION_CHECKED, BASE, FUNCTION, FUNCTION_TRIPLES, HEARTBEAT_LEASE, NAMESPACE, SCHEDULER_PLUGINS, SOURCE_SA, SOURCE_TRIPLES,
    VARIANTS, bound_triples, by_kind, container, crd_plurals, env_of, ksvc, named_grants, one, render,
)
from tests.builders import held_by_0_2

NS = "team-a"


def scenario_new_trainjob_by_resource(api, url):
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         sample_object("trainjob-llama-finetune"), held_by_0_2(sample_object("jobset-llama-finetune")))
    assert send(url, resource(api.get(TRAINER, "TrainJob", NS, "llama-finetune"))).status == 200
    # The held JobSet's own event: the trigger on a cluster (and the one that counts when this process decided the
    # TrainJob's JobSet in an earlier scenario: a TrainJob event is then a duplicate).
    assert send(url, resource(api.get(JOBSET, "JobSet", NS, "llama-finetune"))).status == 200


def scenario_new_trainjob_by_ref_with_a_namespaced_runtime(api, url):
    seed(api, sample_object("queue-team-a"), sample_object("trainingruntime-torch-llm-kai"),
         sample_object("trainjob-bert-pretrain"), held_by_0_2(sample_object("jobset-bert-pretrain")))
    assert send(url, ref(NS, "bert-pretrain")).status == 200


def scenario_a_trainjob_naming_a_priority_class(api, url):
    """KAI passes over a PriorityClass that does not exist: kai_fn lists them (KAI flavor) to do the same."""
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"].setdefault("labels", {})["priorityClassName"] = "build"
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"), tj,
         held_by_0_2(sample_object("jobset-llama-finetune")))
    assert send(url, resource(api.get(TRAINER, "TrainJob", NS, "llama-finetune"))).status == 200


def scenario_running_jobset_too_late(api, url):
    seed(api, sample_object("clustertrainingruntime-torch-kai"), sample_object("trainjob-whisper-asr"),
         sample_object("jobset-whisper-asr"))
    assert send(url, resource(api.get(TRAINER, "TrainJob", NS, "whisper-asr"))).status == 200


def scenario_resync(api, url):
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         sample_object("trainjob-llama-finetune"), held_by_0_2(sample_object("jobset-llama-finetune")))
    assert send(url, ping()).status == 200
    assert "kai-fn/podgroup" in api.get(JOBSET, "JobSet", NS, "llama-finetune")["metadata"]["annotations"]
    assert send(url, ping()).status == 200  # now a released gang: the resync looks at its pods


def scenario_gang_status(api, url):
    """KAI says why the gang waits, then every pod is bound: both reports, from PodGroup events."""
    scenario_new_trainjob_by_resource(api, url)
    (pg,) = [p for p in api.list(KAI_PG, "PodGroup", NS) + api.list(SP_PG, "PodGroup", NS)
             if p["metadata"]["labels"]["kai-fn/trainjob"] == "llama-finetune"]
    pg.setdefault("status", {})["schedulingConditions"] = [{"type": "UnschedulableOnNodePool", "reasons": [OVER_LIMIT]}]
    pg = api.put(pg)
    place(api, 4, 0, podgroup=pg["metadata"]["name"], sp=pg["apiVersion"] == SP_PG)
    assert send(url, resource(pg, "update")).status == 200
    place(api, 4, 4, podgroup=pg["metadata"]["name"], sp=pg["apiVersion"] == SP_PG)
    assert send(url, resource(pg, "update")).status == 200
    assert "kai-fn/bound" in api.get(pg["apiVersion"], "PodGroup", NS, pg["metadata"]["name"])["metadata"]["annotations"]


def scenario_schedule_timeout(api, url):
    """A released gang, overdue and not known to be bound: the resync lists its pods, then times it out (a mark on
    its PodGroup)."""
    for pg in api.list(KAI_PG, "PodGroup", NS) + api.list(SP_PG, "PodGroup", NS):  # an earlier scenario's, bound
        api.delete(pg["apiVersion"], "PodGroup", NS, pg["metadata"]["name"])
    scenario_new_trainjob_by_resource(api, url)
    tj = api.get(TRAINER, "TrainJob", NS, "llama-finetune")
    tj["metadata"]["annotations"] = {"kai-fn/schedule-timeout-seconds": "1"}
    api.put(tj)
    js = api.get(JOBSET, "JobSet", NS, "llama-finetune")
    js["metadata"]["annotations"]["kai-fn/released-at"] = "2026-01-01T00:00:00Z"
    api.put(js)
    assert send(url, ping()).status == 200



def scenario_the_migration_resumes_a_trainjob_the_earlier_gate_suspended(api, url):
    """The earlier TrainJob gate suspended the TrainJob itself: the migration (kai_fn/function/migration.py)
    resumes it once its JobSet is decided."""
    tj = sample_object("trainjob-bert-pretrain")
    tj["spec"]["suspend"] = True
    tj["metadata"]["annotations"] = {"kai-fn/auto-suspended": "true"}
    js = held_by_0_2(sample_object("jobset-bert-pretrain"))
    del js["metadata"]["labels"]["kai-fn/held"]
    seed(api, sample_object("queue-team-a"), sample_object("trainingruntime-torch-llm-kai"), tj, js)
    assert send(url, ping()).status == 200
    assert api.get(TRAINER, "TrainJob", NS, "bert-pretrain")["spec"]["suspend"] is False


def scenario_authenticated_delivery(api, url):
    seed(api, sample_object("clustertrainingruntime-torch-kai"), sample_object("trainjob-llama-finetune"),
         held_by_0_2(sample_object("jobset-llama-finetune")))
    token = api.issue_token("kai-fn", "kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource", [AUDIENCE])
    assert send(url, resource(api.get(TRAINER, "TrainJob", NS, "llama-finetune")), token=token).status == 200


def scenario_mpi_launcher_place_held_then_handed_over(api, url):
    """MPI's launcher: its placeholder made with the gang (KAI flavor), deleted once JobSet made the launcher."""
    from tests.function import test_reservation as mpi
    assert send(url, resource(mpi.seed_mpi(api))).status == 200
    mpi.nodes_run(api, launcher=True)
    assert send(url, resource(api.get(TRAINER, "TrainJob", NS, mpi.NAME), "update")).status == 200
    assert mpi.placeholders(api) == []


def scenario_mpi_placeholder_name_taken_by_another_pod(api, url):
    """A pod of the placeholder's name that kai_fn did not make is read (get) and refused, never adopted."""
    from tests.function import test_reservation as mpi
    if api.get(KAI_PG, "PodGroup", NS, mpi.PG) is not None:  # an earlier scenario's gang: this one starts afresh
        api.delete(KAI_PG, "PodGroup", NS, mpi.PG)
    seed(api, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": mpi.HOLDER, "namespace": NS},
               "spec": {"containers": [{"name": "x", "image": "busybox"}]}})
    assert send(url, resource(mpi.seed_mpi(api))).status == 200  # blocked (KAI), or no placeholder at all


def scenario_segments_check_the_topology(api, url):
    """A TrainJob in segments: the Topology it names is read, to check its levels."""
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"]["annotations"] = {"kai.scheduler/topology": "racks", "kai.scheduler/segment-size": "2",
                                     "kai.scheduler/segment-topology-required-placement": "rack"}
    topology = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "racks"},
                "spec": {"levels": [{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}]}}
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"), topology, tj,
         held_by_0_2(sample_object("jobset-llama-finetune")))
    assert send(url, resource(api.get(TRAINER, "TrainJob", NS, "llama-finetune"))).status == 200


AUDIENCE = "kai-fn"
SCENARIOS = [  # (scenario, the settings it runs with on top of the flavor)
    (scenario_new_trainjob_by_resource, {}),
    (scenario_new_trainjob_by_ref_with_a_namespaced_runtime, {}),
    (scenario_running_jobset_too_late, {}),
    (scenario_a_trainjob_naming_a_priority_class, {}),
    (scenario_resync, {}),
    (scenario_gang_status, {}),
    (scenario_schedule_timeout, {}),
    (scenario_the_migration_resumes_a_trainjob_the_earlier_gate_suspended, {}),
    (scenario_schedule_timeout, {"KAI_FN_ON_TIMEOUT": "suspend"}),  # the one TrainJob write on a gang's path
    (scenario_authenticated_delivery, {"KAI_FN_AUDIENCE": AUDIENCE}),
    (scenario_mpi_launcher_place_held_then_handed_over, {}),
    (scenario_mpi_placeholder_name_taken_by_another_pod, {}),
    (scenario_segments_check_the_topology, {}),
]


@pytest.mark.parametrize("variant, flavor", [(BASE, "kai"), (SCHEDULER_PLUGINS, "scheduler-plugins")])
def test_cluster_role_grants_exactly_what_the_scenarios_call(api, functions, variant, flavor):
    used: set[tuple[str, str, str]] = set()
    for scenario, settings in SCENARIOS:
        scenario(api, functions(KAI_PODGROUP_FLAVOR=flavor, **settings).url)
        used |= {(c.group, c.resource, c.verb) for c in api.calls}
        api.reset_calls()
        functions.forget()  # the scenarios seed the samples again, uids and all: a fresh process, as on a cluster
    granted = bound_triples(render(variant), FUNCTION)
    assert used - granted == set(), "called without permission"
    assert granted - used - ADMISSION_CHECKED == set(), "granted but never called"


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_role_uses_a_wildcard(variant):
    objs = render(variant)
    roles = by_kind(objs, "ClusterRole") + by_kind(objs, "Role")
    assert len(roles) == 5 and all(role["rules"] for role in roles), [r["metadata"]["name"] for r in roles]
    named = [(role["metadata"]["name"], key, value) for role in roles for rule in role["rules"]
             for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs")
             for value in rule.get(key, [])]
    assert [n for n in named if "*" in n[2]] == []


@pytest.mark.parametrize("variant", VARIANTS)
def test_function_is_granted_exactly_the_calls_it_makes(variant):
    assert bound_triples(render(variant), FUNCTION) == FUNCTION_TRIPLES[variant]


@pytest.mark.parametrize("variant", VARIANTS)
def test_sources_may_only_get_list_watch_what_they_watch(variant):
    objs = render(variant)
    watched = set()
    for source in by_kind(objs, "ApiServerSource"):
        assert source["spec"]["serviceAccountName"] == SOURCE_SA
        for r in source["spec"]["resources"]:
            group = r["apiVersion"].rpartition("/")[0]
            (plural,) = [p for (g, p), crd in crd_plurals().items() if g == group and crd["kind"] == r["kind"]]
            watched |= {(group, plural, v) for v in ("get", "list", "watch")}
    assert bound_triples(objs, SOURCE_SA) == SOURCE_TRIPLES[variant] == watched


@pytest.mark.parametrize("variant", VARIANTS)
def test_bindings_name_existing_service_accounts(variant):
    objs = render(variant)
    sas = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in by_kind(objs, "ServiceAccount")}
    subjects = {(b["metadata"]["name"], s["namespace"], s["name"])
                for b in by_kind(objs, "ClusterRoleBinding") + by_kind(objs, "RoleBinding") for s in b["subjects"]}
    assert len(subjects) == 4, subjects  # three ClusterRoleBindings and the heartbeat's RoleBinding
    assert {(ns, name) for _, ns, name in subjects} <= sas, (subjects, sas)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_granted_custom_resource_exists_upstream(variant):
    triples = bound_triples(render(variant), FUNCTION) | bound_triples(render(variant), SOURCE_SA)
    assert {group for group, _, _ in triples} >= {"", "authentication.k8s.io", "coordination.k8s.io",
                                                  "jobset.x-k8s.io", "trainer.kubeflow.org"}
    for group, plural, _ in triples:
        if group == "":
            assert plural in ("events", "namespaces", "pods")
            continue
        if group == "authentication.k8s.io":
            assert plural == "tokenreviews"
            continue
        if group == "coordination.k8s.io":
            assert plural == "leases"
            continue
        if group == "kai-fn.io":  # no API: a name the marks policy asks the authorizer about
            assert (group, plural, _) in ADMISSION_CHECKED
            continue
        if group == "scheduling.k8s.io":
            assert plural == "priorityclasses"
            continue
        assert (group, plural) in crd_plurals(), (group, plural)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_heartbeat_may_patch_only_its_own_lease_which_the_manifests_ship(variant):
    """No create (resourceNames cannot narrow it): the Lease is applied with the function, in its namespace."""
    objs = render(variant)
    assert named_grants(objs, FUNCTION) == {
        ("coordination.k8s.io", "leases", "patch"): (NAMESPACE, (HEARTBEAT_LEASE,))}
    lease = one(objs, "Lease", HEARTBEAT_LEASE, "coordination.k8s.io")
    assert lease["metadata"]["namespace"] == NAMESPACE and lease["spec"]["leaseDurationSeconds"] == 180
    assert env_of(container(ksvc(objs)))["KAI_FN_HEARTBEAT_LEASE"] == f"{NAMESPACE}/{HEARTBEAT_LEASE}"
