"""Uninstalling kai_fn in the order knative/README.md documents, on the real API server with the admission policy:
the policy first, then the function, then ``release --held`` as the last step. Every JobSet the policy named ends
with its gang made, by the function or by ``release --held``, none is left owed, and nothing is ever suspended. On the way, the
function's heartbeat is renewed under its real Role, and ``status`` and ``release`` read and write with the real API's
shapes (SelfSubjectReview included).

The testbed is shared by the session: ``status`` and ``release`` are narrowed to this test's namespace with ``-n``
where the README says ``-A``, and the function's RBAC (step 3's ``kubectl delete -k``) stays for the other tests:
what matters here is that no function runs any more.
"""
from __future__ import annotations

import copy
import datetime
import time
from typing import TYPE_CHECKING, Any

from kubernetes import client

from kai_fn.commands import cli
from kai_fn.core import keys
from kai_fn.local.emulator import naming
from kai_fn.function.migration.jobset_hold import HELD_LABEL
from tests.ce import ping, resource, send
from tests.conftest import sample_object
from tests.testbed.conftest import wait_for
from tests.testbed.kai_fn_install import (
    NAMESPACE, POLICY, TRAINER, admission_policy, create_trainjob, enabled_namespace, function_process, seed_samples,
    trainjob,
)
from tests.builders import held_by_0_2

if TYPE_CHECKING:
    from tests.testbed.conftest import LiveCluster

JOBSET = ("jobset.x-k8s.io", "v1alpha2")


def _status(testbed: LiveCluster, namespace: str) -> int:
    """``status --held-for 0s``: exit 0 only when nothing at all is held."""
    return cli.main(["status", "-n", namespace, "--held-for", "0s", "--kubeconfig", str(testbed.kubeconfig)])


def _with_jobset(testbed: LiveCluster, job: dict[str, Any], *, named: bool = False) -> dict[str, Any]:
    """The sample JobSet, owned by the TrainJob just created, as Trainer would make it (no Trainer runs here): the
    policy names it while it is installed; ``named``: as the policy wrote it in its last moment."""
    jobset = copy.deepcopy(held_by_0_2(sample_object("jobset-llama-finetune")))
    meta = jobset["metadata"]
    meta.pop("uid", None)
    meta["labels"].pop(HELD_LABEL)  # the sample shows the previous version's hold
    jobset["spec"]["suspend"] = False
    meta["name"], meta["namespace"] = job["metadata"]["name"], job["metadata"]["namespace"]
    meta["ownerReferences"][0] |= {"name": job["metadata"]["name"], "uid": job["metadata"]["uid"]}
    if named:
        jobset = naming.named(jobset)
    return client.CustomObjectsApi(testbed.api).create_namespaced_custom_object(*JOBSET, meta["namespace"], "jobsets",
                                                                                jobset)


def _lease_renewed(testbed: LiveCluster) -> datetime.datetime | None:
    lease = client.CoordinationV1Api(testbed.api).read_namespaced_lease("kai-fn-resync", NAMESPACE)
    return lease.spec.renew_time


def test_uninstalling_in_the_documented_order_leaves_no_gang_owed(testbed: LiveCluster, capsys):
    seed_samples(testbed)
    objs = client.CustomObjectsApi(testbed.api)
    submitted: list[str] = []
    in_scope: list[str] = []

    def submit(name: str, *, gang: bool = False, named: bool = False) -> dict[str, Any]:
        """Plainly, as a user does: out of scope on torch-distributed (no JobSet here), or the llama sample (4 x 2
        GPUs, queue team-a) with its JobSet; the named JobSet's event is what the JobSet source would deliver."""
        if gang:
            body = copy.deepcopy(sample_object("trainjob-llama-finetune"))
            body["metadata"] = {"name": name, "labels": body["metadata"]["labels"]}
        else:
            body = trainjob(name, "torch-distributed")
        job = create_trainjob(testbed, namespace, body)
        submitted.append(name)
        if not gang:
            return job
        in_scope.append(name)
        return _with_jobset(testbed, job, named=named)

    with admission_policy(testbed):
        namespace = enabled_namespace(testbed, "uninstall")
        with function_process(testbed) as fn:
            before = time.time()
            # Running as usual: the source delivers the named JobSet, the function makes its gang.
            assert send(fn.url, resource(submit("before", gang=True))).status == 200
            # 1. The admission policy first. What it named just before, whose events the sources (going down with
            # the rest) never deliver, and what it may still name while the API server unloads it.
            submit("during-out-of-scope")
            submit("during-in-scope", gang=True)
            testbed.kubectl("delete", "mutatingadmissionpolicybindings.admissionregistration.k8s.io", POLICY)
            testbed.kubectl("delete", "mutatingadmissionpolicies.admissionregistration.k8s.io", POLICY)
            submit("while-unloading", gang=True)
            # 2. The function makes the gangs of what the policy named (the PingSource's resync, every minute),
            # until status says nothing is owed.
            wait_for("status -n NS --held-for 0s exits 0",
                     lambda: send(fn.url, ping()).status == 200 and _status(testbed, namespace) == 0, 60)
            renewed = _lease_renewed(testbed)
            assert renewed is not None and renewed.timestamp() >= before - 1, "the heartbeat, under the real Role"
        # 3. The function and its sources are gone. What the policy named in its last moment (as it writes it)
        # now has no one to make its gang: its pods would wait.
        submit("last-moment", gang=True, named=True)
        submit("after")
        capsys.readouterr()
        assert _status(testbed, namespace) == 1
        assert "last-moment" in capsys.readouterr().out
    # 4. Last: release what is still owed: its gang made from kai_fn's plan, with the operator's credentials.
    code = cli.main(["release", "--held", "-n", namespace, "--yes", "--reason", "kai-fn uninstalled",
                     "--kubeconfig", str(testbed.kubeconfig)])
    out = capsys.readouterr().out
    assert code == 0 and f"released {namespace}/last-moment with its gang" in out, out

    trainjobs = {name: objs.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name) for name in submitted}
    assert {name: tj["spec"].get("suspend") for name, tj in trainjobs.items()} == dict.fromkeys(submitted, False)
    jobsets = {name: objs.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", name) for name in in_scope}
    assert {name: js["spec"].get("suspend") for name, js in jobsets.items()} == dict.fromkeys(in_scope, False)
    gangs = {pg["metadata"]["name"] for pg in objs.list_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", namespace, "podgroups")["items"]}
    named = [n for n, js in jobsets.items() if (js["metadata"].get("labels") or {}).get(keys.NAMED_LABEL)]
    assert {"before", "during-in-scope", "last-moment"} <= set(named)
    assert [n for n in named if f"pg-{n}-{trainjobs[n]['metadata']['uid']}" not in gangs] == [], "a gang owed"
    events = client.CoreV1Api(testbed.api).list_namespaced_event(
        namespace, field_selector="reason=ReleasedByOperator").items
    (event,) = [e for e in events if e.involved_object.name == "last-moment"]
    assert event.type == "Normal" and "kai-fn uninstalled" in event.message
    assert "released with its gang by " in event.message and "unidentified" not in event.message
    assert _status(testbed, namespace) == 0
    client.CoreV1Api(testbed.api).delete_namespace(namespace)
