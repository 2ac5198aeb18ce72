"""Scenario 2 on Coscheduling (scheduler-plugins flavor), staged initializers: with a dependsOn runtime the dataset
initializer runs and completes first; the trainer pods then bind as one gang of the main wave (the flavor gangs
that wave only, kai_fn/core/stages.py), with no deadlock. On KAI every shape is test_scenario_2_shapes.py."""
from __future__ import annotations

import pytest

from tests.chain.conftest import wait_for
from tests.chain.gangs import SP_LABEL, bound, podgroup, pods, table

pytestmark = pytest.mark.flavor("scheduler-plugins")


def test_the_initializer_completes_then_the_trainer_pods_bind_as_one_gang(chain, pool, namespaces):
    pool("staged").ensure("4x8")
    ns = namespaces("staged")
    chain.runtime(ns, staged=True, pool="staged")
    chain.trainjob(ns, "tj", num_nodes=4)
    seen = lambda: table(chain, ns)  # noqa: E731

    group = wait_for("kai_fn makes the PodGroup", lambda: podgroup(chain, ns, "tj"), explain=seen)
    assert group["spec"]["minMember"] == 4  # the trainer stage, not the initializer
    init = wait_for("the dataset initializer completes",
                    lambda: (ps := pods(chain, ns, "tj", "dataset-initializer")) and
                    all(p.status.phase == "Succeeded" for p in ps) and ps, explain=seen)
    assert all(SP_LABEL not in p.metadata.labels for p in init)
    trainers = wait_for("the 4 trainer pods bind and run",
                        lambda: len(bound(ps := pods(chain, ns, "tj"))) == 4 and
                        all(p.status.phase == "Running" for p in ps) and ps, explain=seen)
    assert all(p.metadata.labels.get(SP_LABEL) == "tj" for p in trainers)
    finished = max(c.last_transition_time for p in init for c in p.status.conditions or [] if c.type == "Ready")
    assert all(p.metadata.creation_timestamp >= finished for p in trainers), \
        "trainer pods existed before the initializer finished: dependsOn was not honoured"
