"""``python -m kai_fn status`` and ``release`` on the chain, run as an operator runs them (the CLI, the admin
kubeconfig), against what kai_fn and KAI really did.

1. Every state the chain can produce, one TrainJob each: ``blocked`` (the queue pre-check), ``timed-out`` (the
   schedule timeout, suspended again), ``waiting`` (with KAI's own reason), ``suspended`` (``kai-fn/hold``),
   ``bound``, in that order; ``held`` in 2. A TrainJob whose pods never ask for KAI is neither held nor listed.
2. An outage: the function killed (SIGKILL, as a crash); the pods of TrainJobs submitted plainly meanwhile are named
   at admission and wait unbound (none binds without a gang); ``status --held-for 10s`` exits 1 naming them once
   they are held that long; ``release`` of two makes their gang from kai_fn's plan with the operator's credentials
   and they bind whole; the function restarted makes the third one's gang, and none twice.

The heartbeat: ``status`` calls the function absent only when something is held longer than a resync period (60 s)
and the Lease is older than its ``leaseDurationSeconds`` (180 s, as the function writes it). Waiting that out would
add over three minutes, so 2 reads the cluster as it stands with ``status``'s clock moved past the window: while the
function is down nothing renews the Lease or releases a held TrainJob, so that reading is the one an operator gets
minutes later. In real time it checks the other side: within the window, ``status`` does not call it absent.
"""
from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys

from kubernetes import client

from kai_fn.commands import status as status_cmd
from kai_fn.core import keys
from kai_fn.kube import lease as heartbeat
from kai_fn import settings as settings_mod
from kai_fn.local.chain import NAMESPACE, PODGROUP_APIS, TRAINER, Chain, for_scheduler, sample
from kai_fn.local.process import REPO
from tests.chain.conftest import REPORT, wait_for
from tests.chain.gangs import (bound, decision, jobset, kai_reasons, podgroup, pods, queue, table, trainjob,
                               trainjob_warnings)

QUEUE_LABEL = "kai.scheduler/queue"
LEASE = "kai-fn-resync"


def kai_fn(chain: Chain, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m kai_fn ARGS --kubeconfig <the chain's admin kubeconfig>``, as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "kai_fn", *args, "--kubeconfig", str(chain.kubeconfig)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def states(chain: Chain, ns: str) -> tuple[int, list[dict]]:
    done = kai_fn(chain, "status", "-n", ns, "--held-for", "10s", "-o", "json")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def renewed(chain: Chain) -> datetime.datetime | None:
    """When the resync last renewed the heartbeat Lease."""
    return client.CoordinationV1Api(chain.api).read_namespaced_lease(LEASE, NAMESPACE).spec.renew_time


def out_of_scope_runtime(chain: Chain, ns: str, pool: str) -> None:
    """A runtime that does not ask for KAI (no queue label), its pods on kube-scheduler's default profile."""
    rt = for_scheduler(sample("clustertrainingruntime-chain.yaml"), "default-scheduler")
    rt["kind"] = "TrainingRuntime"
    rt["metadata"] = {"name": "plain", "namespace": ns, "labels": {"trainer.kubeflow.org/framework": "torch"}}
    for rj in rt["spec"]["template"]["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["spec"]["nodeSelector"] = {"kai-fn.testbed/pool": pool}
    client.CustomObjectsApi(chain.api).create_namespaced_custom_object(*TRAINER, ns, "trainingruntimes", rt)


def kai_fn_podgroups(chain: Chain, ns: str, trainjob_name: str | None = None) -> list[str]:
    selector = f"{keys.MANAGED_BY_LABEL}={keys.MANAGED_BY}"
    if trainjob_name:
        selector += f",{keys.TRAINJOB_NAME_LABEL}={trainjob_name}"
    found = client.CustomObjectsApi(chain.api).list_namespaced_custom_object(
        *PODGROUP_APIS["kai"], ns, "podgroups", label_selector=selector)
    return [pg["metadata"]["name"] for pg in found["items"]]


def test_status_reads_every_state_kai_fn_and_kai_leave_a_trainjob_in(chain, pool, queues, namespaces):
    nodes = pool("status")
    nodes.ensure("4x8")
    ns = namespaces("status")
    small = queues(queue(ns, parent=queues(queue(f"{ns}-parent")), gpu_limit=16))
    chain.runtime(ns, pool=nodes.name)
    out_of_scope_runtime(chain, ns, nodes.name)
    seen = lambda: table(chain, ns)  # noqa: E731

    chain.trainjob(ns, "bound", num_nodes=1)
    wait_for("a gang of one node binds", lambda: len(bound(pods(chain, ns, "bound"))) == 1, explain=seen)
    chain.trainjob(ns, "waiting", num_nodes=4)  # 4 x 8 GPUs on the 3 nodes left: never
    chain.trainjob(ns, "late", num_nodes=4, annotations={keys.SCHEDULE_TIMEOUT_ANNOTATION: "15"})
    chain.trainjob(ns, "kept", num_nodes=1, annotations={keys.HOLD_ANNOTATION: "true"})
    chain.trainjob(ns, "too-big", num_nodes=3, labels={QUEUE_LABEL: small})  # 24 GPUs over the queue's limit of 16
    chain.trainjob(ns, "plain", runtime="plain", num_nodes=1)

    wait_for("KAI says why the 4-node gang waits", lambda: (g := podgroup(chain, ns, "waiting")) and kai_reasons(g),
             explain=seen)
    told = wait_for("kai_fn tells its TrainJob GangUnschedulable",
                    lambda: trainjob_warnings(chain, ns, "waiting", "GangUnschedulable"))
    assert all("\n" not in m and m.endswith(".") for m in told), told  # KAI's words as whole sentences, one line
    wait_for("the late gang times out and is suspended again", lambda: trainjob_warnings(chain, ns, "late",
             "ScheduleTimeout") and trainjob(chain, ns, "late")["spec"]["suspend"], deadline_s=90)
    wait_for("the pre-check refuses the gang its queue can never hold",
             lambda: trainjob_warnings(chain, ns, "too-big", "GangExceedsQueue"))
    kept = wait_for("the kept TrainJob's pods exist, named, and wait", lambda: pods(chain, ns, "kept"))
    assert bound(kept) == [] and kai_fn_podgroups(chain, ns, "kept") == [], "no gang made while kai-fn/hold is true"
    assert decision(chain, ns, "kept") == {keys.NAMED_LABEL: "true"}
    plain = wait_for("the out-of-scope TrainJob's JobSet", lambda: jobset(chain, ns, "plain"))
    assert plain["spec"]["suspend"] is False and decision(chain, ns, "plain") == {}, "never named, never touched"

    code, items = states(chain, ns)
    assert code == 0  # nothing held
    assert [(i["name"], i["state"]) for i in items] == [
        ("too-big", "blocked"), ("late", "timed-out"), ("waiting", "waiting"), ("kept", "suspended"),
        ("bound", "bound")]  # what needs attention first; "plain" never asked for KAI
    by = {i["name"]: i for i in items}
    assert by["too-big"]["reason"].startswith("GangExceedsQueue: ") and small in by["too-big"]["reason"]
    assert by["late"]["reason"].startswith("not bound within its schedule timeout; suspended again")
    assert re.match(r"KAI: PodSchedulingErrors: Resources were found for \d pods while 4 are required for gang "
                    r"scheduling\.", by["waiting"]["reason"]), by["waiting"]["reason"]
    assert by["kept"]["reason"] == f"{keys.HOLD_ANNOTATION} is true"
    assert (by["bound"]["queue"], by["bound"]["minMember"], by["bound"]["gpus"]) == ("default-queue", 1, "8")
    text = kai_fn(chain, "status", "-n", ns)
    assert text.returncode == 0
    assert [line.split()[1:3] for line in text.stdout.splitlines()[1:]] == [[i["name"], i["state"]] for i in items]
    REPORT.append("status on the chain: " + ", ".join(f"{i['name']} {i['state']}" for i in items))


def test_with_the_function_down_pods_wait_unbound_release_makes_their_gang_and_a_restart_makes_the_rest(
        chain, pool, namespaces):
    nodes = pool("outage")
    nodes.ensure("3x8")
    ns = namespaces("outage")
    chain.runtime(ns, pool=nodes.name)
    seen = lambda: table(chain, ns)  # noqa: E731
    wait_for("the resync renews the heartbeat Lease", lambda: renewed(chain))
    held, waits = ["during-1", "during-2"], "during-3"
    function = chain.function
    try:
        function.kill()
        for name in [*held, waits]:
            chain.trainjob(ns, name, num_nodes=1)
        wait_for("their pods exist, named at admission", lambda: all(pods(chain, ns, n) for n in [*held, waits]),
                 explain=seen)
        _, items = states(chain, ns)
        assert [(i["name"], i["state"]) for i in items] == [(name, "held") for name in [*held, waits]]

        # made one after another: status exits 1 with the first of them, and counts all three once each is late
        late = wait_for("status exits 1 once all three are held longer than --held-for",
                        lambda: (done := kai_fn(chain, "status", "-n", ns, "--held-for", "10s")).returncode == 1
                        and "3 TrainJob(s) held longer than 10s" in done.stdout and done, deadline_s=60)
        rows = {line.split()[1]: line.split()[2] for line in late.stdout.splitlines()[1:] if line.startswith(ns)}
        assert rows == dict.fromkeys([*held, waits], "held")
        assert "looks absent" not in late.stdout  # within the heartbeat's window: not yet
        assert all(bound(pods(chain, ns, n)) == [] for n in [*held, waits]), "a pod bound with kai_fn down"

        # The same cluster, read as status reads it once the heartbeat's window (180 s) has passed.
        later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=heartbeat.LEASE_SECONDS + 60)
        code, text, _ = status_cmd.run(ns, str(chain.kubeconfig), "text", "10s", None, settings_mod.load(), now=later)
        assert code == 1
        assert re.search(r"^kai_fn looks absent: no resync for \d+m \(Lease kai-fn/kai-fn-resync last renewed ", text,
                         re.M), text
        assert all(re.search(rf"^{ns} +{name} +held .*kai_fn looks absent; ", text, re.M) for name in held), text
        assert f"python -m kai_fn release --held -n {ns} --yes --reason" in text

        dry = kai_fn(chain, "release", *(f"{ns}/{name}" for name in held))
        assert dry.returncode == 1 and "would release, with its gang made from kai_fn's plan:" in dry.stdout
        assert kai_fn_podgroups(chain, ns) == [], "nothing written without --yes"
        done = kai_fn(chain, "release", *(f"{ns}/{name}" for name in held), "--yes", "--reason",
                      "kai-fn down, chain test")
        assert done.returncode == 0, done.stdout + done.stderr
        assert sorted(done.stdout.splitlines()) == [f"released {ns}/{name} with its gang" for name in held]
        wait_for("the released gangs bind whole", lambda: all(len(bound(pods(chain, ns, n))) == 1 for n in held),
                 explain=seen)
        for name in held:
            assert trainjob(chain, ns, name)["spec"].get("suspend") is False, "the TrainJob is never suspended"
            assert jobset(chain, ns, name)["spec"].get("suspend") is not True
            (event,) = [e for e in client.CoreV1Api(chain.api).list_namespaced_event(
                ns, field_selector=f"involvedObject.name={name}").items if e.reason == "ReleasedByOperator"]
            assert event.type == "Normal" and "released with its gang by admin: kai-fn down, chain test" in event.message
        assert bound(pods(chain, ns, waits)) == [], "the one not released still waits for kai_fn"

        restarted = datetime.datetime.now(datetime.UTC)
        function.start()
        wait_for("the restarted function makes the gang it owes, and it binds whole",
                 lambda: podgroup(chain, ns, waits) and len(bound(pods(chain, ns, waits))) == 1, explain=seen)
        wait_for("a resync ran since the restart", lambda: renewed(chain) > restarted, deadline_s=60)
    finally:
        if function.proc is None or function.proc.poll() is not None:
            function.start()  # the next scenario needs it

    names = [*held, waits]
    assert sorted(kai_fn_podgroups(chain, ns)) == sorted(podgroup(chain, ns, n)["metadata"]["name"] for n in names), \
        "one gang each: none made twice"
    code, items = states(chain, ns)
    assert code == 0
    assert {i["name"]: i["state"] for i in items} == dict.fromkeys(names, "bound")
    REPORT.append(f"outage: pods waited unbound; status exit 1 naming {names}; {held} released with their gang by "
                  f"the operator; after the restart {waits} got its gang; one gang each")
