"""Scenario 1, all or nothing: a TrainJob of 4 nodes x 8 GPUs on a pool with 3 free nodes gets its PodGroup and all 4
trainer pods, none bound, while the gang scheduler says why it waits (KAI: its PodGroup's schedulingConditions); a
fourth node makes all 4 bind. The TrainJob's owner is told ``GangBound`` once, when the whole gang is bound, and not
before. The same for both gang schedulers: KAI (kai flavor) and Coscheduling (scheduler-plugins flavor).
Without a gang (default-scheduler), the same pods on 3 nodes: 3 bind and hold 24 GPUs, the fourth waits."""
from __future__ import annotations

import pytest

from kai_fn.core import keys
from tests.chain.conftest import REPORT, wait_for
from tests.chain.gangs import (SP_LABEL, bound, group_of, kai_reasons, podgroup, podgroup_annotations, pods, spread,
                               table, trainjob_events, tried)

FLAVORS = [pytest.param("kai", id="kai"),
           pytest.param("scheduler-plugins", id="scheduler-plugins", marks=pytest.mark.flavor("scheduler-plugins"))]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_gang_binds_whole_only_once_the_fourth_node_is_there(flavor, chain, pool, namespaces):
    nodes = pool(f"aon-{flavor[:3]}")
    nodes.ensure("3x8")
    ns = namespaces("aon")
    chain.runtime(ns, pool=nodes.name)
    chain.trainjob(ns, "tj", num_nodes=4)
    seen = lambda: table(chain, ns)  # noqa: E731

    group = wait_for("kai_fn makes the PodGroup", lambda: podgroup(chain, ns, "tj"), explain=seen)
    assert group["spec"]["minMember"] == 4
    trainers = wait_for("Trainer's 4 trainer pods exist and the scheduler tried each",
                        lambda: (ps := pods(chain, ns, "tj")) and len(ps) == 4 and tried(ps) and ps, explain=seen)
    assert {group_of(p) for p in trainers} == {group["metadata"]["name"]}
    assert bound(trainers) == [], "a gang of 4 pods must not bind in part on 3 nodes"
    if flavor == "kai":
        why = wait_for("KAI says why the gang waits", lambda: kai_reasons(podgroup(chain, ns, "tj")), explain=seen)
        REPORT.append(f"all-or-nothing (kai): KAI's reason while 3 nodes: {why}")
    assert "GangBound" not in trainjob_events(chain, ns, "tj")

    nodes.ensure("4x8")
    trainers = wait_for("all 4 trainer pods bind after the 4th node",
                        lambda: len(bound(ps := pods(chain, ns, "tj"))) == 4 and ps, explain=seen)
    assert len({p.spec.node_name for p in trainers}) == 4
    # Coscheduling changes nothing on its PodGroup's spec when it binds: the resync ping (10 s here) may see it first.
    wait_for("kai_fn tells the TrainJob GangBound", lambda: "GangBound" in trainjob_events(chain, ns, "tj"),
             deadline_s=90, explain=lambda: f"events: {trainjob_events(chain, ns, 'tj')}")
    assert trainjob_events(chain, ns, "tj").count("GangBound") == 1
    assert keys.GANG_BOUND_ANNOTATION in podgroup_annotations(chain, ns, "tj")
    REPORT.append(f"all-or-nothing ({flavor}): the 4 pods bound within {spread(trainers):.0f} s of each other "
                  "(PodScheduled timestamps, whole seconds)")


def test_without_a_gang_three_pods_hold_their_gpus_and_the_fourth_waits(chain, pool, namespaces):
    pool("plain").ensure("3x8")
    ns = namespaces("plain", enabled=False)  # out of kai_fn's sight: no policy, no events
    chain.runtime(ns, pool="plain", scheduler="default-scheduler")
    chain.trainjob(ns, "tj", num_nodes=4)
    trainers = wait_for("4 trainer pods exist and default-scheduler tried each",
                        lambda: (ps := pods(chain, ns, "tj")) and len(ps) == 4 and tried(ps) and ps,
                        explain=lambda: table(chain, ns))
    assert len(bound(trainers)) == 3
    assert podgroup(chain, ns, "tj") is None and not any(group_of(p) for p in trainers)
    assert not any(SP_LABEL in p.metadata.labels for p in trainers)
