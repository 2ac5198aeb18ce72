"""Pod sets and effective requests: Trainer's arithmetic, case by case."""
from __future__ import annotations

import pytest

from kai_fn.core.podsets import count_problems, pod_sets, total_requests
from tests.builders import container, rjob, runtime, trainjob, typed

TORCH = {"numNodes": 2, "torch": {}}


def counts_and_total(job, rt):
    sets = pod_sets(*typed(job, rt))
    return [(ps.name, ps.count) for ps in sets], {k: str(q) for k, q in total_requests(sets).items()}


CASES = [
    pytest.param(
        trainjob(),
        runtime(rjob("node", containers=[container(requests={"cpu": "500m", "memory": "1Gi"})]),
                rjob("launcher", ancestor=None, containers=[container("launcher", requests={"cpu": "250m", "memory": "512Mi"})]),
                ml_policy={"numNodes": 2, "torch": {}}),
        [("node", 2), ("launcher", 1)], {"cpu": "1250m", "memory": "2560Mi"},
        id="upstream-multiple-podsets-2x(500m,1Gi)+1x(250m,512Mi)",
    ),
    pytest.param(
        trainjob(num_nodes=30),
        runtime(rjob("dataset-initializer", ancestor="dataset-initializer"),
                rjob("model-initializer", ancestor="model-initializer"),
                rjob("node", depends_on=["dataset-initializer", "model-initializer"]), ml_policy=TORCH),
        [("dataset-initializer", 1), ("model-initializer", 1), ("node", 30)], {},
        id="30-nodes-plus-2-initializers-is-32",
    ),
    pytest.param(trainjob(num_nodes=5), runtime(ml_policy=TORCH), [("node", 5)], {}, id="trainjob-numNodes-overrides-mlPolicy"),
    pytest.param(trainjob(), runtime(rjob(parallelism=4), ml_policy={"torch": {}}), [("node", 1)], {},
                 id="mlPolicy-without-numNodes-means-1-not-parallelism"),
    pytest.param(trainjob(), runtime(rjob(parallelism=3)), [("node", 3)], {}, id="no-mlPolicy-counts-parallelism"),
    pytest.param(trainjob(num_nodes=6), runtime(rjob(parallelism=3)), [("node", 6)], {},
                 id="no-mlPolicy-trainjob-numNodes-still-overrides"),
    pytest.param(trainjob(num_nodes=6), runtime(rjob("worker", ancestor=None, parallelism=3), ml_policy=TORCH),
                 [("worker", 3)], {}, id="numNodes-only-touches-the-trainer-ancestor"),
    pytest.param(trainjob(), runtime(rjob(parallelism=0, ancestor=None)), [("node", 1)], {}, id="parallelism-0-counts-1"),
    pytest.param(trainjob(num_nodes=0), runtime(ml_policy=TORCH), [("node", 0)], {},
                 id="trainjob-numNodes-0-counts-0-as-given"),
    pytest.param(trainjob(num_nodes=0), runtime(rjob("launcher", ancestor=None), rjob("node"),
                                                ml_policy={"numNodes": 1, "mpi": {}}),
                 [("launcher", 1), ("node", 0)], {}, id="mpi-numNodes-0-counts-0"),
    pytest.param(trainjob(), runtime(rjob(ancestor=None, parallelism=0), ml_policy={"numNodes": 0, "torch": {}}),
                 [("node", 1)], {}, id="declared-counts-are-at-least-1"),
    pytest.param(
        trainjob(num_nodes=4),
        runtime(rjob("first"), rjob("node"), ml_policy={"numNodes": 2, "torch": {}}),
        [("first", 4), ("node", 2)], {}, id="numNodes-sets-the-first-trainer-podset-only",
    ),
    pytest.param(
        trainjob(num_nodes=4),
        runtime(rjob("first"), rjob("node")),
        [("first", 4), ("node", 1)], {}, id="numNodes-without-mlPolicy-sets-the-first-trainer-podset-only",
    ),
    pytest.param(trainjob(), runtime({**rjob("node", ancestor=None, parallelism=2), "replicas": 3}), [("node", 2)], {},
                 id="replicas-are-not-multiplied-in"),
    pytest.param(
        trainjob(num_nodes=4),
        runtime(rjob("launcher", ancestor=None), rjob("node"), ml_policy={"numNodes": 1, "mpi": {}}),
        [("launcher", 1), ("node", 4)], {}, id="mpi-node-gets-numNodes",
    ),
    pytest.param(
        trainjob(num_nodes=4),
        runtime(rjob("launcher", ancestor=None), rjob("node"), ml_policy={"numNodes": 1, "mpi": {"runLauncherAsNode": True}}),
        [("launcher", 1), ("node", 3)], {}, id="mpi-runLauncherAsNode-node-gets-numNodes-minus-1",
    ),
    pytest.param(
        trainjob(num_nodes=1),
        runtime(rjob("launcher", ancestor=None), rjob("node"), ml_policy={"numNodes": 1, "mpi": {"runLauncherAsNode": True}}),
        [("launcher", 1), ("node", 1)], {}, id="mpi-runLauncherAsNode-never-below-1",
    ),
    pytest.param(
        trainjob(),
        runtime(rjob("launcher", ancestor=None), rjob("node"), ml_policy={"numNodes": 3, "mpi": {"runLauncherAsNode": True}}),
        [("launcher", 1), ("node", 3)], {}, id="mpi-without-trainjob-numNodes-uses-mlPolicy-unchanged",
    ),
    pytest.param(
        trainjob(num_nodes=2), runtime(rjob("trainer-job"), ml_policy={"numNodes": 1, "mpi": {}}),
        [("trainer-job", 1)], {}, id="mpi-override-targets-the-podset-named-node-only",
    ),
]


@pytest.mark.parametrize("job, rt, counts, total", CASES)
def test_pod_set_counts_follow_trainer(job, rt, counts, total):
    got_counts, got_total = counts_and_total(job, rt)
    assert got_counts == counts
    if total:
        assert got_total == total


def one_pod(job, rt):
    (ps,) = pod_sets(*typed(job, rt))
    return {k: str(q) for k, q in ps.requests.items()}


REQUEST_CASES = [
    pytest.param(trainjob(), [container(requests={"cpu": "1"}), container("side", requests={"cpu": "500m", "memory": "1Gi"})],
                 None, {}, {"cpu": "1500m", "memory": "1Gi"}, id="containers-are-summed"),
    pytest.param(trainjob(), [container(requests={"cpu": "1"}, limits={"nvidia.com/gpu": "4"})], None, {}, {"cpu": "1"},
                 id="gpu-under-limits-only-does-not-count"),
    pytest.param(trainjob(), [container(requests={"cpu": "1"})], [container("init", requests={"cpu": "2"})], {},
                 {"cpu": "2"}, id="init-container-larger-than-containers-wins"),
    pytest.param(trainjob(), [container(requests={"cpu": "1"})],
                 [container("sidecar", requests={"cpu": "500m"}, restart_policy="Always")], {},
                 {"cpu": "1500m"}, id="sidecar-adds-to-containers"),
    pytest.param(trainjob(), [container(requests={"cpu": "1"})],
                 [container("sidecar", requests={"cpu": "500m"}, restart_policy="Always"),
                  container("init", requests={"cpu": "1200m"})], {},
                 {"cpu": "1700m"}, id="init-after-sidecar-counts-with-it"),
    pytest.param(trainjob(), [container(requests={"cpu": "1"})],
                 [container("init", requests={"cpu": "1200m"}),
                  container("sidecar", requests={"cpu": "500m"}, restart_policy="Always")], {},
                 {"cpu": "1500m"}, id="init-before-sidecar-counts-alone"),
    pytest.param(trainjob(), [container(requests={"cpu": "1", "memory": "1Gi"})], None,
                 {"overhead": {"cpu": "250m", "memory": "120Mi"}}, {"cpu": "1250m", "memory": "1144Mi"},
                 id="overhead-is-added"),
    pytest.param(trainjob(), [container(requests={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"})], None,
                 {"resources": {"requests": {"cpu": "8"}}}, {"cpu": "8", "memory": "1Gi", "nvidia.com/gpu": "1"},
                 id="pod-level-resources-win-where-set"),
    pytest.param(trainjob(resources_per_node={"requests": {"cpu": "4", "nvidia.com/gpu": "1"}}),
                 [container(requests={"cpu": "2", "memory": "8Gi"}), container("metrics", requests={"cpu": "100m"})], None, {},
                 {"cpu": "4100m", "memory": "8Gi", "nvidia.com/gpu": "1"},
                 id="resourcesPerNode-merges-key-by-key-into-the-node-container-only"),
]


@pytest.mark.parametrize("job, containers, inits, pod_spec, expected", REQUEST_CASES)
def test_effective_pod_requests(job, containers, inits, pod_spec, expected):
    rt = runtime(rjob(containers=containers, init_containers=inits, pod_spec=pod_spec), ml_policy=TORCH)
    assert one_pod(job, rt) == expected


def test_resources_per_node_is_ignored_without_an_ml_policy_as_upstream():
    job = trainjob(resources_per_node={"requests": {"cpu": "4"}})
    assert one_pod(job, runtime(rjob(containers=[container(requests={"cpu": "2"})]))) == {"cpu": "2"}


def test_resources_per_node_reaches_the_unlabelled_mpi_node_job_when_the_launcher_runs_as_node():
    job = trainjob(num_nodes=3, resources_per_node={"requests": {"nvidia.com/gpu": "2"}})
    rt = runtime(rjob("launcher", containers=[container(requests={"cpu": "1"})]),
                 rjob("node", ancestor=None, containers=[container(requests={"cpu": "2"})]),
                 ml_policy={"numNodes": 1, "mpi": {"runLauncherAsNode": True}})
    sets = {ps.name: (ps.count, {k: str(q) for k, q in ps.requests.items()}) for ps in pod_sets(*typed(job, rt))}
    assert sets == {"launcher": (1, {"cpu": "1", "nvidia.com/gpu": "2"}), "node": (2, {"cpu": "2", "nvidia.com/gpu": "2"})}


def test_resources_per_node_skips_the_unlabelled_mpi_node_job_when_the_launcher_does_not_run_as_node():
    job = trainjob(resources_per_node={"requests": {"nvidia.com/gpu": "2"}})
    rt = runtime(rjob("launcher", containers=[container(requests={"cpu": "1"})]),
                 rjob("node", ancestor=None, containers=[container(requests={"cpu": "2"})]),
                 ml_policy={"numNodes": 1, "mpi": {}})
    node = [ps for ps in pod_sets(*typed(job, rt)) if ps.name == "node"][0]
    assert {k: str(q) for k, q in node.requests.items()} == {"cpu": "2"}


def _patch(template, **job):
    return trainjob(**job, runtimePatches=[{
        "manager": "example.com/tuner",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": template}]}}},
    }])


def test_runtime_patches_cannot_change_parallelism_or_container_resources():
    """Trainer's patch type has neither field (the CRD prunes them), so a patch that names them changes nothing."""
    job = _patch({"spec": {"parallelism": 7, "template": {"spec": {
        "containers": [{"name": "node", "resources": {"requests": {"cpu": "3"}}}]}}}})
    rt = runtime(rjob(ancestor=None, parallelism=2, containers=[container(requests={"cpu": "1", "memory": "2Gi"}),
                                                                container("side", requests={"cpu": "1"})]))
    (ps,) = pod_sets(*typed(job, rt))
    assert ps.count == 2
    assert {k: str(q) for k, q in ps.requests.items()} == {"cpu": "2", "memory": "2Gi"}


def test_runtime_patches_can_move_the_trainer_ancestor_label():
    job = _patch({"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}}, num_nodes=5)
    rt = runtime(rjob(ancestor=None, parallelism=2), ml_policy={"numNodes": 3, "torch": {}})
    (ps,) = pod_sets(*typed(job, rt))
    assert (ps.ancestor, ps.count) == ("trainer", 5)


INT32_MAX = 2**31 - 1


@pytest.mark.parametrize("job, rt, problems", [
    pytest.param(trainjob(num_nodes=4), runtime(rjob("node"), ml_policy=TORCH), [], id="4-nodes"),
    pytest.param(trainjob(num_nodes=INT32_MAX), runtime(rjob("node"), ml_policy=TORCH), [], id="int32-max"),
    pytest.param(trainjob(num_nodes=0), runtime(rjob("node"), ml_policy=TORCH),
                 [("TrainJob spec.trainer.numNodes", "is 0: a gang of no trainer pods")], id="numNodes-0"),
    pytest.param(trainjob(num_nodes=0), runtime(rjob("node"), rjob("launcher", ancestor=None),
                                                ml_policy={"mpi": {"runLauncherAsNode": True}}),
                 [("TrainJob spec.trainer.numNodes", "is 0: a gang of no trainer pods")], id="numNodes-0-mpi"),
    pytest.param(trainjob(num_nodes=10**30), runtime(rjob("node"), ml_policy=TORCH),
                 [("TrainJob spec.trainer.numNodes", f"{10**30} is more than Trainer's CRD allows (an int32: at most "
                                                     f"{INT32_MAX})")], id="numNodes-1e30"),
    pytest.param(trainjob(num_nodes=INT32_MAX + 1), runtime(rjob("node"), ml_policy=TORCH),
                 [("TrainJob spec.trainer.numNodes", f"{INT32_MAX + 1} is more than")], id="numNodes-int32-max+1"),
    pytest.param(trainjob(), runtime(rjob("node", ancestor=None, parallelism=INT32_MAX + 1)),
                 [("replicatedJob 'node'", f"{INT32_MAX + 1} pods or replicas is more than")], id="parallelism"),
    pytest.param(trainjob(num_nodes=INT32_MAX), runtime(rjob("init", ancestor="dataset-initializer"), rjob("node"),
                                                        ml_policy=TORCH),
                 [("the gang", f"{INT32_MAX + 1} pods is more than a PodGroup's minMember")], id="gang-past-int32"),
])
def test_counts_no_gang_can_have_are_named_with_the_field_and_why(job, rt, problems):
    found = count_problems(*typed(job, rt)[:1], pod_sets(*typed(job, rt)))
    assert [(where, why[:len(expected)]) for (where, why), (_, expected) in zip(found, problems)] == problems
    assert len(found) == len(problems)
