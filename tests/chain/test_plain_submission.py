"""On the chain (Trainer, JobSet and KAI as installed, kai_fn deployed with its admission policy and Knative's own
adapters): a TrainJob submitted the ordinary way is never suspended, from its create to its gang bound. Trainer makes
its JobSet, the policy names its gang at the create (``pod-group-name``, ``kai-fn/named``), nothing is held or
suspended, kai_fn makes the PodGroup, and no pod is bound before it exists: the gang binds whole. Nothing is TooLate,
and kai_fn writes neither the TrainJob nor the JobSet on the way."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client, watch

from kai_fn.core import keys
from kai_fn.local.chain import TRAINER, Chain
from kai_fn.local.podwatch import PodWatch
from kai_fn.function.migration.jobset_hold import HELD_LABEL
from tests.chain.conftest import REPORT, wait_for
from tests.chain.gangs import JOBSET, bound, decision, podgroup, pods, table, trainjob_events

NODES = 2


class Versions:
    """Every version of the objects of one kind in one namespace, as a watch delivers them."""

    def __init__(self, api: client.ApiClient, resource: tuple[str, str, str], namespace: str) -> None:
        self.objs, self.resource, self.namespace = client.CustomObjectsApi(api), resource, namespace
        self.seen: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        group, version, plural = self.resource
        listed = self.objs.list_namespaced_custom_object(group, version, self.namespace, plural)
        self._ready.set()
        while not self._stop.is_set():
            for event in watch.Watch().stream(self.objs.list_namespaced_custom_object, group, version,
                                              self.namespace, plural, timeout_seconds=2,
                                              resource_version=listed["metadata"]["resourceVersion"]):
                self.seen.append(event["object"])
                listed["metadata"]["resourceVersion"] = event["object"]["metadata"]["resourceVersion"]
                if self._stop.is_set():
                    break

    @contextmanager
    def running(self) -> Iterator[Versions]:
        self._thread.start()
        self._ready.wait(10)
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=10)

    def of(self, name: str) -> list[dict[str, Any]]:
        return [o for o in self.seen if o["metadata"]["name"] == name]


def test_a_plainly_submitted_trainjob_is_never_suspended_and_binds_whole(chain: Chain, pool, namespaces):
    nodes = pool("plain-sub")
    nodes.ensure(f"{NODES}x8")
    ns = namespaces("plain-sub")
    chain.runtime(ns, pool=nodes.name)
    seen = lambda: table(chain, ns)  # noqa: E731
    with (Versions(chain.api, (*TRAINER, "trainjobs"), ns).running() as trainjobs,
          Versions(chain.api, (*JOBSET, "jobsets"), ns).running() as jobsets,
          PodWatch(chain.api, ns, check_groups=True) as watched):
        made = chain.trainjob(ns, "plain", num_nodes=NODES)
        assert made["spec"].get("suspend") is False
        trainers = wait_for("the gang binds whole", lambda: len(bound(ps := pods(chain, ns, "plain"))) == NODES
                            and ps, deadline_s=90, explain=seen)
        wait_for("kai_fn tells the TrainJob GangBound", lambda: "GangBound" in trainjob_events(chain, ns, "plain"),
                 deadline_s=60)

    versions = trainjobs.of("plain")
    assert versions, "the watch saw the TrainJob"
    assert [v["spec"].get("suspend") for v in versions if v["spec"].get("suspend")] == [], \
        "the TrainJob was suspended on its way to a bound gang"
    writers = {entry["manager"] for v in versions for entry in v["metadata"].get("managedFields") or []}
    assert keys.FIELD_MANAGER not in writers, f"kai_fn wrote the TrainJob: managers {sorted(writers)}"
    assert not any(k.startswith("kai-fn/") for k in versions[-1]["metadata"].get("annotations") or {})

    seen = jobsets.of("plain")
    assert seen and all(not v["spec"].get("suspend") for v in seen), "the JobSet was suspended on its way"
    assert all(HELD_LABEL not in (v["metadata"].get("labels") or {}) for v in seen), "the JobSet was held"
    assert all((v["metadata"].get("labels") or {}).get(keys.NAMED_LABEL) == "true" for v in seen), \
        "the JobSet was named from its create"
    group = podgroup(chain, ns, "plain")
    assert group is not None
    assert {name for v in seen for name in names_on(v).values()} == {group["metadata"]["name"]}, \
        "every version of every pod template named the gang"
    writers = {entry["manager"] for v in seen for entry in v["metadata"].get("managedFields") or []}
    assert keys.FIELD_MANAGER not in writers, f"kai_fn wrote the JobSet: managers {sorted(writers)}"
    assert decision(chain, ns, "plain") == {keys.NAMED_LABEL: "true"}, "kai_fn's only mark is the policy's"
    assert watched.violations == [], "a pod was bound before its PodGroup existed"
    assert len(watched.snapshot()) == NODES and all(p.group == group["metadata"]["name"] for p in watched.snapshot())
    assert {p.metadata.annotations["pod-group-name"] for p in trainers} == {group["metadata"]["name"]}
    assert "TooLate" not in trainjob_events(chain, ns, "plain")
    REPORT.append(f"plain submission: the JobSet went through {len({v['metadata']['resourceVersion'] for v in seen})}"
                  f" resourceVersions, never held, the TrainJob through {len(versions)} (Trainer's status writes)")


def names_on(jobset: dict) -> dict[str, str | None]:
    return {rj["name"]: ((rj["template"]["spec"]["template"].get("metadata") or {}).get("annotations") or {}).get(
        keys.KAI_POD_GROUP_ANNOTATION) for rj in jobset["spec"]["replicatedJobs"]}
