"""Start waves: which replicatedJobs KAI can gang together, and which wave is the main gang."""
from __future__ import annotations

import pytest

from kai_fn.core.podsets import pod_sets
from kai_fn.core.stages import MAX_CHAIN, chain_depth, is_stage_of, stages, waves
from tests.builders import rjob, runtime, trainjob, typed


def sets_of(*jobs, ml_policy=None):
    return pod_sets(*typed(trainjob(), runtime(*jobs, ml_policy=ml_policy)))


WAVES = [
    pytest.param([rjob("node")], {"node": 0}, id="flat"),
    pytest.param([rjob("a", ancestor=None), rjob("b", ancestor=None), rjob("node", depends_on=["a", "b"])],
                 {"a": 0, "b": 0, "node": 1}, id="two-initializers-then-trainer"),
    pytest.param([rjob("a", ancestor=None), rjob("b", ancestor=None, depends_on=["a"]),
                  rjob("node", depends_on=["a", "b"])], {"a": 0, "b": 1, "node": 2}, id="the-latest-dependency-counts"),
    pytest.param([rjob("node", depends_on=["missing"])], {"node": 0}, id="an-unknown-name-is-ignored"),
    pytest.param([rjob("a", ancestor=None, depends_on=["node"]), rjob("node", depends_on=["a"])],
                 {"a": 1, "node": 0}, id="a-cycle-terminates"),
    pytest.param([rjob("a", ancestor=None), rjob("node", depends_on=["a", "node"])], {"a": 0, "node": 1},
                 id="a-job-waiting-for-itself-is-ignored"),
]


@pytest.mark.parametrize("jobs, expected", WAVES)
def test_a_job_starts_one_wave_after_the_latest_it_depends_on(jobs, expected):
    assert waves(sets_of(*jobs)) == expected


MAIN = [
    pytest.param([rjob("init", ancestor="dataset-initializer"), rjob("node", depends_on=["init"])], ("node",),
                 id="the-node-job"),
    pytest.param([rjob("trainer", ancestor="trainer"), rjob("after", ancestor=None, depends_on=["trainer"])],
                 ("trainer",), id="else-the-first-trainer-ancestor"),
    pytest.param([rjob("a", ancestor=None), rjob("b", ancestor=None, depends_on=["a"])], ("b",), id="else-the-last-wave"),
]


@pytest.mark.parametrize("jobs, main", MAIN)
def test_exactly_one_wave_is_the_main_gang(jobs, main):
    found = stages(sets_of(*jobs))
    assert [s.names for s in found if s.main] == [main]


def test_stage_podgroups_are_named_after_the_main_one():
    initializers, main = stages(sets_of(rjob("init", ancestor=None), rjob("node", depends_on=["init"])))
    assert (initializers.podgroup_name("pg-x"), main.podgroup_name("pg-x")) == ("pg-x-stage-0", "pg-x")
    assert is_stage_of("pg-x-stage-0", "pg-x") and not is_stage_of("pg-x", "pg-x") and not is_stage_of("pg-xy", "pg-x")


def _chain(links: int):
    jobs = [rjob("s0", ancestor=None)]
    jobs += [rjob(f"s{i}", ancestor=None, depends_on=[f"s{i - 1}"]) for i in range(1, links)]
    return [*jobs, rjob("node", depends_on=[f"s{links - 1}"])]


@pytest.mark.parametrize("links", [0, 1, MAX_CHAIN, MAX_CHAIN + 1])
def test_chain_depth_counts_the_longest_run_of_dependson(links):
    jobs = _chain(links) if links else [rjob("node")]
    assert chain_depth(sets_of(*jobs)) == links


def test_a_diamond_is_as_deep_as_its_longest_side():
    jobs = [rjob("a", ancestor=None), rjob("b", ancestor=None, depends_on=["a"]), rjob("node", depends_on=["a", "b"])]
    assert chain_depth(sets_of(*jobs)) == 2
