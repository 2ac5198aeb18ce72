"""The chain tier: the testbed with Trainer in-process, KAI Scheduler, kube-scheduler with Coscheduling, kwok and
simulated GPU nodes (``./run.sh cluster up --chain --without-kai-fn``), and kai_fn running on it as a cluster runs it
(kai_fn/local/chain.py), in the kai flavor unless a test is marked ``flavor("scheduler-plugins")``.

Every test under tests/chain is marked ``chain``. One chain per session; scenarios keep to their own namespaces and
to their own simnodes pools (nodes ``<pool>-N`` labelled ``kai-fn.testbed/pool=<pool>``), and delete both.
The chain's function and sources live from the first scenario to the end of the session, one flavor at a time (a
test of the other flavor switches them); a test that runs its own function (test_plain_submission.py) must run
before them, hence the scenario files' names (test_scenario_N_*.py sort after it).
Figures worth reading (binding spread, timings) are printed in the terminal summary, never asserted.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from kubernetes import client

from kai_fn.local.chain import Chain, running
from tests.chain.gangs import QUEUE_API
from tests.testbed.conftest import SKIPPED, LiveCluster, before_stop, live_cluster, wait_for  # noqa: F401

HERE = Path(__file__).resolve().parent
REPORT: list[str] = []
collect_ignore_glob = ["test_*.py"] if SKIPPED else []  # tests/testbed/conftest.py says why, in one line


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the tier, and runs last the tests that need kai_fn restarted with other settings (the staleness pair)
    and then those of the other flavor: each switch restarts the function and its sources (about 8 s)."""
    ours = [i for i, item in enumerate(items) if HERE in Path(item.fspath).parents]
    for i in ours:
        items[i].add_marker(pytest.mark.chain)

    def switches(item: pytest.Item) -> int:
        if item.get_closest_marker("flavor"):
            return 2
        return 1 if "test_long_initializers_and_trainers_finishing_apart" in item.name else 0

    for i, item in zip(ours, sorted((items[i] for i in ours), key=switches)):
        items[i] = item


def pytest_terminal_summary(terminalreporter) -> None:
    if REPORT:
        terminalreporter.section("chain figures")
        for line in REPORT:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def chain_testbed(pytestconfig: pytest.Config) -> Iterator[LiveCluster]:
    started = live_cluster(pytestconfig, "--chain", "--without-kai-fn")
    cluster = next(started)
    try:
        if "trainer" not in cluster.kubectl("get", "validatingwebhookconfigurations", "-o", "name").stdout:
            pytest.fail("a testbed without Trainer is running (not started by this run): "
                        "./run.sh cluster down, then run the chain tier again", pytrace=False)
        yield cluster
    finally:
        started.close()


# A timed-out gang is suspended again (only TrainJobs annotated kai-fn/schedule-timeout-seconds have a timeout here).
SETTINGS = {"KAI_FN_ON_TIMEOUT": "suspend"}


class Chains:
    """kai_fn on the chain in one flavor (and set of settings) at a time: function process, event sources, admission
    policy."""

    def __init__(self, testbed: LiveCluster) -> None:
        self.testbed, self.stack, self.current, self.settings = testbed, ExitStack(), None, dict(SETTINGS)

    def use(self, flavor: str, replicas: int = 1, **settings: str) -> Chain:
        wanted = SETTINGS | settings
        if (self.current is None or self.current.flavor != flavor or self.settings != wanted
                or len(self.current.replicas) + 1 != replicas):
            self.close()
            self.current = self.stack.enter_context(running(self.testbed.kubeconfig, flavor=flavor, ping_seconds=10,
                                                            settings=wanted, replicas=replicas))
            self.settings = wanted
        return self.current

    def close(self) -> None:
        self.stack.close()
        self.current = None


@pytest.fixture(scope="session")
def chains(chain_testbed: LiveCluster) -> Iterator[Chains]:
    held = Chains(chain_testbed)
    before_stop(held.close)
    try:
        yield held
    finally:
        held.close()


@pytest.fixture
def chain(chains: Chains, request: pytest.FixtureRequest) -> Chain:
    """kai_fn in the test's flavor: ``kai``, or the ``flavor`` marker's."""
    marker = request.node.get_closest_marker("flavor")
    return chains.use(marker.args[0] if marker else "kai")


class Pool:
    """A set of simulated GPU nodes of a scenario's own (nodes ``<name>-N``)."""

    def __init__(self, chain: Chain, name: str) -> None:
        self.chain, self.name = chain, name

    def ensure(self, spec: str) -> None:
        self.chain.nodes(spec, self.name)

    def delete(self) -> None:
        self.chain.delete_nodes(self.name)


@pytest.fixture
def pool(chain: Chain) -> Iterator[Callable[[str], Pool]]:
    made: list[Pool] = []

    def make(name: str) -> Pool:
        p = Pool(chain, name)
        p.delete()  # a previous run's leftovers
        made.append(p)
        return p

    yield make
    for p in made:
        p.delete()


@pytest.fixture
def queues(chain: Chain) -> Iterator[Callable[[dict], str]]:
    """Creates KAI Queues (tests.chain.gangs.queue) for one test, deleted afterwards, leaves first. Ask for it before
    ``namespaces``, so the namespaces (and their PodGroups) go first: KAI logs errors for a PodGroup whose Queue
    is gone."""
    objs, made = client.CustomObjectsApi(chain.api), []

    def make(body: dict) -> str:
        objs.create_cluster_custom_object(*QUEUE_API, body)
        made.append(body["metadata"]["name"])
        return made[-1]

    yield make
    for name in reversed(made):
        objs.delete_cluster_custom_object(*QUEUE_API, name)


@pytest.fixture
def namespaces(chains: Chains, chain: Chain) -> Iterator[Callable[..., str]]:
    """Makes namespaces with the chain running when called: a test may switch settings (``chains.use``) after its
    fixtures were made, and the chain they were made with is gone by then (its adapters would never watch)."""
    made: list[str] = []

    def make(prefix: str, *, enabled: bool = True) -> str:
        made.append((chains.current or chain).namespace(prefix, enabled=enabled))
        return made[-1]

    yield make
    for ns in made:  # their pods go before the pool's nodes: Testbed.delete_nodes sees to it
        client.CoreV1Api(chains.testbed.api).delete_namespace(ns)


