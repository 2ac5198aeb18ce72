"""Nothing a tenant or a forged event writes decides a gang (docs/security.md): the function's side, over real HTTP
against the emulated API server. What the admission policies and RBAC answer is proven on the real API server
(tests/testbed/test_marks_policy.py); a tenant's attempts beside another team's burst on the chain
(tests/chain/test_scenario_11_tenant.py)."""
from __future__ import annotations

import copy
import json
import threading
import uuid

import pytest

from kai_fn.local.emulator import Fault
from tests.builders import owned_by
from tests.ce import ping, resource, send
from tests.conftest import JOBSET, KAI_PG, TRAINER, sample_object, seed
from tests.function.test_function import NAME, NS, PG, events_of, llama_jobset, seed_llama
from tests.function.test_gang_status import pod, released
from tests.function.test_heartbeat import lease
from tests.function.test_metrics import key, scrape
from tests.function.test_workqueue import until
from tests.function.test_timeout_on_resync import jobset_runs, released_llama, write
from tests.builders import held_by_0_2

pytestmark = pytest.mark.usefixtures("forgetful")

SOURCE = ("kai-fn", "kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource")
PODGROUPS_SOURCE = ("kai-fn", "kai-fn-podgroups-oidc-sources.knative.dev-apiserversource")


def still_held(api) -> bool:
    js = llama_jobset(api)
    return js["spec"]["suspend"] is True and js["metadata"]["labels"].get("kai-fn/held") == "true"


def warnings(api, reason):
    return [e for e in events_of(api, reason) if e["type"] == "Warning"]


# -- 1. bodies are never planned from ---------------------------------------------------------------------------------

def _thousand_nodes(tj):
    tj["spec"]["trainer"]["numNodes"] = 1000


def _one_node(tj):
    tj["spec"]["trainer"]["numNodes"] = 1


def _managed_elsewhere(tj):
    tj["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"


FORGERIES = {"numNodes 1000": _thousand_nodes, "numNodes 1": _one_node, "managedBy elsewhere": _managed_elsewhere}


@pytest.mark.parametrize("authenticated", [True, False], ids=["from-a-listed-sender", "unauthenticated"])
@pytest.mark.parametrize("forge", FORGERIES.values(), ids=list(FORGERIES))
def test_a_forged_trainjob_body_never_sizes_scopes_or_skips_the_gang(api, functions, forge, authenticated):
    """Even a listed sender's body is a cue only: the gang is the live TrainJob's (4 nodes, in scope)."""
    fn = functions(KAI_FN_AUDIENCE="kai-fn") if authenticated else functions()
    token = api.issue_token(*SOURCE, ["kai-fn"]) if authenticated else None
    forged = copy.deepcopy(seed_llama(api))
    forge(forged)
    answer = send(fn.url, resource(forged), token=token)
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "done")
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    assert pg["spec"]["minMember"] == 4
    assert llama_jobset(api)["metadata"]["annotations"]["kai-fn/podgroup"] == PG


def test_a_forged_podgroup_body_of_min_member_one_posts_no_gang_bound_and_writes_no_mark(api, functions):
    """With 1 of 4 pods bound, a body claiming ``minMember: 1`` and a bound status changes nothing: the live
    PodGroup (minMember 4) is read, and its gang is not bound."""
    fn = functions(KAI_FN_AUDIENCE="kai-fn")
    token = api.issue_token(*PODGROUPS_SOURCE, ["kai-fn"])
    live = released(api, functions().url)
    seed(api, pod(0, True), pod(1, False), pod(2, False), pod(3, False))
    forged = copy.deepcopy(live)
    forged["spec"]["minMember"] = 1
    forged["status"] = {"phase": "Running"}
    api.reset_calls()
    answer = send(fn.url, resource(forged, "update"), token=token)
    assert answer.status == 200 and answer.headers["X-Kai-Fn-Outcome"] == "skipped"
    assert events_of(api, "GangBound") == []
    assert "kai-fn/bound" not in (api.get(KAI_PG, "PodGroup", NS, PG)["metadata"].get("annotations") or {})
    assert [w for w in api.writes() if w.resource != "tokenreviews"] == []


# -- 3. a tenant's marks on a TrainJob never skip its held JobSet ----------------------------------------------------

@pytest.mark.parametrize("mark", [{"kai-fn/skipped": "out-of-scope"}, {"kai-fn/podgroup": "pg-elsewhere"}],
                         ids=["skipped", "podgroup"])
def test_decision_marks_a_tenant_writes_on_a_trainjob_never_decide_its_held_jobset(api, function, mark):
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"]["annotations"] = mark
    seed_llama(api, trainjob=tj)
    answer = send(function.url, resource(api.get(TRAINER, "TrainJob", NS, NAME)))
    assert answer.headers["X-Kai-Fn-Outcome"] == "done"
    (pg,) = api.list(KAI_PG, "PodGroup", NS)
    assert pg["metadata"]["name"] == PG and pg["spec"]["minMember"] == 4
    assert llama_jobset(api)["metadata"]["annotations"]["kai-fn/podgroup"] == PG


# -- 4. only kai_fn's own PodGroup or placeholder is the gang's ------------------------------------------------------

def _premade(**changes) -> dict:
    """The PodGroup of the gang's name as someone else made it: a tenant's (minMember 1, another queue, no owner,
    no labels) unless ``changes`` make it closer to kai_fn's."""
    pg = {"apiVersion": KAI_PG, "kind": "PodGroup",
          "metadata": {"name": PG, "namespace": NS, "labels": {}, "annotations": {}},
          "spec": {"minMember": 1, "queue": "team-b"}}
    for path, value in changes.items():
        target = pg
        *parents, leaf = path.split("__")
        for part in parents:
            target = target[part]
        target[leaf] = value
    return pg


def _kai_fns_own(api, url) -> dict:
    """The PodGroup kai_fn makes for the sample, as it made it (made by a first function, then the JobSet held
    again as if its patch had been lost)."""
    released(api, url)
    pg = api.get(KAI_PG, "PodGroup", NS, PG)
    api.delete(TRAINER, "TrainJob", NS, NAME)
    api.delete(JOBSET, "JobSet", NS, NAME)
    return pg


PREMADE = {
    "a tenant's: minMember 1, queue team-b, no owner": (_premade(), "no controller ownerReference"),
    "owner and labels forged, minMember 1": (None, "spec.minMember is 1, not 4"),
    "kai_fn's, marked bound before its release": (None, "annotation kai-fn/bound is set already"),
}


@pytest.mark.parametrize("case", list(PREMADE), ids=list(PREMADE))
def test_a_podgroup_of_the_gangs_name_that_kai_fn_did_not_make_is_never_the_gang(api, functions, case):
    fn = functions()
    premade, says = PREMADE[case]
    if premade is None:
        premade = _kai_fns_own(api, fn.url)
        del premade["metadata"]["resourceVersion"], premade["metadata"]["uid"]
        if "minMember" in says:
            premade["spec"]["minMember"] = 1
        else:
            premade["metadata"]["annotations"]["kai-fn/bound"] = "2026-01-01T00:00:00Z"
        functions.forget()
        fn = functions()
    seed(api, premade)
    seed_llama(api)
    api.reset_calls()
    answer = send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, NAME)))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "blocked")
    (warning,) = warnings(api, "NotMadeByKaiFn")
    assert f"PodGroup {NS}/{PG}" in warning["message"] and says in warning["message"]
    assert still_held(api) and "kai-fn/podgroup" not in (llama_jobset(api)["metadata"].get("annotations") or {})
    assert [w.resource for w in api.writes() if w.verb != "create" or w.resource not in ("podgroups", "events")] == []


def test_kai_fns_own_podgroup_found_again_is_its_gang(api, functions):
    """Idempotence keeps its meaning for kai_fn's own: the PodGroup it made before is adopted."""
    fn = functions()
    own = _kai_fns_own(api, fn.url)
    functions.forget()
    fn = functions()
    del own["metadata"]["resourceVersion"], own["metadata"]["uid"]
    seed(api, own)
    seed_llama(api)
    answer = send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, NAME)))
    assert answer.headers["X-Kai-Fn-Outcome"] == "done"
    assert llama_jobset(api)["metadata"]["annotations"]["kai-fn/podgroup"] == PG and warnings(api, "NotMadeByKaiFn") == []


def test_a_pod_squatting_the_placeholders_name_gets_a_warning_and_no_endless_retry(api, function):
    from tests.function.test_reservation import HOLDER, NAME as MPI, NS as MPI_NS, seed_mpi
    squatter = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": HOLDER, "namespace": MPI_NS},
                "spec": {"containers": [{"name": "x", "image": "busybox"}]}}
    seed(api, squatter)
    answer = send(function.url, resource(seed_mpi(api)))
    assert (answer.status, answer.headers["X-Kai-Fn-Outcome"]) == (200, "blocked")
    (warning,) = [e for e in api.list("v1", "Event", MPI_NS) if e["reason"] == "NotMadeByKaiFn"]
    assert f"pod {MPI_NS}/{HOLDER}" in warning["message"]
    js = api.get(JOBSET, "JobSet", MPI_NS, MPI)
    assert js["spec"]["suspend"] is True and "kai-fn/podgroup" not in (js["metadata"].get("annotations") or {})


# -- 5. one bad object never stops the others -------------------------------------------------------------------------

@pytest.fixture
def timeout_uids(monkeypatch):
    """tests/function/test_timeout_on_resync.py's helpers, with a uid of this test's own."""
    from tests.function import test_timeout_on_resync as timeouts
    uid = str(uuid.uuid4())
    monkeypatch.setattr(timeouts, "UID", uid)
    monkeypatch.setattr(timeouts, "PG", f"pg-{NAME}-{uid}")


@pytest.mark.usefixtures("timeout_uids")
def test_a_mark_far_in_the_future_on_one_trainjob_stops_neither_the_resync_nor_another_teams_timeout(api, functions):
    """A tenant's own released gang, its TrainJob marked released at the end of time with a 1 s timeout (on main:
    an OverflowError that failed every resync); another team's gang is overdue."""
    fn = functions()
    tenant_uid = "7a7a7a7a-0000-4000-8000-000000000001"
    tenant = owned_by(sample_object("trainjob-llama-finetune"), tenant_uid)
    tenant_js = owned_by(held_by_0_2(sample_object("jobset-llama-finetune")), tenant_uid)
    tenant["metadata"]["name"] = tenant_js["metadata"]["name"] = "tenant"
    tenant_js["metadata"]["ownerReferences"][0]["name"] = "tenant"
    seed(api, sample_object("queue-team-a"), sample_object("clustertrainingruntime-torch-kai"), tenant, tenant_js)
    assert send(fn.url, resource(api.get(TRAINER, "TrainJob", NS, "tenant"))).headers["X-Kai-Fn-Outcome"] == "done"
    jobset_runs(api, 10, name="tenant")
    marked = api.get(TRAINER, "TrainJob", NS, "tenant")
    marked["metadata"]["annotations"] = {"kai-fn/released-at": "9999-12-31T23:59:59Z",
                                         "kai-fn/schedule-timeout-seconds": "1"}
    write(api, marked)
    released_llama(api, fn.url, runtime_timeout=60)
    jobset_runs(api, 120)  # its wait began 2 minutes ago: overdue
    seed(api, lease())
    answer = send(fn.url, ping())
    assert answer.status == 200
    # The mark at the end of time is no mark: the tenant's wait began when its JobSet resumed, 1 s is its own timeout.
    assert sorted(e["involvedObject"]["name"] for e in events_of(api, "ScheduleTimeout")) == [NAME, "tenant"]
    assert api.get("coordination.k8s.io/v1", "Lease", "kai-fn", "kai-fn-resync")["spec"].get("renewTime")


def test_a_quantity_too_large_to_count_gets_a_warning_and_its_jobset_stays_held(api, function):
    tj = sample_object("trainjob-llama-finetune")
    tj["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"nvidia.com/gpu": "1e5000"}}
    seed_llama(api, trainjob=tj)
    answer = send(function.url, resource(api.get(TRAINER, "TrainJob", NS, NAME)))
    assert answer.headers["X-Kai-Fn-Outcome"] == "blocked"
    (warning,) = warnings(api, "InvalidTrainJob")
    assert "out of range" in warning["message"] and still_held(api)


def test_an_unexpected_error_on_one_trainjob_is_its_own_the_resync_goes_on_and_renews_the_lease(api, emulator,
                                                                                              monkeypatch):
    """In process: the pass of one TrainJob raises what no check foresaw; the other is released, the bad one gets an
    Unprocessable Warning and a metric, the heartbeat is renewed."""
    from kai_fn.function import metrics, resync
    from kai_fn.function.cluster import CachedServer
    from kai_fn.function.optin import OptIn
    from kai_fn.function.reconcile import Reconciler
    from kai_fn.settings import load
    seed_llama(api)
    other = owned_by(sample_object("trainjob-llama-finetune"), "7a7a7a7a-0000-4000-8000-000000000002")
    other["metadata"]["name"] = "broken"
    other_js = owned_by(held_by_0_2(sample_object("jobset-llama-finetune")), "7a7a7a7a-0000-4000-8000-000000000002")
    other_js["metadata"]["name"] = "broken"
    seed(api, other, other_js, lease())
    original = Reconciler.run

    def run(self):
        if self.name == "broken":
            raise KeyError("a field no check foresaw")
        return original(self)

    monkeypatch.setattr(Reconciler, "run", run)
    settings = load(KUBECONFIG=emulator.kubeconfig)
    before = metrics.OBJECT_ERRORS.labels("resync")._value.get()
    outcome = resync.resync(CachedServer.from_settings(settings, emulator.kubeconfig).session(), settings, OptIn(settings))
    assert "1 done" in outcome.reason and "1 error" in outcome.reason and "heartbeat: renewed" in outcome.reason
    assert not still_held(api)
    (warning,) = [e for e in events_of(api, "Unprocessable") if e["involvedObject"]["name"] == "broken"]
    assert "KeyError" in warning["message"]
    assert metrics.OBJECT_ERRORS.labels("resync")._value.get() == before + 1


# -- 2/5. cheap to overload no more -----------------------------------------------------------------------------------

def test_pings_that_arrive_while_a_resync_runs_join_it(api, functions):
    """Five pings at once, the first resync's LIST held until the other four have joined it: one resync, five 200s."""
    fn = functions(KAI_FN_API_TIMEOUT_SECONDS="60")
    seed_llama(api)
    started, release = threading.Event(), threading.Event()

    def held_first_list(call):
        if call.verb == "list" and call.resource == "trainjobs" and not started.is_set():
            started.set()
            return Fault(until=release)
        return None

    api.faults = held_first_list
    api.reset_calls()
    joins = joined(fn.url)
    answers: list = []
    first = threading.Thread(target=lambda: answers.append(send(fn.url, ping())))
    first.start()
    assert started.wait(30)
    others = [threading.Thread(target=lambda: answers.append(send(fn.url, ping()))) for _ in range(4)]
    for t in others:
        t.start()
    try:
        until(lambda: joined(fn.url) - joins == 4, 60)  # the four later pings joined the resync under way
    finally:
        release.set()
    for t in [first, *others]:
        t.join(60)
    api.faults = None
    assert [a.status for a in answers] == [200] * 5
    assert [(c.verb, c.resource, c.namespace) for c in api.calls].count(("list", "trainjobs", NS)) == 1  # one resync


def joined(url: str) -> float:
    """``kai_fn_resync_joins_total`` as the function's /metrics gives it now."""
    return scrape(url)[key("kai_fn_resync_joins_total")]


# -- 6. malformed bodies of any shape are 400 ------------------------------------------------------------------------

def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


BAD_BODIES = {
    "100k-deep JSON, structured": (_deep(100_000), "application/cloudevents+json"),
    "100k-deep data, binary": (_deep(100_000), "application/json"),
    "a 5000-digit integer, binary": (b'{"kind": "TrainJob", "n": ' + b"9" * 5000 + b"}", "application/json"),
    "a 5000-digit integer, structured": (b'{"specversion": "1.0", "id": "x", "source": "s", "type": '
                                         b'"dev.knative.apiserver.resource.add", "data": ' + b"9" * 5000 + b"}",
                                         "application/cloudevents+json"),
}


@pytest.mark.parametrize("case", list(BAD_BODIES), ids=list(BAD_BODIES))
def test_a_body_too_deep_or_with_a_number_too_long_is_400_and_calls_nothing(api, function, case):
    body, content_type = BAD_BODIES[case]
    headers = {"Content-Type": content_type}
    if content_type == "application/json":
        headers |= {"ce-specversion": "1.0", "ce-id": "deep", "ce-source": "s",
                    "ce-type": "dev.knative.apiserver.resource.add"}
    import requests
    api.reset_calls()
    answer = requests.post(function.url, data=body, headers=headers, timeout=30)
    assert answer.status_code == 400, answer.text[:200]
    assert len(answer.text.strip().splitlines()) == 1 and api.calls == []
    assert json.loads(json.dumps(answer.text))  # one line of text, not a traceback
