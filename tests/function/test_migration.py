"""The migrations (kai_fn/function/migration/): from 0.1.0's TrainJob gate, and TrainJobs their authors suspend; then
from 0.2.0's JobSet hold (at the end).

A TrainJob the earlier gate suspended (``kai-fn/auto-suspended`` with ``spec.suspend: true``; its JobSet, made then,
suspended WITHOUT the ``kai-fn/held`` label) is a suspended TrainJob to the pass: in scope, its gang is made and its
JobSet decided; then the migration resumes it (Trainer resumes the JobSet). Out of scope: its JobSet marked so and
the TrainJob resumed at once, without a gang. Runtime missing or plan blocked: left suspended with the Warning,
resumed by the next change or resync once fixed. Kueue's and ``kai-fn/hold``'s are never resumed by kai_fn. A
TrainJob that gate decided carries its marks on itself: they are carried to its JobSet and main PodGroup.

Suspended by its author: the policy holds its JobSet as any other; kai_fn prepares the gang and decides the JobSet,
which stays suspended until the author resumes the TrainJob (Trainer resumes the JobSet then). Out of scope: left
alone.
"""
from __future__ import annotations

import uuid

import pytest

from kai_fn.local.emulator import naming
from tests import crds
from tests.builders import jobset_for
from tests.ce import ping, resource, send
from tests.conftest import JOBSET, KAI_PG, TRAINER, sample_object, seed
from tests.builders import held_by_0_2
from tests.function.test_background_work import WORKERS, idle

NS = "team-a"
AUTO = "kai-fn/auto-suspended"
HELD = "kai-fn/held"


def own_uid(tj: dict, js: dict | None = None) -> None:
    """A uid of its own for each test (a function process remembers the TrainJobs it decided, by uid)."""
    uid = str(uuid.uuid4())
    tj["metadata"]["uid"] = uid
    if js is not None:
        js["metadata"]["uid"] = str(uuid.uuid5(uuid.UUID(uid), "jobset"))
        js["metadata"]["ownerReferences"][0]["uid"] = uid


def auto_suspended(name: str, annotations: dict | None = None, labels: dict | None = None) -> list[dict]:
    """A sample TrainJob as the earlier policy left it (suspended and annotated) and, if the sample has one, its
    JobSet as Trainer made it then: suspended, never held."""
    tj = sample_object(f"trainjob-{name}")
    tj["metadata"].setdefault("annotations", {}).update({AUTO: "true", **(annotations or {})})
    tj["metadata"].setdefault("labels", {}).update(labels or {})
    tj["spec"]["suspend"] = True
    js = held_by_0_2(sample_object(f"jobset-{name}")) if name == "llama-finetune" else None
    if js is not None:
        del js["metadata"]["labels"][HELD]
    own_uid(tj, js)
    return [tj] if js is None else [tj, js]


def authors(name: str = "llama-finetune", labels: dict | None = None) -> list[dict]:
    """A sample TrainJob its author submitted suspended, and its JobSet as the policy holds it."""
    tj, js = sample_object(f"trainjob-{name}"), held_by_0_2(sample_object(f"jobset-{name}"))
    tj["spec"]["suspend"] = True
    tj["metadata"].setdefault("labels", {}).update(labels or {})
    own_uid(tj, js)
    return [tj, js]


def live(api, name: str) -> dict:
    return api.get(TRAINER, "TrainJob", NS, name)


def jobset(api, name: str = "llama-finetune") -> dict:
    return api.get(JOBSET, "JobSet", NS, name)


def writes(api) -> list[tuple[str, str]]:
    """Writes but the resync's heartbeat (tests/function/test_heartbeat.py)."""
    return [(c.verb, c.resource) for c in api.writes() if c.resource != "leases"]


def warnings(api, reason: str) -> list[dict]:
    return [e for e in api.list("v1", "Event", NS) if e["reason"] == reason and e["type"] == "Warning"]


def gang_created(api) -> str:
    (event,) = [e for e in api.list("v1", "Event", NS) if e["reason"] == "GangCreated"]
    return event["message"]


def released_legacy(tj: dict) -> bool:
    return tj["spec"]["suspend"] is False and AUTO not in (tj["metadata"].get("annotations") or {})


# -- the migration: TrainJobs the earlier gate suspended ------------------------------------------------------

@pytest.mark.parametrize("by", ["event", "resync"])
def test_in_scope_it_gets_its_gang_its_jobset_is_decided_and_it_is_released(api, function, by):
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         *auto_suspended("llama-finetune"))
    event = resource(live(api, "llama-finetune")) if by == "event" else ping()
    assert send(function.url, event).status == 200
    tj, js = live(api, "llama-finetune"), jobset(api)
    assert released_legacy(tj)
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    crds.validate(pg)
    assert js["metadata"]["annotations"]["kai-fn/podgroup"] == pg["metadata"]["name"]  # the decision on the JobSet
    assert js["spec"]["suspend"] is True  # Trainer resumes it with its TrainJob
    assert writes(api) == [("create", "podgroups"), ("patch", "jobsets"), ("create", "events"), ("patch", "trainjobs")]
    (release,) = [c for c in api.calls if c.verb == "patch" and c.resource == "trainjobs"]
    assert release.body == {"metadata": {"annotations": {AUTO: None}}, "spec": {"suspend": False}}
    assert gang_created(api).endswith("left suspended: the TrainJob is suspended: it starts when it is resumed")
    api.reset_calls()
    assert send(function.url, resource(tj, "update")).status == 200  # the update its release caused: nothing
    assert writes(api) == []


@pytest.mark.parametrize("with_jobset", [False, True], ids=["no-jobset-yet", "its-jobset"])
def test_out_of_scope_it_is_released_without_a_gang_and_later_events_cost_nothing(api, function, with_jobset):
    (tj,) = auto_suspended("resnet-eval")
    rt = sample_object("clustertrainingruntime-torch")
    seed(api, rt, tj, *([jobset_for(tj, rt, suspend=True)] if with_jobset else []))
    answer = send(function.url, resource(live(api, "resnet-eval")))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "done")
    tj = live(api, "resnet-eval")
    assert released_legacy(tj)
    crds.validate(tj)
    marked = ((jobset(api, "resnet-eval") or {}).get("metadata") or {}).get("annotations")
    assert marked == ({"kai-fn/skipped": "out-of-scope"} if with_jobset else None)
    assert writes(api) == [("patch", "jobsets")] * with_jobset + [("patch", "trainjobs")]
    assert api.list(KAI_PG, "PodGroup", NS) == []
    api.reset_calls()
    assert send(function.url, resource(tj, "update")).status == 200
    assert api.calls == []


@pytest.mark.parametrize("annotation,label", [({"kai-fn/hold": "true"}, {}), ({}, {"kueue.x-k8s.io/queue-name": "lq"})],
                         ids=["hold", "kueue"])
def test_out_of_scope_but_held_it_stays_suspended(api, function, annotation, label):
    seed(api, sample_object("clustertrainingruntime-torch"), *auto_suspended("resnet-eval", annotation, label))
    assert send(function.url, resource(live(api, "resnet-eval"))).status == 200
    assert writes(api) == [] and live(api, "resnet-eval")["spec"]["suspend"] is True


def test_in_scope_and_admitted_by_kueue_its_gang_is_decided_and_kueue_resumes_it(api, function):
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         *auto_suspended("llama-finetune", labels={"kueue.x-k8s.io/queue-name": "lq"}))
    assert send(function.url, resource(live(api, "llama-finetune"))).status == 200
    assert live(api, "llama-finetune")["spec"]["suspend"] is True
    assert "kai-fn/podgroup" in jobset(api)["metadata"]["annotations"]
    assert writes(api) == [("create", "podgroups"), ("patch", "jobsets"), ("create", "events")]
    assert "left suspended: Kueue admits it" in gang_created(api)


def _runtime_missing(api):
    seed(api, sample_object("queue-team-a"), *auto_suspended("llama-finetune"))
    return "RuntimeNotFound", lambda: seed(api, sample_object("clustertrainingruntime-torch-kai"))


def _plan_blocked(api):
    rt = sample_object("clustertrainingruntime-torch-kai")
    pod = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    del pod["schedulerName"]
    seed(api, sample_object("queue-team-a"), rt, *auto_suspended("llama-finetune"))
    return "PlanBlocked", lambda: seed(api, sample_object("clustertrainingruntime-torch-kai"))


@pytest.mark.parametrize("setup", [_runtime_missing, _plan_blocked], ids=["runtime-missing", "plan-blocked"])
def test_blocked_it_waits_suspended_with_a_warning_and_the_resync_releases_it_once_fixed(api, function, setup):
    reason, fix = setup(api)
    assert send(function.url, resource(live(api, "llama-finetune"))).status == 200
    assert live(api, "llama-finetune")["spec"]["suspend"] is True
    assert len(warnings(api, reason)) == 1
    assert [w for w in writes(api) if w != ("create", "events")] == []
    fix()
    assert send(function.url, ping()).status == 200
    assert released_legacy(live(api, "llama-finetune"))
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    assert jobset(api)["metadata"]["annotations"]["kai-fn/podgroup"] == pg["metadata"]["name"]


def test_outside_the_namespace_allowlist_its_event_costs_nothing_and_the_resync_releases_it_without_a_gang(
        api, functions):
    fn = functions(KAI_FN_NAMESPACES="team-b")
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         *auto_suspended("llama-finetune"))
    api.reset_calls()
    answer = send(fn.url, resource(live(api, "llama-finetune")))
    assert (answer.status, answer.headers.get("X-Kai-Fn-Outcome")) == (200, "ignored") and api.calls == []
    assert send(fn.url, ping()).status == 200
    assert released_legacy(live(api, "llama-finetune"))
    js = jobset(api)
    assert js["metadata"]["annotations"] == {"kai-fn/skipped": "out-of-scope"} and js["spec"]["suspend"] is True
    assert writes(api) == [("patch", "jobsets"), ("patch", "trainjobs")]
    assert api.list(KAI_PG, "PodGroup", NS) == []


def test_a_running_trainjob_that_gate_decided_has_its_marks_carried_to_its_jobset_and_podgroup(api, functions):
    """Decided and bound before the upgrade: its JobSet runs undecided, its PodGroup unmarked. Not too late: its
    marks move where kai_fn reads them, and later events cost nothing."""
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         *authors())
    assert send(functions().url, resource(live(api, "llama-finetune"))).status == 200
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    name = pg["metadata"]["name"]
    js = jobset(api)  # as the earlier kai_fn left it: running, its decision on the TrainJob
    js["metadata"]["annotations"] = {}
    js["spec"]["suspend"] = False
    api.put(js)
    tj = live(api, "llama-finetune")
    tj["spec"]["suspend"] = False
    tj["metadata"]["annotations"] = {"kai-fn/podgroup": name, "kai-fn/bound": "2026-01-02T03:04:05Z"}
    api.put(tj)
    api.reset_calls()
    functions.forget()  # a new process: it remembers nothing of the pass above
    answer = send(functions().url, resource(live(api, "llama-finetune"), "update"))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "skipped")
    assert jobset(api)["metadata"]["annotations"] == {"kai-fn/podgroup": name}
    assert api.get(KAI_PG, "PodGroup", NS, name)["metadata"]["annotations"]["kai-fn/bound"] == "2026-01-02T03:04:05Z"
    assert not {"kai-fn/podgroup", "kai-fn/bound"} & set(live(api, "llama-finetune")["metadata"].get("annotations") or {})
    assert warnings(api, "TooLate") == []
    assert writes(api) == [("patch", "jobsets"), ("patch", "podgroups"), ("patch", "trainjobs")]


@pytest.mark.parametrize("by", ["event", "resync"])
def test_decided_but_not_yet_resumed_it_is_resumed_with_no_other_write(api, function, by):
    """The pass decided its JobSet and stopped before the resume: its next event or the resync resumes it."""
    tj, js = auto_suspended("llama-finetune")
    js["metadata"]["annotations"] = {"kai-fn/podgroup": "pg-llama"}
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"), tj, js)
    answer = send(function.url, resource(live(api, "llama-finetune")) if by == "event" else ping())
    assert answer.status == 200
    assert released_legacy(live(api, "llama-finetune"))
    assert writes(api) == [("patch", "trainjobs")]


def test_a_trainjobs_own_decision_is_never_carried_to_a_jobset_the_policy_holds(api, function):
    """A held JobSet is decided by its own annotations alone: the TrainJob's marks are dropped, the pass decides."""
    tj, js = sample_object("trainjob-llama-finetune"), held_by_0_2(sample_object("jobset-llama-finetune"))
    own_uid(tj, js)
    tj["metadata"]["annotations"] = {"kai-fn/skipped": "out-of-scope", "kai-fn/bound": "2026-01-02T03:04:05Z"}
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"), tj, js)
    assert send(function.url, resource(live(api, "llama-finetune"))).status == 200
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    notes = jobset(api)["metadata"]["annotations"]
    assert notes["kai-fn/podgroup"] == pg["metadata"]["name"] and "kai-fn/skipped" not in notes
    assert "kai-fn/bound" not in (pg["metadata"].get("annotations") or {})
    assert not (live(api, "llama-finetune")["metadata"].get("annotations") or {})
    assert writes(api) == [("patch", "trainjobs"), ("create", "podgroups"), ("patch", "jobsets"), ("create", "events")]


# -- suspended by its author ----------------------------------------------------------------------------------

@pytest.mark.parametrize("labels, why", [
    ({}, "left suspended: the TrainJob is suspended: it starts when it is resumed"),
    ({"kueue.x-k8s.io/queue-name": "lq"}, "left suspended: Kueue admits it (kueue.x-k8s.io/queue-name)"),
], ids=["its-author", "kueue"])
def test_suspended_by_its_author_its_gang_is_prepared_and_its_jobset_decided_but_left_suspended(
        api, function, labels, why):
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"),
         *authors(labels=labels))
    before = live(api, "llama-finetune")
    assert send(function.url, resource(before)).status == 200
    assert live(api, "llama-finetune") == before  # the TrainJob is not written
    js = jobset(api)
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    assert js["metadata"]["annotations"]["kai-fn/podgroup"] == pg["metadata"]["name"]
    assert HELD not in js["metadata"]["labels"]  # decided: the policy no longer holds it, Trainer resumes it
    assert js["spec"]["suspend"] is True and "kai-fn/released-at" not in js["metadata"]["annotations"]
    assert writes(api) == [("create", "podgroups"), ("patch", "jobsets"), ("create", "events")]
    assert gang_created(api).endswith(why)
    api.reset_calls()  # its author resumes it (Trainer resumes the JobSet): nothing left for kai_fn
    resumed = dict(before, spec={**before["spec"], "suspend": False})
    assert send(function.url, resource(resumed, "update")).status == 200
    assert api.calls == []


def test_suspended_by_its_author_and_out_of_scope_it_stays_suspended(api, function):
    (tj,) = auto_suspended("resnet-eval")
    del tj["metadata"]["annotations"][AUTO]
    seed(api, sample_object("clustertrainingruntime-torch"), tj)
    assert send(function.url, resource(live(api, "resnet-eval"))).status == 200
    assert writes(api) == [] and live(api, "resnet-eval")["spec"]["suspend"] is True


# -- the migration: JobSets the previous version held (kai_fn/function/migration/jobset_hold.py) -------------------

def previous_hold(name: str = "llama-finetune", annotations: dict | None = None, suspend: bool = False,
                decided: bool = False, owned: bool = True) -> list[dict]:
    """A sample TrainJob and its JobSet as 0.2.0's policy left it: suspended, labelled ``kai-fn/held``."""
    tj = sample_object(f"trainjob-{name}")
    rt = sample_object("clustertrainingruntime-torch" + ("-kai" if name == "llama-finetune" else ""))
    tj["metadata"].setdefault("annotations", {}).update(annotations or {})
    tj["spec"]["suspend"] = suspend
    js = jobset_for(tj, rt, suspend=True, held=True)
    own_uid(tj, js)
    if decided:
        js["metadata"]["annotations"] = {"kai-fn/podgroup": f"pg-{name}-{tj['metadata']['uid']}"}
    if not owned:
        del js["metadata"]["ownerReferences"]
    return [rt, tj, js]


def released_by_the_migration(js: dict) -> bool:
    return js["spec"]["suspend"] is False and HELD not in (js["metadata"].get("labels") or {})


GANG = [("create", "podgroups"), ("patch", "jobsets"), ("create", "events")]
HELD_CASES = {
    # name: (what to seed, expected: PodGroups made, the JobSet's label kept, suspend after, its decision, writes,
    #        and the writes of the next event: none once decided; while held, the gang found made again, told again)
    "in scope: its gang made, then decided and released in one patch": (
        lambda: previous_hold(), 1, False, False, "kai-fn/podgroup", GANG, []),
    "its TrainJob asks to wait (kai-fn/hold): gang and templates, still held": (
        lambda: previous_hold(annotations={"kai-fn/hold": "true"}), 1, True, True, None, GANG,
        [("create", "podgroups"), ("create", "events")]),
    "its TrainJob suspended: decided, the hold lifted, left for Trainer to resume": (
        lambda: previous_hold(suspend=True), 1, False, True, "kai-fn/podgroup", GANG, []),
    "out of scope: let go without a gang, resumed": (
        lambda: previous_hold("resnet-eval"), 0, False, False, "kai-fn/skipped", [("patch", "jobsets")], []),
    "already decided: nothing": (lambda: previous_hold(decided=True), 0, True, True, "kai-fn/podgroup", [], []),
}


@pytest.mark.parametrize("by", ["event", "resync"])
@pytest.mark.parametrize("case", HELD_CASES, ids=list(HELD_CASES))
def test_a_jobset_the_previous_version_held_is_decided_and_released_once(api, function, case, by):
    seeded, podgroups, kept, suspend, decision, expected, again = HELD_CASES[case]
    rt, tj, js = seeded()
    seed(api, sample_object("queue-team-a"), rt, tj, js)
    name = tj["metadata"]["name"]
    event = resource(live(api, name)) if by == "event" else ping()
    assert send(function.url, event).status == 200
    after = jobset(api, name)
    assert len(api.list(KAI_PG, "PodGroup", NS)) == podgroups
    assert ((after["metadata"].get("labels") or {}).get(HELD) == "true") is kept
    assert after["spec"]["suspend"] is suspend
    notes = after["metadata"].get("annotations") or {}
    assert [k for k in ("kai-fn/podgroup", "kai-fn/skipped") if k in notes] == ([decision] if decision else [])
    assert ("kai-fn/released-at" in notes) is (decision == "kai-fn/podgroup" and not suspend and not kept)
    assert writes(api) == expected
    crds.validate(after)
    api.reset_calls()
    assert send(function.url, resource(after, "update")).status == 200  # the next event
    assert writes(api) == again


@pytest.mark.parametrize("by", ["event", "resync"])
def test_a_tenants_forged_held_label_on_a_jobset_no_trainjob_controls_is_nothing(api, function, by):
    rt, tj, forged = previous_hold(owned=False)
    seed(api, sample_object("queue-team-a"), rt, tj, forged)
    assert send(function.url, resource(live(api, tj["metadata"]["name"])) if by == "event" else ping()).status == 200
    after = jobset(api)
    assert ("patch", "jobsets") not in writes(api) and not after["metadata"].get("annotations")
    assert after["metadata"]["labels"][HELD] == "true" and after["spec"]["suspend"] is True


def test_named_as_well_its_gang_made_before_the_jobset_the_resync_releases_it(api, function):
    """While both policies run: the gang is made from the TrainJob's event, then Trainer's JobSet is named and held.
    No other pass is owed it (its gang exists): the migration's share of the resync releases it."""
    rt, tj, js = previous_hold()
    seed(api, sample_object("queue-team-a"), rt, tj)
    assert send(function.url, resource(live(api, "llama-finetune"))).status == 200
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    api.put(naming.named(js))
    api.reset_calls()
    assert send(function.url, ping()).status == 200
    after = jobset(api)
    assert released_by_the_migration(after)
    assert after["metadata"]["annotations"]["kai-fn/podgroup"] == pg["metadata"]["name"]
    assert after["metadata"]["labels"]["kai-fn/named"] == "true"
    assert ("patch", "jobsets") in writes(api) and api.list(KAI_PG, "PodGroup", NS) == [pg]


def test_with_a_work_queue_the_resync_hands_the_migrations_share_to_it_and_the_queue_releases_it(api, functions):
    """knative/base runs workers: the resync then only enqueues, and the migration's share is a turn of its key."""
    worked = functions(**WORKERS)
    rt, tj, js = previous_hold()
    seed(api, sample_object("queue-team-a"), rt, tj)
    assert send(worked.url, resource(live(api, "llama-finetune"))).status in (200, 202)
    idle(worked.url)
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    api.put(naming.named(js))
    api.reset_calls()
    assert send(worked.url, ping()).status == 200
    idle(worked.url)
    after = jobset(api)
    assert released_by_the_migration(after)
    assert after["metadata"]["annotations"]["kai-fn/podgroup"] == pg["metadata"]["name"]
    assert ("patch", "jobsets") in writes(api) and api.list(KAI_PG, "PodGroup", NS) == [pg]
