"""One scenario table, two backends: the emulator tier and the real testbed must give the same HTTP statuses, the
same outcomes and the same stored objects (normalized: no uids, resourceVersions, timestamps or managedFields).

Each scenario seeds the same objects on both sides from the shipped samples (a ClusterTrainingRuntime, a Queue, the
TrainJob as submitted, and the JobSet Trainer would make, owned by it, as the admission policy holds it: suspended,
labelled ``kai-fn/held``), sends CloudEvents as the ApiServerSource adapters do, checks its expected outcome, and
records the normalized stored objects; the parity test then requires the two records to be equal.
"""
from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.ce import ping, ref, resource, send
from tests.conftest import sample_object
from tests.testbed.parity import (JOBSET, KAI_PG, SP_PG, TRAINER, EmulatorBackend, LiveBackend, normalized,
                                  stored, versions)
from tests.builders import held_by_0_2

NAME = "llama"
BACKENDS = ["emulator", "testbed"]


@dataclass
class World:
    backend: Any
    ns: str
    tag: str
    trainjob: dict[str, Any] | None = None
    jobset: dict[str, Any] | None = None


def seed(backend: Any, ns: str, tag: str, *, runtime: bool = True, running: bool = False, suspended: bool = False,
         legacy: bool = False, labels: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None) -> World:
    """``running``: a JobSet never held (no policy); ``suspended``: a TrainJob its owner (Kueue) suspended;
    ``legacy``: a TrainJob the earlier policy suspended (before the gate moved to the JobSet), its JobSet suspended
    with it and not held."""
    world = World(backend, ns, tag)
    if runtime:
        rt = sample_object("clustertrainingruntime-torch-kai")
        rt["metadata"]["name"] = f"torch-kai-{tag}"
        backend.create(rt)
    queue = sample_object("queue-team-a")
    queue["metadata"] = {"name": f"q-{tag}"}
    queue["spec"].pop("parentQueue")
    backend.create(queue)
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"] = {"name": NAME, "namespace": ns, "labels": {"kai.scheduler/queue": f"q-{tag}", **(labels or {})}}
    if annotations:
        tj["metadata"]["annotations"] = annotations
    tj["spec"]["runtimeRef"]["name"] = f"torch-kai-{tag}"
    tj["spec"]["suspend"] = suspended or legacy
    if legacy:
        tj["metadata"]["annotations"] = {"kai-fn/auto-suspended": "true"}
    world.trainjob = backend.create(tj)
    js = held_by_0_2(sample_object("jobset-llama-finetune"))
    js["metadata"] = {"name": NAME, "namespace": ns, "labels": js["metadata"]["labels"] | {
        "trainer.kubeflow.org/trainjob-name": NAME}, "ownerReferences": [{
            "apiVersion": TRAINER, "kind": "TrainJob", "name": NAME, "uid": world.trainjob["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}]}
    js["spec"]["suspend"] = not running
    if running or legacy:
        js["metadata"]["labels"].pop("kai-fn/held")
    world.jobset = backend.create(js)
    return world


def add(world: World, url: str) -> list[int]:
    return [send(url, resource(world.trainjob)).status]


def jobset_add(world: World, url: str) -> list[int]:
    """The held JobSet's own event (knative/base/apiserversource-jobsets.yaml): the pass of its TrainJob."""
    return [send(url, resource(world.jobset)).status]


def ref_add(world: World, url: str) -> list[int]:
    return [send(url, ref(world.ns, NAME)).status]


def duplicate_of_done(world: World, url: str) -> list[int]:
    first = send(url, resource(world.trainjob)).status
    done = world.backend.get(TRAINER, "TrainJob", world.ns, NAME)
    before = versions(world.backend, world.ns, NAME)
    second = send(url, resource(done, "update")).status
    assert versions(world.backend, world.ns, NAME) == before, "the duplicate wrote"
    return [first, second]


def stale_add(world: World, url: str) -> list[int]:
    event = resource(world.trainjob)
    world.backend.delete(TRAINER, "TrainJob", world.ns, NAME)
    world.backend.delete(JOBSET, "JobSet", world.ns, NAME)
    return [send(url, event).status]


def resync(world: World, url: str) -> list[int]:
    return [send(url, ping()).status]


def concurrent(world: World, url: str) -> list[int]:
    event = resource(world.trainjob)
    barrier = threading.Barrier(20)
    answers: list[int] = []

    def deliver() -> None:
        barrier.wait()
        answers.append(send(url, event).status)

    threads = [threading.Thread(target=deliver) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return sorted(answers)


@dataclass(frozen=True)
class Scenario:
    act: Callable[[World, str], list[int]]
    statuses: list[int]
    podgroups: list[str]  # apiVersions of the PodGroups left
    suspend: bool | None  # the TrainJob's spec.suspend afterwards; None: no TrainJob
    held: bool | None  # the JobSet still suspended afterwards; None: no JobSet
    reasons: list[str]  # kai-fn's Event reasons
    seeding: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)
    racing: bool = False  # concurrent deliveries: the Event's wording depends on who won


SCENARIOS = {
    "resource-mode add (kai flavor) is done": Scenario(add, [200], [KAI_PG], False, False, ["GangCreated"]),
    "the held JobSet's event is done": Scenario(jobset_add, [200], [KAI_PG], False, False, ["GangCreated"]),
    "ref-mode add is done": Scenario(ref_add, [200], [KAI_PG], False, False, ["GangCreated"]),
    "a duplicate of a done event is skipped with no writes": Scenario(
        duplicate_of_done, [200, 200], [KAI_PG], False, False, ["GangCreated"]),
    "a missing runtime is RuntimeNotFound": Scenario(add, [200], [], False, True, ["RuntimeNotFound"],
                                                     seeding={"runtime": False}),
    "a Kueue-suspended TrainJob gets its gang and stays suspended": Scenario(
        add, [200], [KAI_PG], True, True, ["GangCreated"],
        seeding={"labels": {"kueue.x-k8s.io/queue-name": "lq"}, "suspended": True}),
    "kai-fn/hold gets its gang and its JobSet stays held": Scenario(
        add, [200], [KAI_PG], False, True, ["GangCreated"], seeding={"annotations": {"kai-fn/hold": "true"}}),
    "a stale add of a deleted TrainJob is 200 and ignored": Scenario(stale_add, [200], [], None, None, []),
    "a running JobSet is TooLate": Scenario(add, [200], [], False, False, ["TooLate"], seeding={"running": True}),
    "a resync ping decides a held JobSet": Scenario(resync, [200], [KAI_PG], False, False, ["GangCreated"]),
    "the migration resumes a TrainJob the earlier TrainJob gate suspended": Scenario(
        resync, [200], [KAI_PG], False, True, ["GangCreated"], seeding={"legacy": True}),
    "20 concurrent deliveries make one PodGroup": Scenario(concurrent, [200] * 20, [KAI_PG], False, False,
                                                           ["GangCreated"], racing=True),
    "scheduler-plugins flavor add is done": Scenario(add, [200], [SP_PG], False, False, ["GangCreated"],
                                                     settings={"KAI_PODGROUP_FLAVOR": "scheduler-plugins"}),
}

# Where the emulator and the real API server were found to disagree (xfail strict: fixing it must flip these).
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {}

_records: dict[tuple[str, str], dict[str, Any]] = {}


@pytest.fixture(scope="module")
def testbed_functions() -> Iterator[tuple[ExitStack, dict[Any, Any]]]:
    with ExitStack() as stack:
        yield stack, {}


def backend_for(request: pytest.FixtureRequest, name: str) -> Any:
    if name == "emulator":
        return EmulatorBackend(request.getfixturevalue("api"), request.getfixturevalue("functions"))
    stack, running = request.getfixturevalue("testbed_functions")
    return LiveBackend(request.getfixturevalue("testbed"), stack, running)


def run(request: pytest.FixtureRequest, scenario_id: str, backend_name: str) -> dict[str, Any]:
    """Run one scenario on one backend, check its expected outcome, and return its normalized record."""
    if (scenario_id, backend_name) in _records:
        return _records[scenario_id, backend_name]
    scenario = SCENARIOS[scenario_id]
    backend = backend_for(request, backend_name)
    tag = uuid.uuid4().hex[:8]
    ns = f"parity-{tag}"
    try:
        world = seed(backend, ns, tag, **scenario.seeding)
        url = backend.function_url(**scenario.settings)
        statuses = scenario.act(world, url)
        uid = world.trainjob["metadata"]["uid"] if world.trainjob else None
        state = normalized(stored(backend, ns, NAME), tag, uid)
        if scenario.racing:  # which delivery writes the Event, the creator or one that found it, is the race's
            state["events"] = [[r, t, m.replace(" in place:", " created:")] for r, t, m in state["events"]]
    finally:
        backend.cleanup(ns, tag)
    record = {"statuses": statuses, **state}
    _records[scenario_id, backend_name] = record
    return record


def expected_outcome(scenario: Scenario) -> dict[str, Any]:
    return {"statuses": scenario.statuses, "podgroups": scenario.podgroups, "suspend": scenario.suspend,
            "held": scenario.held, "reasons": scenario.reasons}


def outcome(record: dict[str, Any]) -> dict[str, Any]:
    return {"statuses": record["statuses"], "podgroups": [p["apiVersion"] for p in record["podgroups"]],
            "suspend": record["trainjob"] and record["trainjob"]["suspend"],
            "held": record["jobset"] and record["jobset"]["suspend"],
            "reasons": [reason for reason, _, _ in record["events"]]}


def _cases(with_backend: bool) -> list[Any]:
    out = []
    for sid in SCENARIOS:
        for b in BACKENDS if with_backend else [None]:
            marks = []
            key = (sid, b or "parity")
            if key in KNOWN_DIFFERENCES:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_DIFFERENCES[key]))
            out.append(pytest.param(sid, *([b] if b else []), marks=marks, id=f"{sid}-{b}" if b else sid))
    return out


@pytest.mark.parametrize("scenario_id, backend_name", _cases(True))
def test_each_backend_gives_the_scenarios_expected_outcome(request, scenario_id, backend_name):
    record = run(request, scenario_id, backend_name)
    assert outcome(record) == expected_outcome(SCENARIOS[scenario_id])


@pytest.mark.parametrize("scenario_id", _cases(False))
def test_the_emulator_stores_what_the_real_api_server_stores(request, scenario_id):
    on_emulator = run(request, scenario_id, "emulator")
    on_testbed = run(request, scenario_id, "testbed")
    assert on_emulator == on_testbed
