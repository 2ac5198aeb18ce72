"""The fault burst's checks (kai_fn/local/faultburst.py) on records made by hand: each finds what breaks its rule, so
the chain scenario's empty lists mean something."""
from __future__ import annotations

from kai_fn.local.faultburst import Burst, Job, Record
from kai_fn.local.podwatch import PodSeen

BURST = Burst(jobs=2, namespaces=1, pods=2, blocked_every=2)  # burst-000 binds, burst-001 is refused
GANG, REFUSED = Job("ns", "burst-000", None), Job("ns", "burst-001", "GangExceedsQueue")


def trainjob(name: str) -> dict:
    """As submitted: never suspended, never marked (uid ``u``: its gang is ``pg-<name>-u``)."""
    return {"metadata": {"name": name, "uid": "u"}, "spec": {}}


def jobset(name: str) -> dict:
    """As the admission policy named it: running, never held."""
    return {"metadata": {"name": name, "labels": {"kai-fn/named": "true"}}, "spec": {"suspend": False}}


def pod(name: str, *, node: str | None = "n1", gone: bool = False, group: str = "pg-burst-000-u") -> PodSeen:
    return PodSeen(name, "burst-000", group, 0.0, node=node, bound_at=1.0 if node else None,
                   gone_at=2.0 if gone else None)


def podgroup(name: str, min_member: int = 2, owner: str = "burst-000", kind: str = "TrainJob") -> dict:
    return {"metadata": {"name": name, "ownerReferences": [{"kind": kind, "name": owner}]},
            "spec": {"minMember": min_member}}


def settled_record(**changes) -> Record:
    """A burst that went right: the gang bound whole through KAI, the other refused with its Warning (its pods wait
    unbound: no PodGroup)."""
    record = Record(BURST, [GANG, REFUSED])
    record.trainjobs = {GANG.key: trainjob("burst-000"), REFUSED.key: trainjob("burst-001")}
    record.jobsets = {GANG.key: jobset("burst-000"), REFUSED.key: jobset("burst-001")}
    record.warnings = {REFUSED.key: {"GangExceedsQueue"}}
    record.pods = {GANG.key: [pod("p0"), pod("p1")], REFUSED.key: [pod("r0", node=None, group="pg-burst-001-u")]}
    record.binds = {"ns/p0", "ns/p1"}
    record.podgroups = {"ns/pg-burst-000-u": podgroup("pg-burst-000-u")}
    for key, value in changes.items():
        setattr(record, key, value)
    return record


def test_a_burst_that_went_right_breaks_no_rule():
    record = settled_record()
    assert (record.unsettled(), record.partly_bound(), record.podgroups_per_wave()) == ([], [], [])


def test_a_gang_with_a_pod_left_unbound_is_unsettled_and_partly_bound():
    record = settled_record(pods={GANG.key: [pod("p0"), pod("p1", node=None)]}, binds={"ns/p0"})
    assert record.unsettled() == ["ns/burst-000: 1/2 pods bound"]
    assert record.partly_bound() == ["ns/burst-000: 1/2 pods bound, for a gang of 2"]


def test_a_refused_trainjob_without_its_warning_is_unsettled():
    record = settled_record(warnings={})
    assert record.unsettled() == ["ns/burst-001: no GangExceedsQueue Warning"]


def test_a_bound_pod_that_went_or_was_bound_without_kai_is_outside_a_whole_gang():
    again = [pod("p0", gone=True), pod("p1"), pod("p2")]
    record = settled_record(pods={GANG.key: again}, binds={"ns/p0", "ns/p1"})
    assert record.partly_bound() == ["ns/burst-000: bound pods gone ['p0']",
                                     "ns/burst-000: bound without a BindRequest ['p2']"]


def test_a_pod_made_and_gone_without_ever_being_bound_is_no_part_of_the_gang():
    record = settled_record(pods={GANG.key: [pod("p0"), pod("extra", node=None, gone=True), pod("p1")]})
    assert (record.unsettled(), record.partly_bound(), record.made_again()) == ([], [], 1)


def test_more_pods_bound_than_the_gang_has_is_reported():
    record = settled_record(pods={GANG.key: [pod("p0"), pod("p1"), pod("p2")]}, binds={"ns/p0", "ns/p1", "ns/p2"})
    assert record.partly_bound() == ["ns/burst-000: 3/3 pods bound, for a gang of 2"]


def test_a_gang_bound_in_a_podgroup_smaller_than_itself_is_partly_bound():
    record = settled_record(podgroups={"ns/pg-burst-000-u": podgroup("pg-burst-000-u", min_member=1)})
    assert record.partly_bound() == ["ns/burst-000: bound in PodGroup pg-burst-000-u with minMember 1, not its "
                                     "whole gang of 2"]


def test_a_second_podgroup_for_the_same_trainjob_is_found_whoever_made_it():
    grouper = podgroup("pg-burst-000-jobsetuid", kind="JobSet")
    record = settled_record(podgroups={"ns/pg-burst-000-u": podgroup("pg-burst-000-u"),
                                       "ns/pg-burst-000-jobsetuid": grouper})
    assert record.podgroups_per_wave() == ["ns/burst-000: two PodGroups of wave ['main']: "
                                           "['pg-burst-000-jobsetuid', 'pg-burst-000-u']"]


def test_a_stage_podgroup_is_another_wave_but_a_flat_trainjob_has_only_one():
    record = settled_record(podgroups={"ns/pg-burst-000-u": podgroup("pg-burst-000-u"),
                                       "ns/pg-burst-000-u-stage-0": podgroup("pg-burst-000-u-stage-0")})
    assert record.podgroups_per_wave() == ["ns/burst-000: PodGroups ['pg-burst-000-u', 'pg-burst-000-u-stage-0']"]


def test_a_podgroup_for_a_refused_trainjob_is_reported():
    record = settled_record(podgroups={"ns/pg-burst-000-u": podgroup("pg-burst-000-u"),
                                       "ns/pg-burst-001-u": podgroup("pg-burst-001-u", owner="burst-001")})
    assert record.podgroups_per_wave() == ["ns/burst-001: PodGroups ['pg-burst-001-u']"]


def test_releases_are_the_events_when_the_function_logged_one_and_the_resyncs_otherwise():
    log = [{"kind": "JobSet", "namespace": "ns", "name": "burst-000", "outcome": "done", "podgroup": "pg",
            "reason": "PodGroup pg created: minMember 2; released"},
           {"reason": "resync: 13 owed a pass; 1 blocked, 12 done; timeouts: none"}]
    assert settled_record(log=log).released_by() == {"events": 1, "resync": 0, "resync says": 12}
    assert settled_record(log=log[1:]).released_by() == {"events": 0, "resync": 1, "resync says": 12}
    # A pass the resync handed to the work queue is the resync's, though its line looks like an event's.
    queued = [{**log[0], "type": "resync"}, {"reason": "resync: 1 owed a pass; 1 queued; timeouts: none"}]
    assert settled_record(log=queued).released_by() == {"events": 0, "resync": 1, "resync says": 1}


def test_a_refused_trainjob_with_a_pod_bound_or_a_gang_made_is_reported():
    bound = settled_record(pods={GANG.key: [pod("p0"), pod("p1")], REFUSED.key: [pod("r0", group="pg-burst-001-u")]})
    assert bound.partly_bound() == ["ns/burst-001: refused, yet 1 pods bound"]
    made = settled_record(podgroups={"ns/pg-burst-000-u": podgroup("pg-burst-000-u"),
                                     "ns/pg-burst-001-u": podgroup("pg-burst-001-u", owner="burst-001")})
    assert made.unsettled() == ["ns/burst-001: its gang was made, though it must be refused with GangExceedsQueue"]


def test_a_suspended_jobset_is_unsettled():
    held = jobset("burst-000")
    held["spec"]["suspend"] = True
    record = settled_record(jobsets={GANG.key: held, REFUSED.key: jobset("burst-001")})
    assert record.unsettled() == ["ns/burst-000: its JobSet was suspended"]
