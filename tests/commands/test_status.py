"""``python -m kai_fn status``: one line per TrainJob in kai_fn's scope, in every state kai_fn can leave one, what needs
attention first; exit 0 when nothing is held longer than ``--held-for``, 1 when something is, 2 for bad input or no
cluster; plainly saying when held TrainJobs have no function to release them.

Against the emulator: the real function makes the gangs and refusals, the test plays KAI, Trainer and the admission
policy; its JobSets are the previous version's held ones (suspended, labelled ``kai-fn/held``; TrainJobs are
submitted plainly), which kai_fn's migration releases.
"""
from __future__ import annotations

import copy
import datetime
import json
import os
import re
import subprocess
import sys

import pytest

from kai_fn.commands import cli
from tests.builders import jobset_for, unreachable_kubeconfig
from tests.ce import resource, send
from tests.commands.test_cli import REPO
from tests.commands.test_explain import _gpt_large, _running_unsuspended, _runtime_missing
from tests.commands.test_explain import _released_bound as _bound_by_its_pods
from tests.commands.test_explain import _released_unschedulable as _waiting_kai_says
from tests.commands.test_explain import _released_waiting as _waiting_kai_silent
from tests.conftest import JOBSET, KAI_PG, TRAINER, sample_object, seed
from tests.function.test_function import NAME, NS, PG, seed_llama
from tests.function.test_gang_status import OVER_LIMIT, kai_says, released

LEASE_API = "coordination.k8s.io/v1"
MARKED = {"kai-fn/schedule-timeout-seconds": "600"}  # its author's kai-fn/ mark: in kai_fn's scope

# Each test seeds the samples' uids again, and a process remembers the uids whose JobSet it decided.
pytestmark = pytest.mark.usefixtures("forgetful")


@pytest.fixture(autouse=True)
def parent_queue(api):
    seed(api, sample_object("queue-default-parent"))


def status(api, *args: str, capsys) -> tuple[int, str, str]:
    code = cli.main(["status", "--kubeconfig", api.kubeconfig, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def lines(api, capsys, *args: str) -> dict[str, dict]:
    code, out, _ = status(api, "-o", "json", *args, capsys=capsys)
    assert code in (0, 1)
    return {item["name"]: item for item in json.loads(out)}


def ago(**delta) -> str:
    return (datetime.datetime.now(datetime.UTC) - datetime.timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def trainjob(sample: str = "trainjob-llama-finetune", *, name: str | None = None, namespace: str = NS,
             notes: dict | None = None, age: dict | None = None, suspend: bool | None = None) -> dict:
    """A sample TrainJob, renamed and re-uid'd when asked, as its author submitted it (``suspend`` None: plainly)."""
    tj = copy.deepcopy(sample_object(sample))
    meta = tj["metadata"]
    if name:
        meta["name"], meta["uid"] = name, f"uid-{name}"
    meta["namespace"] = namespace
    meta["annotations"] = {**(meta.get("annotations") or {}), **(notes or {})}
    if age:
        meta["creationTimestamp"] = ago(**age)
    tj["spec"].pop("suspend", None)
    if suspend is not None:
        tj["spec"]["suspend"] = suspend
    return tj


def held(*, name: str | None = None, namespace: str = NS, notes: dict | None = None, age: dict | None = None,
         suspend: bool | None = None) -> tuple[dict, ...]:
    """A TrainJob (see :func:`trainjob`) and its JobSet as the admission policy holds it, not yet decided; and what
    kai_fn's pass reads to decide it (its runtime and Queue), by which it would make its gang: not refused."""
    tj = trainjob(name=name, namespace=namespace, notes=notes, age=age, suspend=suspend)
    js = jobset_for(tj, sample_object("clustertrainingruntime-torch-kai"), held=True,
                    uid=f"js-{tj['metadata']['uid']}")
    if age:
        js["metadata"]["creationTimestamp"] = tj["metadata"]["creationTimestamp"]
    return tj, js, sample_object("clustertrainingruntime-torch-kai"), sample_object("queue-team-a")


def set_notes(api, api_version: str, kind: str, name: str, **changes) -> None:
    """Set (a value) or remove (None) annotations of an object of llama-finetune's namespace."""
    obj = api.get(api_version, kind, NS, name)
    notes = obj["metadata"].setdefault("annotations", {})
    for key, value in changes.items():
        key = key.replace("__", "/").replace("_", "-")
        if value is None:
            notes.pop(key, None)
        else:
            notes[key] = value
    api.put(obj)


def heartbeat(api, **delta) -> None:
    """The Lease as the function leaves it after a resync ``delta`` ago."""
    renewed = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    seed(api, {"apiVersion": LEASE_API, "kind": "Lease", "metadata": {"name": "kai-fn-resync", "namespace": "kai-fn"},
               "spec": {"holderIdentity": "kai-fn-00001", "leaseDurationSeconds": 180, "renewTime": renewed}})


# -- every state, as kai_fn leaves it ----------------------------------------------------------------------------

def _held_by_the_policy(api, url):
    seed_llama(api)
    return NAME


def _no_jobset_yet(api, url):
    seed_llama(api, jobset=False)
    return NAME


def _blocked_by_the_queue(api, url):
    _gpt_large(api, url)
    assert send(url, resource(api.get(TRAINER, "TrainJob", NS, "gpt-large"))).status == 200
    return "gpt-large"


def _blocked_without_runtime(api, url):
    _runtime_missing(api, url)
    send(url, resource(api.get(TRAINER, "TrainJob", NS, NAME)))
    return NAME


def _waiting_on_a_stage(api, url):
    """An initializer stage's PodGroup (named after the main one, same labels) is where KAI's reason is."""
    released(api, url)
    stage = copy.deepcopy(api.get(KAI_PG, "PodGroup", NS, PG))
    stage["metadata"]["name"] = f"{PG}-init"
    for key in ("resourceVersion", "uid", "creationTimestamp"):
        stage["metadata"].pop(key, None)
    seed(api, stage)
    kai_says(api, {"reason": "Unschedulable", "message": "no node has 64Gi free"}, name=f"{PG}-init")
    return NAME


def _bound_as_marked(api, url):
    released(api, url)
    set_notes(api, KAI_PG, "PodGroup", PG, kai_fn__bound=ago(minutes=3))  # the mark is the main PodGroup's
    return NAME


def _timed_out_waiting(api, url):
    released(api, url)
    kai_says(api, OVER_LIMIT)
    set_notes(api, JOBSET, "JobSet", NAME, kai_fn__released_at=ago(minutes=10))
    set_notes(api, KAI_PG, "PodGroup", PG, kai_fn__timed_out=ago(minutes=9))
    return NAME


def _timed_out_suspended(api, url):
    """KAI_FN_ON_TIMEOUT=suspend suspended the TrainJob, and Trainer its JobSet."""
    released(api, url)
    set_notes(api, JOBSET, "JobSet", NAME, kai_fn__released_at=None)
    set_notes(api, KAI_PG, "PodGroup", PG, kai_fn__timed_out=ago(minutes=1))
    for api_version, kind in ((TRAINER, "TrainJob"), (JOBSET, "JobSet")):
        obj = api.get(api_version, kind, NS, NAME)
        obj["spec"]["suspend"] = True
        api.put(obj)
    return NAME


def _held_by_hold(api, url):
    seed_llama(api, trainjob=trainjob(notes={"kai-fn/hold": "true"}))
    assert send(url, resource(api.get(TRAINER, "TrainJob", NS, NAME))).status == 200
    return NAME


def _gang_made_kueue_suspended(api, url):
    tj = trainjob(suspend=True)
    tj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq"
    seed_llama(api, trainjob=tj)
    assert send(url, resource(api.get(TRAINER, "TrainJob", NS, NAME))).status == 200
    return NAME


def _out_of_scope_released(api, url):
    rt, tj = sample_object("clustertrainingruntime-torch"), trainjob("trainjob-resnet-eval")
    seed(api, rt, tj, jobset_for(tj, rt, held=True))  # the policy held it: its pods ask for no scheduler
    assert send(url, resource(api.get(TRAINER, "TrainJob", NS, "resnet-eval"))).status == 200
    return "resnet-eval"


def _too_late(api, url):
    _running_unsuspended(api, url)
    send(url, resource(api.get(TRAINER, "TrainJob", NS, "whisper-asr")))
    return "whisper-asr"


def _ran_never_held(api, url):
    """No policy held its JobSet (the policy not installed yet, say), and kai_fn has not seen it."""
    tj = trainjob(notes=MARKED, suspend=False)
    seed(api, tj, jobset_for(tj, sample_object("clustertrainingruntime-torch-kai"), suspend=False))
    return NAME


STATES = {
    "its JobSet held by the policy, not yet decided": (
        _held_by_the_policy, "held", r"its JobSet waits suspended while its TrainJob runs; kai_fn has not made its gang"),
    "Trainer has not made its JobSet": (_no_jobset_yet, "held", r"Trainer has not made its JobSet yet"),
    "refused by the queue pre-check": (_blocked_by_the_queue, "blocked", r"^GangExceedsQueue: .*team-a-small"),
    "refused: no runtime": (_blocked_without_runtime, "blocked", r"^RuntimeNotFound: ClusterTrainingRuntime"),
    "released, KAI silent": (_waiting_kai_silent, "waiting", r"not placed it yet \(0 of minMember 4 pods bound\)"),
    "released, KAI says why": (_waiting_kai_says, "waiting", r"^KAI: OverLimit \(queue team-a\): gpu limit 4"),
    "released, KAI says why on a stage's PodGroup": (_waiting_on_a_stage, "waiting",
                                                     r"^KAI: Unschedulable: no node has 64Gi free"),
    "every pod on a node": (_bound_by_its_pods, "bound", r"every pod of the gang is on a node"),
    "marked bound, pods gone since": (_bound_as_marked, "bound", r"every pod"),
    "timed out, still waiting": (_timed_out_waiting, "timed-out", r"still waiting; KAI: OverLimit"),
    "timed out and suspended again": (_timed_out_suspended, "timed-out", r"suspended again"),
    "gang made, its JobSet held by kai-fn/hold": (_held_by_hold, "suspended", r"^kai-fn/hold is true"),
    "gang made, left suspended for Kueue": (_gang_made_kueue_suspended, "suspended",
                                            r"gang made, left suspended: Kueue admits it"),
    "out of scope, released without a gang": (_out_of_scope_released, "running-without-gang", r"does not ask for KAI"),
    "submitted running: too late": (_too_late, "running-without-gang", r"^TooLate"),
    "its JobSet ran, never held": (_ran_never_held, "running-without-gang", r"ran without being named"),
}


@pytest.mark.parametrize("setup, state, reason", STATES.values(), ids=list(STATES))
def test_each_trainjob_gets_its_state_and_reason_and_nothing_is_written(api, function, capsys, setup, state, reason):
    name = setup(api, function.url)
    api.reset_calls()
    item = lines(api, capsys, "-n", NS)[name]
    assert (item["state"], item["namespace"]) == (state, NS)
    assert re.search(reason, item["reason"]), item["reason"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", item["since"])
    assert api.writes() == []


def test_every_state_is_covered():
    from kai_fn.core.state import Phase
    assert {state for _, state, _ in STATES.values()} == set(Phase)


def test_a_released_gang_shows_its_queue_size_gpus_and_podgroup(api, function, capsys):
    _waiting_kai_says(api, function.url)
    item = lines(api, capsys)[NAME]
    assert (item["queue"], item["minMember"], item["gpus"], item["podGroup"]) == ("team-a", 4, "8", PG)


def test_a_trainjob_kai_fn_never_touched_and_that_does_not_ask_for_kai_is_not_listed(api, capsys):
    seed(api, sample_object("trainjob-resnet-eval"))
    code, out, _ = status(api, capsys=capsys)
    assert (code, out.strip()) == (0, "no TrainJob in kai_fn's scope")


# -- exit codes, --held-for, sorting, output -----------------------------------------------------------------------

HELD_FOR = {  # (how long it has been held, --held-for or None for the default 2m, exit code)
    "held 30s, default 2m": (dict(seconds=30), None, 0),
    "held 3m, default 2m": (dict(minutes=3), None, 1),
    "held 3m, --held-for 5m": (dict(minutes=3), "5m", 0),
    "held 3m, --held-for 90s": (dict(minutes=3), "90s", 1),
    "held 3m, --held-for 1h": (dict(minutes=3), "1h", 0),
}


@pytest.mark.parametrize("age, held_for, code", HELD_FOR.values(), ids=list(HELD_FOR))
def test_exit_1_only_when_something_is_held_longer_than_held_for(api, capsys, age, held_for, code):
    heartbeat(api, seconds=10)
    seed(api, *held(age=age))
    got, _, _ = status(api, *(["--held-for", held_for] if held_for else []), capsys=capsys)
    assert got == code


def test_held_past_held_for_but_within_a_resync_period_says_the_next_resync_may_release_it(api, capsys):
    seed(api, *held(age=dict(seconds=30)))
    api.reset_calls()
    code, out, _ = status(api, "--held-for", "10s", capsys=capsys)
    assert code == 1 and "leases" not in {c.resource for c in api.calls}
    assert out.splitlines()[-1].startswith("1 TrainJob(s) held longer than 10s, none yet longer than a resync period "
                                           "(60s): kai_fn's next resync may still release them")


def test_blocked_waiting_and_bound_trainjobs_alone_exit_0(api, function, capsys):
    _blocked_by_the_queue(api, function.url)
    _bound_by_its_pods(api, function.url)
    code, out, _ = status(api, capsys=capsys)
    assert code == 0 and "blocked" in out and "bound" in out


FAIL_ON = {  # (--fail-on, exit code) with one blocked TrainJob and one bound one
    "not asked": ([], 0),
    "blocked": (["--fail-on", "blocked"], 1),
    "blocked,timed-out": (["--fail-on", "blocked,timed-out"], 1),
    "timed-out only": (["--fail-on", "timed-out"], 0),
    "bound": (["--fail-on", "bound"], 1),
}


@pytest.mark.parametrize("args, code", FAIL_ON.values(), ids=list(FAIL_ON))
def test_fail_on_exits_1_when_a_trainjob_is_in_a_state_it_names(api, function, capsys, args, code):
    _blocked_by_the_queue(api, function.url)
    _bound_by_its_pods(api, function.url)
    got, out, _ = status(api, *args, capsys=capsys)
    assert got == code
    assert ("(--fail-on): exit 1" in out) is (code == 1), out


def test_fail_on_held_counts_only_what_is_held_longer_than_held_for(api, capsys):
    heartbeat(api, seconds=10)
    seed(api, *held(age=dict(seconds=30)))
    assert status(api, "--fail-on", "held", capsys=capsys)[0] == 0
    assert status(api, "--fail-on", "held", "--held-for", "10s", capsys=capsys)[0] == 1


def test_what_needs_attention_comes_first_the_longest_held_first(api, function, capsys):
    heartbeat(api, seconds=5)
    _bound_by_its_pods(api, function.url)
    _blocked_by_the_queue(api, function.url)
    seed(api, *held(name="young", age=dict(seconds=20)), *held(name="old", namespace="team-b", age=dict(minutes=30)),
         *held(name="hold", notes={"kai-fn/hold": "true"}))
    code, out, _ = status(api, "-o", "json", capsys=capsys)
    assert code == 1
    assert [(i["name"], i["state"]) for i in json.loads(out)] == [
        ("old", "held"), ("young", "held"), ("gpt-large", "blocked"), ("hold", "suspended"), (NAME, "bound")]


def test_the_text_table_has_one_aligned_line_per_trainjob_and_wide_adds_the_podgroup(api, function, capsys):
    _waiting_kai_says(api, function.url)
    seed(api, *held(name="held-one"))
    _, out, _ = status(api, capsys=capsys)
    header, *rows = out.strip().splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "STATE", "SINCE", "QUEUE", "GANG", "GPUS", "REASON"]
    assert [r.split()[:3] for r in rows] == [[NS, "held-one", "held"], [NS, NAME, "waiting"]]
    assert re.search(rf"^{NS} +{NAME} +waiting +\d+s +team-a +4 +8 +KAI: OverLimit", rows[1])
    assert all(len(r) <= len(header) + 80 for r in rows), "the reason is cut to a few words"
    _, wide, _ = status(api, "-o", "wide", capsys=capsys)
    assert wide.splitlines()[0].split()[-1] == "PODGROUP" and PG in wide and OVER_LIMIT["message"] in wide


def test_json_is_a_list_of_objects_with_namespace_name_state_reason_since(api, capsys):
    seed(api, *held(age=dict(minutes=5)))
    heartbeat(api, seconds=1)
    code, out, err = status(api, "-o", "json", capsys=capsys)
    (item,) = json.loads(out)
    assert code == 1 and err.startswith("1 TrainJob(s) held longer than 2m, while kai_fn's resync runs")
    assert item.keys() >= {"namespace", "name", "state", "reason", "since"} and item["stranded"] is False
    created = api.get(TRAINER, "TrainJob", NS, NAME)["metadata"]["creationTimestamp"]
    assert item["since"] == created


def test_namespace_narrows_the_lists_to_it(api, capsys):
    seed(api, *held(name="here"), *held(name="there", namespace="team-b"))
    api.reset_calls()
    assert set(lines(api, capsys, "-n", "team-b")) == {"there"}
    cluster_scoped = ("leases", "clustertrainingruntimes", "queues")
    assert {c.namespace for c in api.calls if c.resource not in cluster_scoped} == {"team-b"}


# -- the function looks absent ---------------------------------------------------------------------------------

ABSENT = {  # (how the heartbeat looks, held for, stranded?)
    "no Lease at all, held 5m": (None, dict(minutes=5), True),
    "Lease renewed 10m ago, held 5m": (dict(minutes=10), dict(minutes=5), True),
    "Lease renewed 20s ago, held 5m": (dict(seconds=20), dict(minutes=5), False),
    "no Lease, held 30s (less than a resync period)": (None, dict(seconds=30), False),
}


@pytest.mark.parametrize("renewed, held_for, stranded", ABSENT.values(), ids=list(ABSENT))
def test_held_longer_than_a_resync_period_with_no_fresh_heartbeat_says_the_function_looks_absent(
        api, capsys, renewed, held_for, stranded):
    if renewed is not None:
        heartbeat(api, **renewed)
    seed(api, *held(age=held_for))
    _, out, _ = status(api, capsys=capsys)
    assert ("kai_fn looks absent" in out) is stranded
    if stranded:
        assert re.search(r"^team-a +llama-finetune +held +\d+m .*kai_fn looks absent", out, re.M)
        assert "python -m kai_fn release --held -A --yes --reason" in out
        _, out, err = status(api, "-o", "json", "-n", NS, capsys=capsys)
        assert json.loads(out)[0]["stranded"] is True
        assert err.startswith("kai_fn looks absent: ") and "release --held -n team-a" in err


def test_the_heartbeat_is_read_only_when_something_is_held_longer_than_a_resync_period(api, function, capsys):
    _waiting_kai_silent(api, function.url)
    seed(api, *held(name="new"))
    api.reset_calls()
    status(api, capsys=capsys)
    assert "leases" not in {c.resource for c in api.calls}


def test_the_cost_is_a_few_lists_whatever_the_number_of_trainjobs(api, function, capsys):
    _waiting_kai_silent(api, function.url)
    seed(api, *(obj for i in range(12) for obj in held(name=f"held-{i}", namespace=f"ns-{i % 3}", age=dict(minutes=5))))
    api.reset_calls()
    status(api, capsys=capsys)
    calls = sorted((c.verb, c.resource) for c in api.calls)
    # one GET of the runtime they share and one LIST of the Queues: their gang as planned, and kai_fn's decision
    assert calls == [("get", "clustertrainingruntimes"), ("get", "leases"), ("list", "jobsets"), ("list", "podgroups"),
                     ("list", "pods"), ("list", "queues"), ("list", "trainjobs")]


# -- bad input, no cluster ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, env, message", [
    (["--held-for", "soon"], {}, "error: 'soon': expected a duration such as 90s, 2m or 1h"),
    (["--heartbeat", "nope"], {}, "error: 'nope': expected NAMESPACE/NAME of the heartbeat Lease"),
    ([], {"KAI_FN_HEARTBEAT_LEASE": "nope"}, "error: invalid setting KAI_FN_HEARTBEAT_LEASE"),
    (["-n", "team-a", "-A"], {}, "usage: "),
    (["--fail-on", "stuck"], {}, "usage: "),
])
def test_bad_input_is_exit_2_with_one_line_naming_it_and_no_traceback(api, args, env, message):
    done = subprocess.run([sys.executable, "-m", "kai_fn", "status", "--kubeconfig", api.kubeconfig, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env=os.environ | env)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.startswith(message) and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1 or message == "usage: "


def test_no_kubeconfig_is_exit_2_naming_the_path(tmp_path, capsys):
    code = cli.main(["status", "--kubeconfig", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert err == f"error: no Kubernetes API to talk to: not in a cluster, and the kubeconfig --kubeconfig " \
                  f"{tmp_path / 'none'}: no such file\n"


@pytest.mark.parametrize("kubeconfig, named", [
    ("{tmp}/a:{tmp}/b", "KUBECONFIG={tmp}/a:{tmp}/b: no such file"),
    ("", "~/.kube/config (KUBECONFIG is unset): no such file"),
])
def test_without_the_option_the_kubeconfig_kubectl_would_read_is_named(tmp_path, monkeypatch, capsys, kubeconfig,
                                                                        named):
    monkeypatch.setenv("KUBECONFIG", kubeconfig.format(tmp=tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli.main(["status"]) == 2
    assert capsys.readouterr().err.endswith(f"the kubeconfig {named.format(tmp=tmp_path)}\n")


def test_a_cluster_that_does_not_answer_is_exit_2(tmp_path, capsys):
    config = unreachable_kubeconfig(tmp_path)
    code = cli.main(["status", "--kubeconfig", str(config)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: cannot read the cluster: API unreachable")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("setup, reason", [(_blocked_by_the_queue, r"^GangExceedsQueue: .*team-a-small"),
                                           (_blocked_without_runtime, r"^RuntimeNotFound: ClusterTrainingRuntime")],
                         ids=["refused by the queue pre-check", "refused: no runtime"])
def test_a_refusal_outlasts_its_warning_status_still_says_blocked_and_release_held_leaves_it(
        api, function, capsys, setup, reason):
    """Events expire (an hour by default) and any writer may delete them: the refusal is kai_fn's decision on the
    live objects, made again by each reader (kai_fn/commands/verdicts.py), never read back from its Warning."""
    from tests.commands.test_release import REASON, release
    name = setup(api, function.url)
    for event in api.list("v1", "Event", NS):
        api.delete("v1", "Event", NS, event["metadata"]["name"])
    item = lines(api, capsys, "-n", NS)[name]
    assert item["state"] == "blocked" and re.search(reason, item["reason"]), item
    api.reset_calls()
    code, out, _ = release(api, "--held", "-n", NS, "--yes", "--reason", REASON, capsys=capsys)
    assert (code, api.writes()) == (0, []), out  # nothing held: the blocked one is not a candidate


@pytest.mark.parametrize("setup, state, reason", STATES.values(), ids=list(STATES))
def test_explain_reads_every_state_as_status_does(api, function, capsys, setup, state, reason):
    """One reading of where a TrainJob stands (kai_fn/core/state.py), whoever asks: ``explain``'s reading is the
    line ``status`` prints for it, over every state the table above leaves one in."""
    from tests.commands.test_explain import explain
    name = setup(api, function.url)
    _, out, _ = explain(api, f"{NS}/{name}", "-o", "json", capsys=capsys)
    reading = json.loads(out)["reading"]
    line = lines(api, capsys, "-n", NS)[name]
    assert reading == {k: v for k, v in line.items() if k != "stranded"} and reading["state"] == state


def function_pass(api, name: str):
    """One pass of the function on the TrainJob as it is now (what its log line reports), in this process."""
    from kai_fn import settings as settings_mod
    from kai_fn.function import reconcile
    from kai_fn.function.cluster import CachedServer
    from kai_fn.function.events import TrainJobEvent
    settings = settings_mod.load()
    session = CachedServer.from_settings(settings, api.kubeconfig).session()
    event = TrainJobEvent(id="table", type="dev.knative.apiserver.ref.update", mode="ref", namespace=NS, name=name)
    return reconcile.pass_of(event, session, settings)


def function_look(api, name: str):
    """The function's look at the TrainJob's gang, as a PodGroup update of its main PodGroup brings it (its work's
    log line), in this process."""
    from kai_fn import settings as settings_mod
    from kai_fn.function import gang_status
    from kai_fn.function.cluster import CachedServer
    from kai_fn.function.events import PodGroupEvent
    settings = settings_mod.load()
    session = CachedServer.from_settings(settings, api.kubeconfig).session()
    uid = api.get(TRAINER, "TrainJob", NS, name)["metadata"]["uid"]
    main = api.get(KAI_PG, "PodGroup", NS, f"pg-{name}-{uid}")
    event = PodGroupEvent(id="table", type="dev.knative.apiserver.resource.update", namespace=NS,
                          name=main["metadata"]["name"], uid=main["metadata"]["uid"], object=main)
    return gang_status.look(event, session, settings)


# The rows where a pass, having nothing to do, cannot tell the phase without reading more than it needs to act (the
# gang decided on its JobSet, whose PodGroup it does not read; a released gang not marked bound, which only its pods
# call bound): its log line then carries no phase, rather than a guess. The function's look at the gang (a PodGroup
# event's work, which reads the pods) tells it.
PASS_CANNOT_TELL = {"released, KAI silent", "released, KAI says why", "released, KAI says why on a stage's PodGroup",
                    "every pod on a node", "marked bound, pods gone since", "timed out, still waiting",
                    "timed out and suspended again", "gang made, left suspended for Kueue"}


@pytest.mark.parametrize("row", list(STATES))
def test_the_function_status_and_explain_report_one_state_for_the_same_objects(api, function, capsys, row):
    """After a pass of the function on each row's objects, the phase its Outcome (and log line) carries is the state
    ``status`` and ``explain`` read on the objects it left (kai_fn/core/state.py); where the pass cannot tell, the
    function's look at the gang (a PodGroup event's work) tells it."""
    from tests.commands.test_explain import explain
    setup, _, _ = STATES[row]
    name = setup(api, function.url)
    said = function_pass(api, name)
    looked = function_look(api, name) if row in PASS_CANNOT_TELL else None
    line = lines(api, capsys, "-n", NS)[name]
    _, out, _ = explain(api, f"{NS}/{name}", "-o", "json", capsys=capsys)
    assert json.loads(out)["reading"]["state"] == line["state"]
    assert said.phase == (None if row in PASS_CANNOT_TELL else line["state"]), said
    assert looked is None or looked.phase == line["state"], looked
