"""Opt-in means opt-in (issue 39, item 3; attack 4): kai_fn acts only in namespaces labelled kai-fn.io/enabled=true,
and ``KAI_FN_NAMESPACES`` narrows that, never widens it; the labelled namespaces are read at most every few seconds."""
from __future__ import annotations

import time
import uuid

import pytest

from kai_fn.function.optin import SELECTOR, OptIn
from kai_fn.kube.errors import Transient
from kai_fn.local.process import FunctionProcess
from kai_fn.settings import load
from tests.ce import ping, resource, send
from tests.conftest import JOBSET, KAI_PG, OPTED_IN, TRAINER, moved, sample_object, seed
from tests.function import test_gang_status as gang_status
from tests.function import test_migration as migration
from tests.function import test_resync_turns as resync_turns
from tests.function.test_function import NAME, NS


class Namespaces:
    """A fake session's namespace LIST: the labelled ones, counted; ``down`` makes it fail."""

    def __init__(self, *labelled: str) -> None:
        self.labelled, self.calls, self.down = list(labelled), 0, False

    def namespaces(self, selector: str) -> list[dict]:
        assert selector == SELECTOR
        self.calls += 1
        if self.down:
            raise Transient("API 503 on list")
        return [{"metadata": {"name": n, "labels": {"kai-fn.io/enabled": "true"}}} for n in self.labelled]


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    "allowlist,namespace,acts",
    [
        ("", "team-a", True),
        ("", "team-b", False),  # issue 39, attack 4: empty used to mean every namespace, opted in or not
        ("", "kube-system", False),
        ("team-a", "team-a", True),
        ("team-b", "team-b", False),  # the list never widens: team-b never opted in
        ("team-b", "team-a", False),  # and it narrows
    ],
    ids=["opted-in", "never-opted-in", "kube-system", "listed-and-opted-in", "listed-only", "opted-in-not-listed"],
)
def test_kai_fn_acts_only_where_a_namespace_opted_in_and_the_allowlist_narrows(allowlist, namespace, acts):
    optin = OptIn(load(KAI_FN_NAMESPACES=allowlist))
    assert optin.watches(Namespaces("team-a"), namespace) is acts


def test_an_opted_in_namespace_is_read_once_per_ttl_and_an_opt_out_is_seen_after_it():
    clock, cluster = Clock(), Namespaces("team-a", "team-b")
    optin = OptIn(load(), ttl=10, clock=clock)
    assert [optin.watches(cluster, "team-b") for _ in range(20)] == [True] * 20 and cluster.calls == 1
    cluster.labelled.remove("team-b")
    clock.now += 9.9
    assert optin.watches(cluster, "team-b") is True and cluster.calls == 1
    clock.now += 0.1
    assert optin.watches(cluster, "team-b") is False and cluster.calls == 2


def test_a_namespace_that_opts_in_is_seen_within_a_second_and_events_naming_others_cost_a_list_a_second_at_most():
    clock, cluster = Clock(), Namespaces("team-a")
    optin = OptIn(load(), ttl=10, clock=clock)
    assert [optin.watches(cluster, f"other-{i}") for i in range(20)] == [False] * 20 and cluster.calls == 1
    cluster.labelled.append("team-b")
    clock.now += 0.9
    assert optin.watches(cluster, "team-b") is False and cluster.calls == 1
    clock.now += 0.1
    assert optin.watches(cluster, "team-b") is True and cluster.calls == 2
    assert optin.watches(cluster, "team-a") is True and cluster.calls == 2


def test_a_failed_list_keeps_the_last_answer_and_without_one_nothing_is_done():
    clock, cluster = Clock(), Namespaces("team-a")
    cold = OptIn(load(), clock=clock)
    cluster.down = True
    with pytest.raises(Transient, match="503"):
        cold.watches(cluster, "team-a")
    cluster.down = False
    assert cold.watches(cluster, "team-a") is True
    cluster.down, clock.now = True, clock.now + 60
    assert cold.watches(cluster, "team-a") is True and cold.watches(cluster, "team-b") is False


# -- through the real function server, on the emulator ---------------------------------------------------------------
# Each piece of work kai_fn does, in a namespace that opted in and in one that did not (issue 39, attack 4: a TrainJob
# and its suspended JobSet where no one opted in, then the resync made pg-old-<uid> there). The gang is made in team-a
# (opted in) and moved, with its TrainJob, JobSet and pods, to the namespace of the case, as if made there.

JOINED, NEVER = "joined", "never-opted-in"
PLACES = [  # (namespace, settings, whether kai_fn acts there)
    (JOINED, {}, True),
    (NEVER, {}, False),
    (NEVER, {"KAI_FN_NAMESPACES": NEVER}, False),  # the allowlist narrows, never widens
]
PLACE_IDS = ["opted-in", "never-opted-in", "never-opted-in-but-listed"]


@pytest.fixture
def places(api):
    api.opt_in(JOINED)
    api.opt_in(NEVER, enabled=False)  # exists, as a namespace does, without the label
    return api


def held(api, url, uid):
    """Submitted, its JobSet held by the policy, no event delivered: a pass is owed."""
    gang_status.seed_held_llama(api, uid)


def made(api, url, uid):
    """Released by kai_fn: its gang made, its JobSet decided and running."""
    gang_status.released(api, url, uid)


def kai_cannot_place_it(api, url, uid):
    made(api, url, uid)
    gang_status.kai_says(api, gang_status.OVER_LIMIT, name=f"pg-{NAME}-{uid}")


def placed(api, url, uid):
    made(api, url, uid)
    gang_status.place(api, 4, 4, podgroup=f"pg-{NAME}-{uid}")


def overdue(api, url, uid):
    """Released with a 60 s schedule timeout, its JobSet running for ten minutes, KAI unable to place it."""
    runtime = sample_object("clustertrainingruntime-torch-kai")
    runtime["spec"]["podGroupPolicy"] = {"kai": {"scheduleTimeoutSeconds": 60}}
    assert send(url, resource(gang_status.seed_held_llama(api, uid, runtime))).headers["X-Kai-Fn-Outcome"] == "done"
    js = api.get(JOBSET, "JobSet", NS, NAME)
    js["status"] = {"conditions": [{"type": "Suspended", "status": "False", "reason": "ResumeJobs",
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    api.put(js)
    gang_status.kai_says(api, gang_status.OVER_LIMIT, name=f"pg-{NAME}-{uid}")


def gated_earlier(api, url, uid):
    """Suspended by the earlier TrainJob gate (kai_fn/function/migration.py), its JobSet suspended, no event."""
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         *migration.auto_suspended(NAME))


def trainjob_event(api, ns, uid):
    return resource(api.get(TRAINER, "TrainJob", ns, NAME))


def jobset_event(api, ns, uid):
    return resource(api.get(JOBSET, "JobSet", ns, NAME))


def podgroup_event(api, ns, uid):
    return resource(api.get(KAI_PG, "PodGroup", ns, f"pg-{NAME}-{uid}"), "update")


def a_ping(api, ns, uid):
    return ping()


def gang_made(api, ns, uid):
    return api.get(KAI_PG, "PodGroup", ns, f"pg-{NAME}-{uid}") is not None


def resumed(api, ns, uid):
    return migration.released_legacy(api.get(TRAINER, "TrainJob", ns, NAME))


def reported(reason):
    return lambda api, ns, uid: any(e["reason"] == reason for e in api.list("v1", "Event", ns))


WORK = {  # what is there, what brings kai_fn to it, what it does where it acts
    "the TrainJob's event": (held, trainjob_event, gang_made),
    "its JobSet's event": (held, jobset_event, gang_made),
    "a PodGroup's event": (kai_cannot_place_it, podgroup_event, reported("GangUnschedulable")),
    "the resync": (held, a_ping, gang_made),
    "the resync's sweep": (placed, a_ping, reported("GangBound")),
    "a schedule timeout": (overdue, a_ping, reported("ScheduleTimeout")),
    "the migration": (gated_earlier, a_ping, resumed),
}


@pytest.mark.parametrize("work", WORK, ids=list(WORK))
@pytest.mark.parametrize("ns, settings, acts", PLACES, ids=PLACE_IDS)
def test_kai_fn_does_its_work_where_a_namespace_opted_in_and_nothing_at_all_elsewhere(places, functions, work, ns,
                                                                                    settings, acts):
    arrange, bring, done = WORK[work]
    uid = str(uuid.uuid4())
    arrange(places, functions().url, uid)  # in team-a, by the function with default settings
    moved(places, NS, ns)
    url = functions(KAI_FN_HEARTBEAT_LEASE="", **settings).url
    places.reset_calls()
    answer = send(url, bring(places, ns, uid))
    assert answer.status == 200
    if acts:
        assert done(places, ns, uid)
    else:
        assert not done(places, ns, uid) and places.writes() == []
        assert [(c.verb, c.resource) for c in places.calls if c.namespace == ns] == []  # not even a read
        assert bring is a_ping or answer.headers.get("X-Kai-Fn-Outcome") == "ignored"


@pytest.mark.parametrize("ns, acts", [(JOINED, True), (NEVER, False)], ids=["opted-in", "never-opted-in"])
def test_the_catch_up_at_start_queues_what_is_owed_where_a_namespace_opted_in_and_nothing_elsewhere(places, tmp_path,
                                                                                                   ns, acts):
    uid = str(uuid.uuid4())
    held(places, None, uid)
    moved(places, NS, ns)
    log = tmp_path / "function.log"
    settings = {"KUBECONFIG": places.kubeconfig, **resync_turns.WORKED, "KAI_FN_HEARTBEAT_LEASE": ""}
    with log.open("wb") as out, FunctionProcess(settings, log=out) as fn:
        resync_turns.until_worked(fn.url, 1 if acts else 0, timeout=60)
    (catch_up,) = resync_turns.log_lines(log, "catch-up")
    assert (catch_up["owed"], catch_up["queued"]) == ((1, 1) if acts else (0, 0))
    assert gang_made(places, ns, uid) is acts
    assert acts or (places.writes(), [c for c in places.calls if c.namespace == ns]) == ([], [])


def test_a_namespace_that_opts_out_is_left_once_the_namespace_cache_is_older(places, functions):
    fn = functions(KAI_FN_NAMESPACE_CACHE_SECONDS="0.5", KAI_FN_HEARTBEAT_LEASE="")
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    held(places, fn.url, first)
    moved(places, NS, JOINED)
    assert send(fn.url, trainjob_event(places, JOINED, first)).headers["X-Kai-Fn-Outcome"] == "done"
    assert gang_made(places, JOINED, first)
    places.opt_in(JOINED, enabled=False)  # kubectl label namespace joined kai-fn.io/enabled-
    held(places, fn.url, second)
    moved(places, NS, JOINED)
    time.sleep(0.6)
    places.reset_calls()
    answer = send(fn.url, trainjob_event(places, JOINED, second))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "ignored")
    assert send(fn.url, ping()).status == 200
    assert not gang_made(places, JOINED, second) and places.writes() == []
    assert [c for c in places.calls if c.namespace == JOINED] == []


def test_the_resync_lists_trainjobs_and_jobsets_in_each_opted_in_namespace_and_the_rest_by_label(places, functions):
    held(places, None, str(uuid.uuid4()))
    moved(places, NS, NEVER)  # something to find there, were it looked at
    fn = functions(KAI_FN_HEARTBEAT_LEASE="")
    places.reset_calls()
    assert send(fn.url, ping()).status == 200
    lists = [(c.resource, c.namespace, c.query.get("labelSelector")) for c in places.calls if c.verb == "list"]
    opted = sorted({*OPTED_IN, JOINED})
    assert lists == [("namespaces", None, SELECTOR), *(("trainjobs", ns, None) for ns in opted),
                     *(("jobsets", ns, None) for ns in opted), ("podgroups", None, "app.kubernetes.io/managed-by=kai-fn")]
    assert places.writes() == []
