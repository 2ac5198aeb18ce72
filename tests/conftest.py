"""Fixtures: the kmock API emulator with CRD validation, and the real function server pointed at it; the real
tiers skipped, saying why, without Go."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_fn.local.emulator import KINDS, Emulator
from kai_fn.local.process import REPO, FunctionProcess
from tests import crds
from tests.testbed.conftest import GO_MISSING, NO_GO

REAL_TIERS = (Path(__file__).resolve().parent / "testbed", Path(__file__).resolve().parent / "chain")

TRAINER = "trainer.kubeflow.org/v1alpha1"
JOBSET = "jobset.x-k8s.io/v1alpha2"
KAI_PG = "scheduling.run.ai/v2alpha2"
SP_PG = "scheduling.x-k8s.io/v1alpha1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without Go (and unless KAI_FN_REQUIRE_TESTBED=1, as in CI, where they must run and fail), the real tiers are
    collected and skipped with the reason, so that "N passed" is read beside "M skipped", not instead of it."""
    if GO_MISSING:
        for item in items:
            if any(tier in Path(item.fspath).parents for tier in REAL_TIERS):
                item.add_marker(pytest.mark.skip(reason=NO_GO))


def pytest_terminal_summary(terminalreporter) -> None:
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if NO_GO in str(r.longrepr)]
    if skipped:
        terminalreporter.write_line(f"{len(skipped)} real-tier tests skipped: {NO_GO}")


def crd_validator(obj: dict[str, Any]) -> list[str]:
    """What the API server's CRD validation would say; core kinds (Events) pass."""
    return crds.errors(obj) if crds.known(obj) else []


@pytest.fixture(scope="session")
def emulator() -> Iterator[Emulator]:
    crds.errors({"apiVersion": KAI_PG, "kind": "PodGroup"})  # load the CRDs now, not inside a timed API call
    with Emulator(validate=crd_validator) as api:
        yield api


# The namespaces the emulator tiers' tests work in, labelled kai-fn.io/enabled=true as an administrator opts one in:
# kai_fn acts nowhere else (kai_fn/function/optin.py). A test that works in another opts it in (Emulator.opt_in), and
# one that needs a namespace that did not opt in names one not here.
OPTED_IN = ("team-a", "team-b", "ns", "rel-fuzz")


@pytest.fixture
def api(emulator: Emulator) -> Iterator[Emulator]:
    """The emulator with only the opted-in namespaces (``OPTED_IN``), no faults and an empty request log."""
    _wipe(emulator)
    emulator.opt_in(*OPTED_IN)
    yield emulator
    emulator.faults = None
    _wipe(emulator)


def _wipe(api: Emulator) -> None:
    api.faults = None
    for (api_version, kind), info in KINDS.items():
        for obj in api.list(api_version, kind):
            api.delete(api_version, kind, obj["metadata"].get("namespace") if info.namespaced else None,
                       obj["metadata"]["name"])
    api.reset_calls()


class Functions:
    """Real function servers, one per distinct setting set, started once per session."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self.running: dict[tuple[tuple[str, str], ...], FunctionProcess] = {}

    def __call__(self, **settings: str) -> FunctionProcess:
        # Each answer says how its event's work went: the per-delivery contract these tiers test. The workers that
        # answer first and work after (KAI_FN_BACKGROUND_WORKERS, on in knative/base) have test_background_work.py.
        # The opted-in namespaces are read afresh for each piece of work: the processes outlive a test, and the next
        # test may opt in a namespace of its own.
        env = {"KAI_FN_RUNTIME_CACHE_SECONDS": "0", "KAI_FN_API_TIMEOUT_SECONDS": "1", "KAI_FN_BACKGROUND_WORKERS": "0",
               "KAI_FN_NAMESPACE_CACHE_SECONDS": "0", **settings}
        key = tuple(sorted(env.items()))
        if key not in self.running:
            self.running[key] = FunctionProcess({"KUBECONFIG": self.emulator.kubeconfig, **env}).start()
        return self.running[key]

    def stop(self) -> None:
        for proc in self.running.values():
            proc.kill()  # the end of the session: nothing left to finish (a SIGTERM would drain each work queue)

    def forget(self) -> None:
        """Kill every server: the next call starts it afresh. A process remembers the TrainJob uids whose JobSet it
        decided (kai_fn.function.recent), and the next test seeds objects with the same uids."""
        self.stop()
        self.running.clear()


@pytest.fixture(scope="session")
def functions(emulator: Emulator) -> Iterator[Functions]:
    servers = Functions(emulator)
    yield servers
    servers.stop()


@pytest.fixture
def function(functions: Functions, api: Emulator) -> FunctionProcess:
    """The function with default settings (but no runtime or namespace cache, a 1 s API timeout, and every event
    reconciled before its answer), on an empty cluster."""
    return functions()


@pytest.fixture
def forgetful(functions: Functions) -> Iterator[None]:
    """Before and after the test, the function servers are started afresh (see Functions.forget): use it in modules
    whose tests decide TrainJobs of the samples' uids, which every test (of any module) may seed again."""
    functions.forget()
    yield
    functions.forget()


def resync_lists(opted: tuple[str, ...] = OPTED_IN) -> list[tuple[str, str]]:
    """The resync's LISTs (kai_fn/function/inventory.py), the namespace cache off as in ``functions``: the opted-in
    namespaces, then the TrainJobs and the JobSets of each, then kai_fn's PodGroups."""
    return [("list", "namespaces"), *[("list", "trainjobs")] * len(opted), *[("list", "jobsets")] * len(opted),
            ("list", "podgroups")]


def opt_in_read(call: Any) -> bool:
    """The LIST of the opted-in namespaces: once per process and per TTL (kai_fn/function/optin.py), not the cost
    of the event that happened to make it."""
    return (call.verb, call.resource) == ("list", "namespaces")


def moved(api: Emulator, source: str, target: str) -> None:
    """The TrainJobs, JobSets, PodGroups and pods of namespace ``source`` moved to ``target``, uids and owners kept: as
    if made there."""
    for api_version, kind in ((TRAINER, "TrainJob"), (JOBSET, "JobSet"), (KAI_PG, "PodGroup"), ("v1", "Pod")):
        for obj in api.list(api_version, kind, source):
            api.delete(api_version, kind, source, obj["metadata"]["name"])
            obj["metadata"]["namespace"] = target
            del obj["metadata"]["resourceVersion"]
            api.put(obj)


def sample_object(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "samples" / "cluster" / f"{name}.yaml").read_text())


def seed(api: Emulator, *objects: dict[str, Any]) -> list[dict[str, Any]]:
    return [api.put(copy.deepcopy(o)) for o in objects]
