"""A later wave's places held in the earlier wave's gang (kai_fn/core/reserve.py): which waves are reserved, the
placeholder pods the plan makes (size, scheduling constraints, PodGroup, owner), and what to do with them given the
pods that exist."""
from __future__ import annotations

import pytest

from kai_fn.core import reserve
from kai_fn.core.plan import plan
from kai_fn.core.podsets import pod_sets
from kai_fn.core.stages import stages
from tests import crds
from tests.builders import UID, container, rjob, runtime, trainjob, typed

GPU = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "8"}
PLACED = {
    "nodeSelector": {"pool": "a100"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}}},
    "priorityClassName": "train",
}


def launcher(containers=None, status="Ready", pod_spec=None):
    job = rjob("launcher", containers=containers, pod_spec=pod_spec)
    return {**job, "dependsOn": [{"name": "node", "status": status}]}


def mpi(launcher_job, as_node=True, node_requests=GPU):
    return runtime(rjob(containers=[container(requests=node_requests)]), launcher_job,
                   ml_policy={"mpi": {"runLauncherAsNode": as_node}})


def make(rt, num_nodes=3, **kw):
    return plan(*typed(trainjob(num_nodes=num_nodes), rt), **kw)


WAVES = [  # (runtime, reserve) -> [(replicatedJobs of each wave, those of it reserved)]
    pytest.param(mpi(launcher()), True, [(("node", "launcher"), ("launcher",))], id="ready-joins-its-wave"),
    pytest.param(mpi(launcher()), False, [(("node",), ()), (("launcher",), ())], id="scheduler-plugins-keeps-waves"),
    pytest.param(mpi(launcher(status="Complete")), True, [(("node",), ()), (("launcher",), ())],
                 id="complete-starts-a-new-wave"),
    pytest.param(runtime(rjob("init", ancestor="dataset-initializer"),
                         rjob("node", depends_on=["init"])), True, [(("init",), ()), (("node",), ())],
                 id="initializers-stay-as-they-are"),
]


@pytest.mark.parametrize("rt, reserve_on, expected", WAVES)
def test_a_wave_that_waits_for_ready_jobs_joins_their_gang(rt, reserve_on, expected):
    job, typed_rt = typed(trainjob(num_nodes=3), rt)
    got = [(s.names, tuple(ps.name for ps in s.reserved)) for s in stages(pod_sets(job, typed_rt), reserve=reserve_on)]
    assert got == expected


SIZES = [  # (runtime, numNodes) -> (minMember, the placeholder's requests, its limits)
    pytest.param(mpi(launcher(containers=[container(requests=GPU)])), 3, 3, GPU, {"nvidia.com/gpu": "8"},
                 id="launcher-as-node-numNodes-3"),
    pytest.param(mpi(launcher(containers=[container(requests={"cpu": "500m", "memory": "512Mi"})]), as_node=False),
                 2, 3, {"cpu": "500m", "memory": "512Mi"}, None, id="cpu-launcher-apart"),
    pytest.param(mpi(launcher(containers=[container(requests={"cpu": "1"}),
                                          container("sidecar", requests={"cpu": "250m", "memory": "64Mi"})])),
                 2, 2, {"cpu": "1250m", "memory": "64Mi"}, None, id="every-container-summed"),
]


@pytest.mark.parametrize("rt, num_nodes, min_member, requests, limits", SIZES)
def test_the_placeholder_is_the_launchers_size_in_the_nodes_gang(rt, num_nodes, min_member, requests, limits):
    result = make(rt, num_nodes)
    (pod,) = result.placeholders
    assert result.podgroup["spec"]["minMember"] == min_member and result.stage_podgroups == ()
    assert pod["spec"]["containers"][0]["resources"] == {"requests": requests, **({"limits": limits} if limits else {})}
    assert pod["metadata"]["annotations"] == {"pod-group-name": f"pg-job-{UID}",
                                              "kai.scheduler/skip-podgrouper": "true"}
    assert pod["metadata"]["name"] == "job-launcher-placeholder-0"
    assert pod["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kai-fn", "kai-fn/trainjob": "job",
                                         "kai-fn/trainjob-uid": UID, "kai-fn/placeholder-for": "launcher",
                                         "kai.scheduler/queue": "rt-queue"}
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                                   "name": "job", "uid": UID, "controller": True,
                                                   "blockOwnerDeletion": True}]
    assert result.podgroup["metadata"]["annotations"]["kai-fn/reserves"] == "launcher=1" == result.reserves
    launcher_template = next(c for c in result.pod_templates if c.replicated_job == "launcher")
    assert launcher_template.annotations == {"pod-group-name": f"pg-job-{UID}", "kai.scheduler/skip-podgrouper": "true"}
    crds.validate(result.podgroup)


def test_the_placeholder_is_placed_as_the_launcher_would_be():
    result = make(mpi(launcher(pod_spec=PLACED)), placeholder_image="mirror/pause:1")
    (pod,) = result.placeholders
    spec = pod["spec"]
    assert {k: spec[k] for k in PLACED} == PLACED
    assert spec["schedulerName"] == "kai-scheduler" and spec["containers"][0]["image"] == "mirror/pause:1"
    assert spec["terminationGracePeriodSeconds"] == 0 and spec["restartPolicy"] == "Always"
    assert spec["securityContext"]["runAsNonRoot"] is True  # Pod Security "restricted" admits it
    assert spec["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["ALL"]}}


def test_every_pod_of_a_reserved_set_gets_a_placeholder():
    result = make(mpi({**launcher(), "replicas": 2}))  # a trainer step's count is numNodes' (1): replicas count
    assert [p["metadata"]["name"] for p in result.placeholders] == ["job-launcher-placeholder-0",
                                                                    "job-launcher-placeholder-1"]
    assert result.reserves == "launcher=2" and result.podgroup["spec"]["minMember"] == 4


@pytest.mark.parametrize("rt, kw", [
    pytest.param(runtime(rjob(containers=[container(requests=GPU)]), ml_policy={"torch": {}}), {}, id="flat-torch"),
    pytest.param(mpi(launcher(status="Complete")), {}, id="launcher-after-complete"),
    pytest.param(mpi(launcher()), {"flavor": "scheduler-plugins"}, id="scheduler-plugins"),
])
def test_no_placeholder_where_nothing_waits_for_a_ready_wave(rt, kw):
    result = make(rt, **kw)
    assert result.placeholders == () and result.reserves == ""


def pod(name, job=None, deleting=False):
    meta = {"name": name, "labels": {"jobset.sigs.k8s.io/replicatedjob-name": job} if job else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


HELD = [pod("job-launcher-placeholder-0")]
STEPS = [  # (running, finished, JobSet's pods, placeholders) -> (create, delete, handed_over)
    pytest.param(True, False, [pod("n0", "node")], [], (("job-launcher-placeholder-0",), (), False),
                 id="running-without-launcher-makes-it"),
    pytest.param(True, False, [pod("n0", "node")], HELD, ((), (), False), id="held-waits"),
    pytest.param(True, False, [pod("n0", "node"), pod("l0", "launcher")], HELD,
                 ((), ("job-launcher-placeholder-0",), True), id="launcher-made-hands-over"),
    pytest.param(True, False, [pod("l0", "launcher")], [], ((), (), True), id="handed-over-stays-so"),
    pytest.param(True, False, [pod("l0", "launcher", deleting=True)], [],
                 (("job-launcher-placeholder-0",), (), False), id="a-restarted-jobset-holds-again"),
    pytest.param(False, False, [], HELD, ((), ("job-launcher-placeholder-0",), False), id="suspended-lets-go"),
    pytest.param(True, True, [pod("n0", "node")], HELD, ((), ("job-launcher-placeholder-0",), False),
                 id="finished-lets-go"),
    pytest.param(True, False, [pod("n0", "node")], [pod("job-launcher-placeholder-0", deleting=True)],
                 (("job-launcher-placeholder-0",), (), False), id="one-being-deleted-is-not-held"),
]


@pytest.mark.parametrize("running, finished, pods, held, expected", STEPS)
def test_placeholders_exist_exactly_while_the_jobset_runs_without_the_pods(running, finished, pods, held, expected):
    got = reserve.step(trainjob="job", reserves={"launcher": 1}, running=running, finished=finished, pods=pods,
                       held=held)
    assert (got.create, got.delete, got.handed_over) == expected
    assert got.why


def test_reserves_text_round_trips():
    assert reserve.parse_reserves("launcher=1,helper=3") == {"launcher": 1, "helper": 3}
    assert reserve.parse_reserves("") == {} == reserve.parse_reserves("junk")


@pytest.mark.parametrize("conditions, expected", [
    ([{"type": "Completed", "status": "True"}], True), ([{"type": "Failed", "status": "True"}], True),
    ([{"type": "Suspended", "status": "True"}], False), ([], False)])
def test_a_jobset_is_finished_when_completed_or_failed(conditions, expected):
    assert reserve.finished({"status": {"conditions": conditions}}) is expected


@pytest.mark.parametrize("replicas, blocked", [(reserve.MAX_PLACEHOLDERS, False), (reserve.MAX_PLACEHOLDERS + 1, True),
                                               (1_000_000, True)], ids=["at-the-limit", "one-over", "a-million"])
def test_a_later_wave_over_the_placeholder_limit_is_refused_before_any_placeholder_is_planned(replicas, blocked):
    """A runtime any tenant can write may ask for a million launcher pods: refused with the field named, never built
    in memory (docs/security.md)."""
    result = make(mpi({**launcher(), "replicas": replicas}))
    assert result.blocked is blocked
    if blocked:
        (problem,) = [p for p in result.problems if p.blocking]
        assert "'launcher'" in str(problem) and f"at most {reserve.MAX_PLACEHOLDERS}" in str(problem)
        assert result.placeholders == ()
    else:
        assert len(result.placeholders) == replicas
