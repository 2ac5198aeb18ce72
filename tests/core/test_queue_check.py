"""The queue pre-check's arithmetic: KAI's units, -1, 0 and unset, ancestors, quotas and what KAI sees of a pod."""
from __future__ import annotations

from decimal import Decimal

import pytest

from kai_fn.core.podsets import pod_sets
from kai_fn.core.quantity import Quantity
from kai_fn.core.queue_check import QueueTree, check, gangs, kai_amounts, show
from kai_fn.core.stages import stages
from tests.builders import container, rjob, runtime, trainjob, typed

TORCH = {"numNodes": 1, "torch": {}}


def queue(name, parent=None, **resources):
    """A Queue; ``gpu=(quota, limit)`` etc.; a resource given as None is left out entirely."""
    spec = {}
    if parent:
        spec["parentQueue"] = parent
    if resources:
        spec["resources"] = {
            r: ({} if v is None else {k: x for k, x in (("quota", v[0]), ("limit", v[1])) if x is not None})
            for r, v in resources.items()
        }
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


OPEN = {"gpu": (-1, -1), "cpu": (-1, -1), "memory": (-1, -1)}


def open_queue(name, parent=None, **overrides):
    return queue(name, parent, **{**OPEN, **overrides})


def demand(*jobs, num_nodes=None, ml_policy=TORCH):
    job, rt = typed(trainjob(num_nodes=num_nodes), runtime(*jobs, ml_policy=ml_policy))
    return gangs(stages(pod_sets(job, rt)))


def gpu_node(gpus, cpu="1", memory="1Gi", **kw):
    return rjob("node", containers=[container(requests={"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus)})], **kw)


def verdict(queues, demand_, queue_name="team-a", non_preemptible=False):
    return check(QueueTree.of(queues), queue_name, demand_, non_preemptible)


# -- units --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("requests, expected", [
    ({"cpu": "500m"}, {"cpu": "500"}),
    ({"cpu": "1.5"}, {"cpu": "1500"}),
    ({"cpu": "100u"}, {"cpu": "1"}),  # Go's MilliValue rounds up
    ({"memory": "1G"}, {"memory": "1000"}),  # MB are 10^6 bytes
    ({"memory": "1Gi"}, {"memory": "1073.741824"}),
    ({"memory": "1"}, {"memory": "0.000001"}),
    ({"nvidia.com/gpu": "2"}, {"gpu": "2"}),
    ({"amd.com/gpu": "1", "nvidia.com/gpu": "1"}, {"gpu": "2"}),
    ({"nvidia.com/mig-1g.5gb": "1", "example.com/fpga": "1"}, {}),  # not GPUs to this check
], ids=["millicores", "cores", "sub-millicore-rounds-up", "decimal-MB", "binary-memory-in-MB", "one-byte",
        "gpus", "amd-gpus-count-too", "mig-and-others-not-counted"])
def test_requests_in_kai_units(requests, expected):
    amounts = kai_amounts({k: Quantity.parse(v) for k, v in requests.items()})
    assert amounts == {r: Decimal(expected.get(r, "0")) for r in ("gpu", "cpu", "memory")}


# -- limits: -1, 0, unset; equality; order -------------------------------------------------------------------------

EIGHT_GPU_NODES = demand(gpu_node(4), num_nodes=2)  # 8 GPUs, 2000 millicores, 2147.483648 MB


@pytest.mark.parametrize("team_a, expected", [
    (open_queue("team-a"), None),
    (open_queue("team-a", gpu=(-1, 8)), None),  # equal to the limit fits
    (open_queue("team-a", gpu=(-1, 7)), ("gpu", "8", "7", "limit")),
    (open_queue("team-a", gpu=(-1, 7.5)), ("gpu", "8", "7.5", "limit")),
    (open_queue("team-a", gpu=(-1, 0)), ("gpu", "8", "0", "limit")),
    (open_queue("team-a", gpu=(100, None)), ("gpu", "8", "0", "limit")),  # limit unset: nothing allowed
    (open_queue("team-a", gpu=None), ("gpu", "8", "0", "limit")),  # section empty
    ({**queue("team-a"), "spec": {}}, ("gpu", "8", "0", "limit")),  # no resources at all
    (open_queue("team-a", cpu=(-1, 1999)), ("cpu", "2000", "1999", "limit")),
    (open_queue("team-a", memory=(-1, 2147)), ("memory", "2147.483648", "2147", "limit")),
    (open_queue("team-a", memory=(-1, 2147.483648)), None),
    (open_queue("team-a", gpu=(-1, 1), cpu=(-1, 1)), ("gpu", "8", "1", "limit")),  # GPU is checked first
    (open_queue("team-a", gpu=(2, -1)), None),  # a quota binds only non-preemptible gangs
], ids=["unlimited", "equal-fits", "over", "fractional-limit", "zero", "unset-limit", "empty-section",
        "no-resources", "cpu-millicores", "memory-MB", "memory-equal-fits", "gpu-before-cpu", "quota-ignored"])
def test_limits_of_the_leaf_queue(team_a, expected):
    refusal = verdict([team_a], EIGHT_GPU_NODES)
    if expected is None:
        assert refusal is None
    else:
        assert refusal.kind == "over"
        assert (refusal.resource, refusal.request, refusal.bound, refusal.bound_kind) == (
            expected[0], Decimal(expected[1]), Decimal(expected[2]), expected[3])
        assert f"{refusal.resource} {show(refusal.request)}" in refusal.message
        assert f"the {refusal.bound_kind} {show(refusal.bound)}" in refusal.message and "Queue team-a" in refusal.message


def test_a_resource_the_gang_does_not_request_is_never_over_even_at_zero():
    no_gpus = demand(rjob("node", containers=[container(requests={"cpu": "1"})]))
    assert verdict([open_queue("team-a", gpu=(0, 0), memory=None)], no_gpus) is None


# -- ancestors -------------------------------------------------------------------------------------------------------

def test_an_ancestors_limit_refuses_and_is_named_as_the_ancestor():
    queues = [open_queue("root", gpu=(-1, 4)), open_queue("dept", "root"), open_queue("team-a", "dept")]
    refusal = verdict(queues, EIGHT_GPU_NODES)
    assert (refusal.queue, refusal.bound) == ("team-a", Decimal(4))
    assert "Queue root (an ancestor of team-a)" in refusal.message


def test_the_leaf_is_checked_before_its_ancestors():
    queues = [open_queue("root", gpu=(-1, 4)), open_queue("team-a", "root", gpu=(-1, 6))]
    assert verdict(queues, EIGHT_GPU_NODES).bound == Decimal(6)


def test_a_missing_parent_ends_the_walk_as_in_kai():
    assert verdict([open_queue("team-a", "gone")], EIGHT_GPU_NODES) is None


def test_a_parent_cycle_ends_the_walk():
    queues = [open_queue("team-a", "x"), open_queue("x", "y"), open_queue("y", "x", gpu=(-1, 1))]
    refusal = verdict(queues, EIGHT_GPU_NODES)
    assert refusal.kind == "over" and "Queue y (an ancestor of team-a)" in refusal.message


# -- which queue -----------------------------------------------------------------------------------------------------

def test_a_missing_queue_is_refused():
    refusal = verdict([open_queue("other")], EIGHT_GPU_NODES)
    assert refusal.kind == "missing" and "Queue team-a does not exist" in refusal.message


def test_a_parent_queue_is_refused_naming_its_children():
    refusal = verdict([open_queue("team-a"), open_queue("x", "team-a"), open_queue("y", "team-a")], EIGHT_GPU_NODES)
    assert refusal.kind == "not-leaf" and "parent queue (of x, y)" in refusal.message


# -- non-preemptible gangs and quotas ------------------------------------------------------------------------------

@pytest.mark.parametrize("queues, non_preemptible, expected", [
    ([open_queue("team-a", gpu=(4, -1))], False, None),
    ([open_queue("team-a", gpu=(4, -1))], True, ("quota", "4")),
    ([open_queue("team-a", gpu=(-1, -1))], True, None),
    ([open_queue("team-a", gpu=(0, -1))], True, ("quota", "0")),
    ([open_queue("team-a", gpu=(None, -1))], True, ("quota", "0")),
    ([open_queue("team-a", gpu=(4, 6))], True, ("limit", "6")),  # limits are checked before quotas
    ([open_queue("root", gpu=(2, -1)), open_queue("team-a", "root")], True, ("quota", "2")),
], ids=["preemptible-ignores-quota", "over-quota", "unlimited-quota", "zero-quota", "unset-quota",
        "limit-first", "ancestor-quota"])
def test_quotas_bind_non_preemptible_gangs(queues, non_preemptible, expected):
    refusal = verdict(queues, EIGHT_GPU_NODES, non_preemptible=non_preemptible)
    if expected is None:
        assert refusal is None
    else:
        assert (refusal.bound_kind, refusal.bound) == (expected[0], Decimal(expected[1]))
        if expected[0] == "quota":
            assert "non-preemptible gang may not exceed quota" in refusal.message


# -- what KAI sees of a pod ----------------------------------------------------------------------------------------

def test_gpus_given_only_as_limits_count_for_kai_and_the_message_says_so():
    only_limits = demand(rjob("node", containers=[container(requests={"cpu": "1"}, limits={"nvidia.com/gpu": "2"})]),
                         num_nodes=3)
    refusal = verdict([open_queue("team-a", gpu=(-1, 4))], only_limits)
    assert (refusal.resource, refusal.request) == ("gpu", Decimal(6))
    assert "6 GPUs of it are limits without requests" in refusal.message
    assert "Trainer's minResources does not" in refusal.message


def test_a_limit_does_not_replace_a_request_that_is_set():
    both = demand(rjob("node", containers=[container(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1",
                                                                                              "cpu": "2"})]))
    (gang,) = both
    assert (gang.request("gpu"), gang.request("cpu"), gang.request("cpu", "trainer")) == (1, 2000, 0)


def test_pod_level_limits_fill_pod_level_requests():
    pod = demand(rjob("node", containers=[container(requests={"cpu": "1"})],
                      pod_spec={"resources": {"limits": {"cpu": "3", "memory": "1G"}}}))
    (gang,) = pod
    assert (gang.request("cpu"), gang.request("memory")) == (3000, 1000)


def test_sidecars_and_init_containers_count_as_kubernetes_counts_them():
    with_init = demand(rjob("node", containers=[container(requests={"nvidia.com/gpu": "1"})],
                            init_containers=[container("fetch", limits={"nvidia.com/gpu": "2"})]))
    (gang,) = with_init
    assert gang.request("gpu") == 2  # the init container's peak, its limit copied into its request


# -- the first minMember pods ----------------------------------------------------------------------------------------

def test_stages_are_checked_each_on_its_own_not_summed():
    staged = demand(rjob("model-initializer", ancestor="model-initializer",
                         containers=[container(requests={"nvidia.com/gpu": "1"})]),
                    gpu_node(4, depends_on=["model-initializer"]), num_nodes=2)
    assert verdict([open_queue("team-a", gpu=(-1, 8))], staged) is None  # 1 then 8, never 9 at once
    refusal = verdict([open_queue("team-a", gpu=(-1, 7))], staged)
    assert refusal.request == 8 and "stage node: its 2 pods" in refusal.message


def test_a_flat_gang_sums_its_pod_sets():
    flat = demand(rjob("launcher", ancestor=None, containers=[container(requests={"nvidia.com/gpu": "1"})]),
                  gpu_node(4), num_nodes=2)
    refusal = verdict([open_queue("team-a", gpu=(-1, 8))], flat)
    assert refusal.request == 9 and "its 3 pods" in refusal.message


def test_with_replicas_every_pod_that_exists_is_held_against_the_limit():
    """Trainer's minMember leaves replicas out; KAI's minMember counts every pod, so all of them must fit at once."""
    flat = demand({**rjob("worker", ancestor=None, parallelism=3, containers=[container(requests={"cpu": "1"})]),
                   "replicas": 2},
                  rjob("chief", ancestor=None, containers=[container(requests={"nvidia.com/gpu": "8"})]),
                  ml_policy=None)
    (gang,) = flat
    assert gang.min_member == 7 and gang.request("gpu") == 8 and gang.request("cpu") == 6000


@pytest.mark.parametrize("value, text", [
    (Decimal("16"), "16"), (Decimal("16.000"), "16"), (Decimal("68719.476736"), "68719.477"),
    (Decimal("0.5"), "0.5"), (Decimal("0.000001"), "0.000001"),
])
def test_amounts_are_shown_briefly(value, text):
    assert show(value) == text
