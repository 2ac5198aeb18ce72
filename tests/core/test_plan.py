"""The planner: scope, precedence, layout, flavors and problems — each rule a row."""
from __future__ import annotations

import pytest

from kai_fn.commands import plan_view
from kai_fn.function import report
from kai_fn.core.models import InputError
from kai_fn.core.owner_metadata import top_owner_metadata
from kai_fn.core.stages import MAX_CHAIN
from kai_fn.core.plan import plan, planned_gangs
from tests import crds
from tests.builders import UID, container, rjob, runtime, trainjob, typed

KAI_RUNTIME_POLICY = {"kai": {"queueName": "policy-queue"}}


def make(job=None, rt=None, **kw):
    return plan(*typed(job or trainjob(), rt or runtime()), **kw)


SCOPE = [
    pytest.param(trainjob(), runtime(labels={}, pod_group_policy=KAI_RUNTIME_POLICY), None, id="runtime-kai-policy"),
    pytest.param(trainjob(labels={"kai.scheduler/queue": "q"}), runtime(labels={}), None, id="trainjob-queue-label"),
    pytest.param(trainjob(), runtime(labels={"kai.scheduler/queue": "q"}), None, id="runtime-queue-label"),
    pytest.param(trainjob(), runtime(labels={}), None, id="only-its-pods-ask-for-kai"),
    pytest.param(trainjob(labels={"project": "vision"}), runtime(labels={}), None, id="only-a-project-label"),
    pytest.param(trainjob(), runtime(rjob(scheduler=None), labels={}), "do not ask for kai-scheduler",
                 id="nothing-asks-for-kai"),
    pytest.param(trainjob(labels={"kai.scheduler/queue": "q"}),
                 runtime(pod_group_policy={"coscheduling": {"scheduleTimeoutSeconds": 30}}),
                 "coscheduling", id="coscheduling-runtime-wins-over-label"),
    pytest.param(trainjob(labels={"kai.scheduler/queue": "q"}), runtime(pod_group_policy={"volcano": {}}),
                 "volcano", id="volcano-runtime-wins-over-label"),
    pytest.param(trainjob(managedBy="kueue.x-k8s.io/multikueue"), runtime(), "managed by kueue.x-k8s.io/multikueue",
                 id="managed-elsewhere"),
    pytest.param(trainjob(managedBy="trainer.kubeflow.org/trainjob-controller"), runtime(), None,
                 id="managed-by-trainer-explicitly"),
]


@pytest.mark.parametrize("job, rt, ignored", SCOPE)
def test_scope(job, rt, ignored):
    result = make(job, rt)
    if ignored is None:
        assert result.ignored is None and result.actionable
        crds.validate(result.podgroup)
    else:
        assert ignored in result.ignored
        assert result.podgroup is None and not result.pod_templates and not result.problems


QUEUE = [
    pytest.param({"kai.scheduler/queue": "job-q"}, {"kai.scheduler/queue": "rt-q"}, KAI_RUNTIME_POLICY, "job-q",
                 id="trainjob-label-first"),
    pytest.param({}, {"kai.scheduler/queue": "rt-q"}, KAI_RUNTIME_POLICY, "policy-queue", id="then-runtime-policy"),
    pytest.param({}, {"kai.scheduler/queue": "rt-q"}, {"kai": {}}, "rt-q", id="then-runtime-label"),
    pytest.param({}, {}, {"kai": {}}, "from-settings", id="then-the-setting"),
]


@pytest.mark.parametrize("job_labels, rt_labels, policy, queue", QUEUE)
def test_queue_precedence(job_labels, rt_labels, policy, queue):
    result = make(trainjob(labels=job_labels), runtime(labels=rt_labels, pod_group_policy=policy),
                  default_queue="from-settings")
    assert result.queue == queue
    crds.validate(result.podgroup)
    assert result.podgroup["spec"]["queue"] == queue
    assert all(c.labels["kai.scheduler/queue"] == queue for c in result.pod_templates)


def test_flat_kai_podgroup_is_named_owned_labelled_and_fits_the_crd():
    result = make(trainjob(num_nodes=3), runtime(ml_policy={"torch": {}}))
    pg = result.podgroup
    crds.validate(pg)
    assert pg["apiVersion"] == "scheduling.run.ai/v2alpha2"
    assert pg["metadata"]["name"] == f"pg-job-{UID}"
    assert pg["metadata"]["namespace"] == "ns"
    assert pg["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kai-fn", "kai-fn/trainjob": "job",
                                        "kai-fn/trainjob-uid": UID}
    assert pg["metadata"]["ownerReferences"] == [{
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "job", "uid": UID,
        "controller": True, "blockOwnerDeletion": True}]
    assert pg["spec"] == {"queue": "rt-queue", "minMember": 3, "stalenessGracePeriod": "-1s", "priorityClassName": "train"}
    assert result.stage_podgroups == () and result.podgroups == (pg,)
    assert result.layout == "flat"
    assert result.jobset_annotations == {"kai.scheduler/skip-podgrouper": "true"}
    (change,) = result.pod_templates
    assert change.annotations == {"pod-group-name": f"pg-job-{UID}", "kai.scheduler/skip-podgrouper": "true"}
    assert change.labels == {"kai.scheduler/queue": "rt-queue"}


GPU = [container(requests={"nvidia.com/gpu": "8"})]
INITIALIZERS = (rjob("dataset-initializer", ancestor="dataset-initializer"),
                rjob("model-initializer", ancestor="model-initializer"))


def launcher(parallelism=None):
    return {**rjob("launcher", parallelism=parallelism), "dependsOn": [{"name": "node", "status": "Ready"}]}


# Each runtime shape Trainer has: (runtime, numNodes) -> the PodGroups, in start order, as
# (name suffix, replicatedJobs, minMember); the main gang is the one without a suffix.
SHAPES = [
    pytest.param(runtime(rjob(containers=GPU), ml_policy={"torch": {}}), 4, [("", ["node"], 4)], id="flat-torch"),
    pytest.param(runtime(*INITIALIZERS, rjob("node", containers=GPU, depends_on=["dataset-initializer", "model-initializer"]),
                         ml_policy={"numNodes": 30, "torch": {}}), None,
                 [("-stage-0", ["dataset-initializer", "model-initializer"], 2), ("", ["node"], 30)],
                 id="torch-with-initializers"),
    pytest.param(runtime(rjob(containers=GPU), launcher(), ml_policy={"mpi": {"runLauncherAsNode": False}}), 4,
                 [("", ["node", "launcher"], 5)], id="mpi-launcher-apart"),  # the launcher's place held: reserve.py
    pytest.param(runtime(rjob(containers=GPU), launcher(), ml_policy={"mpi": {"runLauncherAsNode": True}}), 4,
                 [("", ["node", "launcher"], 4)], id="mpi-launcher-as-node"),
    pytest.param(runtime(rjob(containers=GPU), ml_policy={"jax": {}}), 2, [("", ["node"], 2)], id="jax"),
    pytest.param(runtime({**rjob("worker", ancestor=None, parallelism=3), "replicas": 2}, rjob("chief", ancestor=None)),
                 None, [("", ["worker", "chief"], 7)], id="replicas-count-every-pod"),
    pytest.param(runtime(rjob("prep", ancestor=None), rjob("tune", ancestor=None, depends_on=["prep"]),
                         rjob("node", containers=GPU, depends_on=["tune"]), ml_policy={"torch": {}}), 2,
                 [("-stage-0", ["prep"], 1), ("-stage-1", ["tune"], 1), ("", ["node"], 2)], id="a-chain-of-three"),
]


@pytest.mark.parametrize("rt, num_nodes, expected", SHAPES)
def test_one_flat_podgroup_per_start_wave_and_each_pod_names_its_own(rt, num_nodes, expected):
    result = make(trainjob(num_nodes=num_nodes), rt)
    main = f"pg-job-{UID}"
    got = [(pg["metadata"]["name"].removeprefix(main), [rj for rj in _pod_sets_of(result, pg)], pg["spec"]["minMember"])
           for pg in sorted(result.podgroups, key=lambda pg: _wave(result, pg))]
    assert got == [(suffix, rjs, n) for suffix, rjs, n in expected]
    assert result.podgroup_name == main and result.layout == ("staged" if len(expected) > 1 else "flat")
    for pg in result.podgroups:
        crds.validate(pg)
        assert "subGroups" not in pg["spec"] and "minSubGroup" not in pg["spec"]
        assert pg["spec"]["stalenessGracePeriod"] == "-1s"
        assert pg["metadata"]["labels"]["kai-fn/trainjob-uid"] == UID
    assert all("kai.scheduler/subgroup-name" not in c.labels for c in result.pod_templates)


@pytest.mark.parametrize("rt, num_nodes, expected", SHAPES)
def test_each_planned_podgroup_counts_the_jobs_jobset_makes_of_its_replicated_jobs(rt, num_nodes, expected):
    result = make(trainjob(num_nodes=num_nodes), rt)
    replicas = {ps.name: ps.replicas for ps in result.pod_sets}
    got = {name.removeprefix(f"pg-job-{UID}"): (p.min_member, p.jobs) for name, p in planned_gangs(result).items()}
    assert got == {suffix: (n, frozenset(f"job-{rj}-{i}" for rj in rjs for i in range(replicas[rj])))
                   for suffix, rjs, n in expected}


def _pod_sets_of(result, pg):
    return [c.replicated_job for c in result.pod_templates
            if c.annotations["pod-group-name"] == pg["metadata"]["name"]]


def _wave(result, pg):
    return [s.podgroup for s in result.stages].index(pg["metadata"]["name"])


def test_a_staged_gang_keeps_trainers_arithmetic_and_says_each_stage():
    rt = runtime(*INITIALIZERS, rjob("node", depends_on=["dataset-initializer", "model-initializer"]),
                 ml_policy={"numNodes": 30, "torch": {}}, pod_group_policy={"kai": {"scheduleTimeoutSeconds": 90}})
    result = make(trainjob(), rt)
    assert result.min_member == 32  # Trainer's coscheduling counts every pod set
    (initializers,) = result.stage_podgroups
    assert initializers["metadata"]["annotations"] == {
        "kai-fn/min-resources": "", "kai-fn/replicated-jobs": "dataset-initializer,model-initializer",
        "kai.scheduler/top-owner-metadata": top_owner_metadata("job", UID)}
    assert result.podgroup["metadata"]["annotations"]["kai-fn/schedule-timeout-seconds"] == "90"  # the main gang's
    assert report.gang_text(result) == (f"stages pg-job-{UID}-stage-0 (dataset-initializer, model-initializer: minMember 2); "
                                  f"pg-job-{UID} (node: minMember 30)")
    assert [p["minMember"] for p in plan_view.summary(result)["podGroups"]] == [2, 30]


@pytest.mark.parametrize("value", [None, "60s"])
def test_the_staleness_grace_period_is_the_setting_or_left_to_kai(value):
    spec = make(staleness_grace_period=value).podgroup["spec"]
    assert spec.get("stalenessGracePeriod") == value


def test_priority_preemptibility_and_topology_reach_the_podgroup():
    job = trainjob(labels={"priorityClassName": "train-high", "kai.scheduler/preemptibility": "non-preemptible"},
                   annotations={"kai.scheduler/topology": "cluster-topology",
                                "kai.scheduler/topology-required-placement": "topology.kubernetes.io/zone",
                                "kai.scheduler/topology-preferred-placement": "kubernetes.io/hostname"})
    pg = make(job).podgroup
    crds.validate(pg)
    assert pg["spec"]["priorityClassName"] == "train-high"
    assert pg["spec"]["preemptibility"] == "non-preemptible"
    assert pg["spec"]["topologyConstraint"] == {"topology": "cluster-topology",
                                                "requiredTopologyLevel": "topology.kubernetes.io/zone",
                                                "preferredTopologyLevel": "kubernetes.io/hostname"}


def test_priority_falls_back_to_the_trainer_pod_template():
    rt = runtime(rjob("init", ancestor="dataset-initializer", pod_spec={"priorityClassName": "init-low"}),
                 rjob("node", pod_spec={"priorityClassName": "trainer-high"}))
    assert make(trainjob(), rt).podgroup["spec"]["priorityClassName"] == "trainer-high"
    job = trainjob(labels={"priorityClassName": "from-label"})
    assert make(job, rt).podgroup["spec"]["priorityClassName"] == "from-label"


def test_schedule_timeout_comes_from_the_policy_with_default_60():
    assert make(flavor="scheduler-plugins").podgroup["spec"]["scheduleTimeoutSeconds"] == 60
    rt = runtime(pod_group_policy={"kai": {"scheduleTimeoutSeconds": 120}})
    assert make(trainjob(), rt, flavor="scheduler-plugins").podgroup["spec"]["scheduleTimeoutSeconds"] == 120


def test_scheduler_plugins_flavor_has_upstream_shape_and_fits_the_crd():
    rt = runtime(rjob("node", containers=[container(requests={"cpu": "500m", "memory": "1Gi"})]),
                 rjob("launcher", ancestor=None, containers=[container("launcher", requests={"cpu": "250m", "memory": "512Mi"})]),
                 ml_policy={"numNodes": 2, "torch": {}})
    result = make(trainjob(), rt, flavor="scheduler-plugins")
    pg = result.podgroup
    crds.validate(pg)
    assert pg["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert pg["metadata"]["name"] == "job"
    assert pg["spec"] == {"minMember": 3, "minResources": {"cpu": "1250m", "memory": "2560Mi"},
                          "scheduleTimeoutSeconds": 60}
    assert pg["metadata"]["ownerReferences"][0]["controller"] is True
    assert [c.labels for c in result.pod_templates] == [{"scheduling.x-k8s.io/pod-group": "job"}] * 2
    assert result.jobset_annotations == {}


def test_kai_plan_reports_min_resources_it_cannot_write_into_the_spec():
    rt = runtime(rjob(containers=[container(requests={"cpu": "2", "nvidia.com/gpu": "1"})]), ml_policy={"numNodes": 4})
    result = make(trainjob(), rt)
    assert result.min_resources == {"cpu": "8", "nvidia.com/gpu": "4"}
    assert "minResources" not in result.podgroup["spec"]
    assert plan_view.summary(result)["minResources"] == {"cpu": "8", "nvidia.com/gpu": "4"}


PROBLEMS = [
    pytest.param(trainjob(labels={"kai.scheduler/queue": "bad queue!"}), runtime(), {}, "kai.scheduler/queue",
                 id="queue-not-a-label-value"),
    pytest.param(trainjob(labels={"kai.scheduler/queue": "q" * 64}), runtime(), {}, "longer than 63",
                 id="queue-too-long-is-not-truncated"),
    pytest.param(trainjob(labels={"kai.scheduler/preemptibility": "sometimes"}), runtime(), {}, "preemptibility",
                 id="preemptibility-unknown"),
    pytest.param(trainjob(labels={"priorityClassName": "High_Priority"}), runtime(), {}, "priorityClassName",
                 id="priority-class-not-a-name"),
    pytest.param(trainjob(annotations={"kai.scheduler/topology-required-placement": "zone"}), runtime(), {},
                 "needs kai.scheduler/topology", id="topology-level-without-topology"),
    pytest.param(trainjob(), runtime(rjob(scheduler=None)), {}, "pods would not be scheduled by KAI",
                 id="scheduler-name-unset"),
    pytest.param(trainjob(), runtime(rjob(scheduler="default-scheduler")), {}, "pods would not be scheduled by KAI",
                 id="scheduler-name-other"),
    pytest.param(trainjob(name="n" * 210), runtime(rjob("init", ancestor=None), rjob("node", depends_on=["init"])), {},
                 "-stage-0", id="stage-podgroup-name-too-long"),
    pytest.param(trainjob(name="n" * 64), runtime(), {"flavor": "scheduler-plugins"}, "pod-group label",
                 id="trainjob-name-too-long-for-the-pod-label"),
    pytest.param(trainjob(), runtime(rjob(containers=[container(requests={"cpu": "-1"})])), {}, "negative",
                 id="negative-request"),
]


@pytest.mark.parametrize("job, rt, kw, needle", PROBLEMS)
def test_invalid_values_block_the_plan_with_a_named_problem(job, rt, kw, needle):
    result = make(job, rt, **kw)
    assert result.blocked
    assert result.podgroup is None and result.pod_templates == () and result.jobset_annotations == {}
    assert any(needle in str(p) for p in result.problems), [str(p) for p in result.problems]


@pytest.mark.parametrize("links,blocked", [(MAX_CHAIN, False), (MAX_CHAIN + 1, True)])
def test_a_dependson_chain_deeper_than_admission_names_blocks_the_plan(links, blocked):
    jobs = [rjob("s0", ancestor=None)]
    jobs += [rjob(f"s{i}", ancestor=None, depends_on=[f"s{i - 1}"]) for i in range(1, links)]
    result = make(trainjob(), runtime(*jobs, rjob("node", depends_on=[f"s{links - 1}"])))
    assert result.blocked is blocked
    assert any("dependsOn" in str(p) and "deep" in str(p) for p in result.problems) is blocked


def test_empty_runtime_blocks():
    rt = runtime()
    rt["spec"]["template"]["spec"]["replicatedJobs"] = []
    result = make(trainjob(), rt)
    assert result.blocked and "no pods" in str(result.problems[0])


GPU = {"nvidia.com/gpu": "8"}
STAGED = [
    # (runtime, ganged replicatedJobs, minMember, minResources gpus)
    pytest.param(runtime(rjob("dataset-initializer", ancestor="dataset-initializer"),
                         rjob("node", depends_on=["dataset-initializer"],
                              containers=[container(requests=GPU, limits=GPU)]), ml_policy={"numNodes": 4, "torch": {}}),
                 ["node"], 4, "32", id="initializer-then-trainer"),
    pytest.param(runtime(rjob("dataset-initializer", ancestor="dataset-initializer"),
                         rjob("model-initializer", ancestor="model-initializer"),
                         rjob("node", depends_on=["dataset-initializer", "model-initializer"],
                              containers=[container(requests=GPU, limits=GPU)]), ml_policy={"numNodes": 2, "torch": {}}),
                 ["node"], 2, "16", id="two-initializers-then-trainer"),
    pytest.param(runtime(rjob("prep", ancestor=None), rjob("work", ancestor=None, depends_on=["prep"],
                                                              containers=[container(requests=GPU, limits=GPU)])),
                 ["work"], 1, "8", id="no-trainer-ancestor-the-last-stage"),
    pytest.param(runtime(rjob("launcher", ancestor=None), rjob("node", containers=[container(requests=GPU, limits=GPU)]),
                         ml_policy={"numNodes": 2, "torch": {}}),
                 ["launcher", "node"], 3, "16", id="no-dependsOn-every-replicatedJob"),
]


@pytest.mark.parametrize("rt, ganged, min_member, gpus", STAGED)
def test_scheduler_plugins_gangs_only_the_trainer_stage_of_a_staged_runtime(rt, ganged, min_member, gpus):
    """Coscheduling has no subgroups: a gang over every stage would wait for initializers that cannot start."""
    result = make(trainjob(), rt, flavor="scheduler-plugins")
    assert result.actionable and not result.problems
    assert [t.replicated_job for t in result.pod_templates] == ganged
    assert result.podgroup["spec"]["minMember"] == min_member == result.min_member
    assert result.podgroup["spec"]["minResources"]["nvidia.com/gpu"] == gpus
    assert [p.name for p in result.pod_sets] == ganged
    crds.validate(result.podgroup)


def test_scheduler_plugins_warns_when_a_gang_pod_names_no_scheduler():
    """The Coscheduling profile's name is the cluster's choice, so a missing schedulerName warns, never blocks."""
    rt = runtime(rjob("init", ancestor="dataset-initializer", scheduler=None),
                 rjob("node", depends_on=["init"], scheduler=None))
    result = make(trainjob(), rt, flavor="scheduler-plugins")
    assert result.actionable
    assert [(p.blocking, "'node'" in str(p)) for p in result.problems] == [(False, True)]


@pytest.mark.parametrize("ref, message", [
    ({"name": "rt", "kind": "Deployment"}, "spec.runtimeRef.kind"),
    ({"name": "rt", "apiGroup": "example.com"}, "spec.runtimeRef.apiGroup"),
])
def test_unsupported_runtime_refs_are_input_errors(ref, message):
    job = trainjob()
    job["spec"]["runtimeRef"] = ref
    with pytest.raises(InputError, match=message):
        make(job, runtime())


def test_a_runtime_other_than_the_named_one_is_refused():
    with pytest.raises(InputError, match="names ClusterTrainingRuntime rt"):
        make(trainjob(), runtime(name="other"))
    with pytest.raises(InputError, match="names TrainingRuntime"):
        make(trainjob(runtime_kind="TrainingRuntime"), runtime())


V2_0_TRAINJOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
    "metadata": {"name": "old", "namespace": "ns", "uid": UID, "labels": {"kai.scheduler/queue": "q"}},
    "spec": {
        "runtimeRef": {"name": "rt"},
        "labels": {"team": "a"}, "annotations": {"x": "y"},
        "podSpecOverrides": [{"targetJobs": [{"name": "node"}], "nodeSelector": {"gpu": "a100"}}],
        "trainer": {"numNodes": 2, "numProcPerNode": "auto", "image": "img", "env": [{"name": "A", "value": "1"}]},
        "managedBy": "trainer.kubeflow.org/trainjob-controller",
    },
    "status": {"conditions": [{"type": "Suspended", "status": "True"}]},
}


@pytest.mark.parametrize("job", [
    pytest.param(V2_0_TRAINJOB, id="v2.0-labels-annotations-podSpecOverrides"),
    pytest.param({**V2_0_TRAINJOB, "spec": {**V2_0_TRAINJOB["spec"], "podTemplateOverrides": [
        {"targetJobs": [{"name": "node"}], "spec": {"tolerations": []}}]}}, id="v2.1-podTemplateOverrides"),
    pytest.param(trainjob(labels={"kai.scheduler/queue": "q"}, num_nodes=2, runtimePatches=[
        {"manager": "trainer.kubeflow.org/kubeflow-sdk", "time": "2026-01-01T00:00:00Z",
         "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"a": "b"}}}}}]), id="v2.3-runtimePatches"),
])
def test_every_trainer_release_shape_parses_and_plans(job):
    result = make(job, runtime(ml_policy={"torch": {}}))
    assert result.actionable and result.min_member == 2
    crds.validate(result.podgroup)


@pytest.mark.parametrize("check, value, valid", [
    ("label_value", "", True), ("label_value", "a.b_c-d", True), ("label_value", "-a", False),
    ("label_value", "a" * 63, True), ("label_value", "a" * 64, False), ("label_value", "a b", False),
    ("dns_label", "team-a", True), ("dns_label", "Team", False), ("dns_label", "a.b", False),
    ("dns_subdomain", "a.b-c", True), ("dns_subdomain", "a_b", False), ("dns_subdomain", "a" * 254, False),
])
def test_name_and_label_syntax(check, value, valid):
    from kai_fn.core import validation
    assert (getattr(validation, check)(value) is None) is valid


UNLABELLED_QUEUE = [
    pytest.param({"project": "vision"}, {}, "vision", id="project-label-as-kais-podgrouper"),
    pytest.param({"project": "vision"}, {"kai.scheduler/node-pool": "a100"}, "vision-a100", id="project-in-a-node-pool"),
    pytest.param({}, {}, "from-settings", id="no-label-the-default-queue"),
]


@pytest.mark.parametrize("job_labels, pod_labels, queue", UNLABELLED_QUEUE)
def test_a_trainjob_whose_pods_ask_for_kai_is_ganged_in_the_queue_kais_podgrouper_picks(job_labels, pod_labels,
                                                                                       queue):
    job = rjob()
    job["template"]["spec"]["template"]["metadata"] = {"labels": pod_labels}
    result = make(trainjob(labels=job_labels), runtime(job, labels={}), default_queue="from-settings")
    assert result.actionable and result.podgroup["spec"]["queue"] == queue
