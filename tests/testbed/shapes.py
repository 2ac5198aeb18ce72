"""Hypothesis strategies for (TrainJob, runtime) pairs in every shape Trainer's pod-set arithmetic distinguishes.

Runtimes: torch, mpi (launcher as node or not), jax, xgboost, or no mlPolicy; initializers that the trainer
``dependsOn``; an unlabelled extra job; sidecars, init containers, overhead, pod-level resources. TrainJobs:
``numNodes`` (0 included), ``resourcesPerNode`` and ``runtimePatches`` (labels, env, the ancestor label moved, and
fields a patch cannot carry, which the CRD prunes). Only shapes Trainer admits are drawn, so any difference from its
code is kai_fn's.
"""
from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
NAMESPACE = "team-a"
UID = "0b7c3f0e-5d1a-4c2e-9f3b-2a6d8e4c1b7f"

_QUANTITIES = {
    "cpu": st.one_of(st.integers(1, 64).map(str), st.integers(1, 16000).map(lambda m: f"{m}m")),
    "memory": st.one_of(
        st.integers(1, 512).map(lambda n: f"{n}Mi"),
        st.integers(1, 64).map(lambda n: f"{n}Gi"),
        st.integers(1, 4000).map(lambda n: f"{n}M"),
    ),
    "nvidia.com/gpu": st.integers(0, 8).map(str),
    "ephemeral-storage": st.integers(1, 100).map(lambda n: f"{n}Gi"),
    "hugepages-2Mi": st.integers(1, 8).map(lambda n: f"{2 * n}Mi"),
}


def resource_list(names: tuple[str, ...] = tuple(_QUANTITIES), min_size: int = 0) -> st.SearchStrategy[dict[str, str]]:
    return st.lists(st.sampled_from(names), unique=True, min_size=min_size, max_size=3).flatmap(
        lambda keys: st.fixed_dictionaries({k: _QUANTITIES[k] for k in keys})
    )


def requirements() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={"requests": resource_list(), "limits": resource_list()})


def container(name: str, sidecar: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    base = {"name": st.just(name), "image": st.just("example.com/train:1")}
    if sidecar:
        base["restartPolicy"] = st.just("Always")
    return st.fixed_dictionaries(base, optional={"resources": requirements()})


@st.composite
def pod_spec(draw: st.DrawFn, main: str) -> dict[str, Any]:
    containers = [draw(container(main))]
    containers += [draw(container(f"helper-{i}")) for i in range(draw(st.integers(0, 2)))]
    spec: dict[str, Any] = {"containers": containers}
    kinds = draw(st.lists(st.booleans(), max_size=3))  # True: sidecar (restartPolicy Always), False: ordinary
    if kinds:
        spec["initContainers"] = [draw(container(f"init-{i}", sidecar)) for i, sidecar in enumerate(kinds)]
    if draw(st.booleans()):
        spec["overhead"] = draw(resource_list(("cpu", "memory")))
    if draw(st.integers(0, 4)) == 0:
        spec["resources"] = {"requests": draw(resource_list(("cpu", "memory", "nvidia.com/gpu", "hugepages-2Mi")))}
    return spec


@st.composite
def replicated_job(draw: st.DrawFn, name: str, main: str, ancestor: str | None,
                   depends_on: list[dict[str, str]]) -> dict[str, Any]:
    job_spec: dict[str, Any] = {"template": {"spec": draw(pod_spec(main))}}
    if draw(st.booleans()):
        job_spec["parallelism"] = draw(st.integers(0, 4))
    template: dict[str, Any] = {"spec": job_spec}
    if ancestor:
        template["metadata"] = {"labels": {ANCESTOR: ancestor}}
    rj: dict[str, Any] = {"name": name, "template": template}
    if depends_on:
        rj["dependsOn"] = depends_on
    if draw(st.integers(0, 3)) == 0:
        rj["replicas"] = draw(st.integers(1, 3))
    return rj


ML_POLICIES = ("torch", "mpi", "mpi-launcher-as-node", "jax", "xgboost", "plain")


@st.composite
def runtime(draw: st.DrawFn, kind: str, name: str) -> dict[str, Any]:
    """A runtime with ``podGroupPolicy`` left out: each side adds the policy it acts on."""
    policy = draw(st.sampled_from(ML_POLICIES))
    jobs: list[dict[str, Any]] = []
    initializers = draw(st.lists(st.sampled_from(["dataset-initializer", "model-initializer"]), unique=True))
    for init in initializers:
        jobs.append(draw(replicated_job(init, init, init, [])))
    after_init = [{"name": i, "status": "Complete"} for i in initializers]
    if policy.startswith("mpi"):
        node_label = draw(st.sampled_from([None, None, "trainer"]))  # upstream's MPI runtimes leave node unlabelled
        mpi_jobs = [draw(replicated_job("launcher", "node", "trainer", [])),
                    draw(replicated_job("node", "node", node_label, after_init))]
        jobs += mpi_jobs[::-1] if draw(st.booleans()) else mpi_jobs
    else:
        label = "trainer" if draw(st.integers(0, 5)) else None
        jobs.append(draw(replicated_job("node", "node", label, after_init)))
    if draw(st.integers(0, 3)) == 0:
        jobs.insert(draw(st.integers(0, len(jobs))), draw(replicated_job("extra", "worker", None, [])))

    ml: dict[str, Any] = {}
    if draw(st.booleans()):
        ml["numNodes"] = draw(st.integers(1, 6))
    if policy == "torch":
        ml["torch"] = {"numProcPerNode": draw(st.sampled_from(["auto", "cpu", 2]))}
    elif policy.startswith("mpi"):
        ml["mpi"] = {"numProcPerNode": draw(st.integers(1, 4)), "runLauncherAsNode": policy == "mpi-launcher-as-node"}
    elif policy == "jax":
        ml["jax"] = {}
    elif policy == "xgboost":
        ml["xgboost"] = {}
    spec: dict[str, Any] = {"template": {"spec": {"replicatedJobs": jobs}}}
    if policy != "plain" or ml:
        spec["mlPolicy"] = ml
    meta: dict[str, Any] = {"name": name}
    if kind == "TrainingRuntime":
        meta["namespace"] = NAMESPACE
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


@st.composite
def runtime_patch(draw: st.DrawFn, rt: dict[str, Any], manager: str) -> dict[str, Any]:
    jobs = rt["spec"]["template"]["spec"]["replicatedJobs"]
    patches = []
    for rj in draw(st.lists(st.sampled_from(jobs), unique_by=lambda j: j["name"], min_size=1, max_size=2)):
        pod = rj["template"]["spec"]["template"]["spec"]
        template: dict[str, Any] = {}
        if draw(st.integers(0, 3)) == 0:
            template["metadata"] = {"labels": {ANCESTOR: "trainer"}}
        pod_patch: dict[str, Any] = {"nodeSelector": {"pool": draw(st.sampled_from(["a", "b"]))}}
        target = draw(st.sampled_from(pod["containers"]))["name"]
        container_patch: dict[str, Any] = {"name": target}
        if target not in ("node", "dataset-initializer", "model-initializer"):
            container_patch["env"] = [{"name": "PATCHED", "value": "1"}]
        if draw(st.integers(0, 3)) == 0:  # not patchable: the CRD prunes it, Trainer's patch type has no such field
            container_patch["resources"] = draw(requirements())
        pod_patch["containers"] = [container_patch]
        template["spec"] = {"template": {"metadata": {"labels": {"patched-by": manager}}, "spec": pod_patch}}
        if draw(st.integers(0, 3)) == 0:  # not patchable either
            template["spec"]["parallelism"] = draw(st.integers(0, 5))
        patches.append({"name": rj["name"], "template": template})
    return {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": patches}}}}


@st.composite
def case(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """(TrainJob, runtime) as a user would submit them, the runtime without a podGroupPolicy."""
    kind = draw(st.sampled_from(["ClusterTrainingRuntime", "TrainingRuntime"]))
    rt = draw(runtime(kind, "shape"))
    trainer: dict[str, Any] = {}
    if draw(st.booleans()):
        trainer["numNodes"] = draw(st.integers(0, 6))
    if draw(st.booleans()):
        trainer["resourcesPerNode"] = draw(st.fixed_dictionaries(
            {"requests": resource_list(min_size=1)}, optional={"limits": resource_list()}))
    spec: dict[str, Any] = {"suspend": True, "runtimeRef": {"name": "shape", "kind": kind}}
    if trainer:
        spec["trainer"] = trainer
    if draw(st.integers(0, 2)) == 0:
        spec["runtimePatches"] = [draw(runtime_patch(rt, f"example.com/m{i}")) for i in range(draw(st.integers(1, 2)))]
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "shape", "namespace": NAMESPACE, "uid": UID},
        "spec": spec,
    }
    return job, rt
