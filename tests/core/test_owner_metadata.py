"""The PodGroup's metadata as KAI's podgrouper would set it (kai_fn/core/owner_metadata.py): one row per field of
issue 30's table. tests/testbed/test_podgrouper_parity.py checks the same against KAI's own code."""
from __future__ import annotations

import json
from typing import Any

import pytest

from kai_fn.core import duration
from kai_fn.core.owner_metadata import KaiCluster, top_owner_metadata, type_defaults
from kai_fn.core.plan import plan
from tests.builders import UID, rjob, runtime, trainjob, typed

PCS = frozenset({"train", "build", "inference"})


def defaults(*types: dict[str, str]) -> dict[str, str]:
    return {"types": json.dumps(list(types))}


def pod_template(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
                 **spec: Any) -> dict[str, Any]:
    job = rjob(pod_spec=spec)
    job["template"]["spec"]["template"]["metadata"] = {"labels": labels or {}, "annotations": annotations or {}}
    return job


def with_template_metadata(rt: dict[str, Any], labels: dict[str, str] | None = None,
                           annotations: dict[str, str] | None = None) -> dict[str, Any]:
    rt["spec"]["template"]["metadata"] = {"labels": labels or {}, "annotations": annotations or {}}
    return rt


def podgroup(job: dict[str, Any] | None = None, rt: dict[str, Any] | None = None,
             cluster: KaiCluster | None = None) -> dict[str, Any]:
    result = plan(*typed(job or trainjob(), rt or runtime()), cluster=cluster or KaiCluster(priority_classes=PCS))
    assert result.podgroup is not None, result.problems
    return result.podgroup


CM = dict(defaults_configured=True, priority_classes=PCS)
PRIORITY = [
    pytest.param(trainjob(labels={"priorityClassName": "build"}), runtime(), KaiCluster(priority_classes=PCS),
                 "build", id="the-owner-label"),
    pytest.param(trainjob(), runtime(pod_template(labels={"priorityClassName": "inference"})),
                 KaiCluster(priority_classes=PCS), "inference", id="the-pod-label"),
    pytest.param(trainjob(), runtime(pod_template(priorityClassName="build")), KaiCluster(priority_classes=PCS),
                 "build", id="the-pod-spec"),
    pytest.param(trainjob(), runtime(), KaiCluster(priority_classes=PCS), "train", id="nothing-named-train"),
    pytest.param(trainjob(labels={"priorityClassName": "gone"}), runtime(pod_template(priorityClassName="build")),
                 KaiCluster(priority_classes=PCS), "train", id="a-missing-owner-class-is-passed-over-not-the-pod"),
    pytest.param(trainjob(), runtime(), KaiCluster(**CM, defaults=defaults(
        {"typeName": "TrainJob", "group": "trainer.kubeflow.org", "priorityName": "inference"})),
                 "inference", id="the-trainjob-kinds-default"),
    pytest.param(trainjob(labels={"priorityClassName": "build"}), runtime(), KaiCluster(**CM, defaults=defaults(
        {"typeName": "TrainJob", "priorityName": "inference"})),
                 "inference", id="the-trainjob-default-beats-the-trainjobs-own-label-as-in-kai"),
    pytest.param(trainjob(), runtime(), KaiCluster(**CM, defaults=defaults(
        {"typeName": "JobSet", "group": "jobset.x-k8s.io", "priorityName": "build"})), "build",
                 id="the-jobset-kinds-default"),
    pytest.param(trainjob(), runtime(), KaiCluster(**CM, defaults=defaults({"typeName": "JobSet", "priorityName": "x"})),
                 "train", id="a-default-that-does-not-exist-falls-to-train"),
    pytest.param(trainjob(labels={"priorityClassName": "gone"}), runtime(), KaiCluster(**CM, defaults=None),
                 "train", id="a-configured-configmap-that-is-missing"),
]


@pytest.mark.parametrize(("job", "rt", "cluster", "expected"), PRIORITY)
def test_priority_class_comes_from_where_kais_podgrouper_takes_it(job, rt, cluster, expected):
    assert podgroup(job, rt, cluster)["spec"]["priorityClassName"] == expected


PREEMPTIBILITY = [
    pytest.param({"kai.scheduler/preemptibility": "non-preemptible"}, {}, None, "non-preemptible", id="owner-label"),
    pytest.param({}, {"kai.scheduler/preemptibility": "preemptible"}, None, "preemptible", id="pod-label"),
    pytest.param({}, {}, defaults({"typeName": "TrainJob", "preemptibility": "non-preemptible"}), "non-preemptible",
                 id="the-trainjob-default"),
    pytest.param({}, {}, defaults({"typeName": "JobSet", "preemptibility": "Preemptible"}), "preemptible",
                 id="the-jobset-default-in-any-case"),
    pytest.param({}, {}, None, None, id="none"),
]


@pytest.mark.parametrize(("job_labels", "pod_labels", "data", "expected"), PREEMPTIBILITY)
def test_preemptibility_comes_from_labels_then_kais_defaults(job_labels, pod_labels, data, expected):
    cluster = KaiCluster(priority_classes=PCS, defaults_configured=data is not None, defaults=data)
    spec = podgroup(trainjob(labels=job_labels), runtime(pod_template(labels=pod_labels)), cluster)["spec"]
    assert spec.get("preemptibility") == expected


QUEUE = [
    pytest.param({"kai.scheduler/queue": "job-q"}, {}, {}, "job-q", id="the-trainjob-label"),
    pytest.param({"kai.scheduler/queue": "job-q"}, {"kai.scheduler/queue": "template-q"}, {}, "template-q",
                 id="the-jobset-label-wins-as-in-kai"),
    pytest.param({}, {}, {"kai.scheduler/queue": "pod-q"}, "pod-q", id="the-pod-label-before-the-runtimes"),
    pytest.param({"project": "team"}, {}, {}, "team", id="the-project"),
    pytest.param({"project": "team"}, {}, {"kai.scheduler/node-pool": "a100"}, "team-a100", id="the-project-and-pool"),
    pytest.param({}, {}, {}, "rt-queue", id="kai-fns-own-sources-last"),
]


@pytest.mark.parametrize(("job_labels", "template_labels", "pod_labels", "expected"), QUEUE)
def test_queue_comes_from_kais_sources_then_kai_fns(job_labels, template_labels, pod_labels, expected):
    rt = with_template_metadata(runtime(pod_template(labels=pod_labels)), labels=template_labels)
    assert podgroup(trainjob(labels=job_labels), rt)["spec"]["queue"] == expected


def test_the_owners_labels_and_annotations_the_node_pool_and_the_top_owner_reach_the_podgroup():
    job = trainjob(labels={"team": "a", "kai-fn/hold": "x", "app.kubernetes.io/managed-by": "someone"},
                   annotations={"note": "from-job", "kai-fn/hold": "true"})
    rt = with_template_metadata(runtime(pod_template(labels={"kai.scheduler/node-pool": "pool-a", "user": "ann"},
                                                     annotations={"user": "ann-note"})),
                                labels={"team": "b"}, annotations={"note": "from-template"})
    meta = podgroup(job, rt)["metadata"]
    assert meta["labels"] == {"team": "b", "kai.scheduler/node-pool": "pool-a", "user": "ann",
                              "app.kubernetes.io/managed-by": "kai-fn", "kai-fn/trainjob": "job",
                              "kai-fn/trainjob-uid": UID}
    assert meta["annotations"]["note"] == "from-template" and meta["annotations"]["user"] == "ann-note"
    assert "kai-fn/hold" not in meta["annotations"]
    assert meta["annotations"]["kai.scheduler/top-owner-metadata"] == (
        f"name: job\nuid: {UID}\ngroup: trainer.kubeflow.org\nversion: v1alpha1\nkind: TrainJob\n")


def test_the_node_pool_label_key_is_kais_flag():
    rt = runtime(pod_template(labels={"pool": "b", "kai.scheduler/node-pool": "a"}))
    labels = podgroup(rt=rt, cluster=KaiCluster(priority_classes=PCS, node_pool_label="pool"))["metadata"]["labels"]
    assert labels["pool"] == "b" and "kai.scheduler/node-pool" not in labels


DURATIONS = [
    pytest.param({"kai.scheduler/preemption-delay": "90s"}, {}, "preemptionDelay", "1m30s", id="delay-in-gos-form"),
    pytest.param({}, {"kai.scheduler/preemption-delay": "5m"}, "preemptionDelay", "5m0s", id="delay-from-the-pod"),
    pytest.param({"kai.scheduler/preemption-delay": "-5s"}, {"kai.scheduler/preemption-delay": "2s"},
                 "preemptionDelay", "2s", id="a-negative-delay-is-ignored"),
    pytest.param({}, {}, "preemptionDelay", None, id="no-delay"),
    pytest.param({"kai.scheduler/staleness-grace-period": "2m"}, {}, "stalenessGracePeriod", "2m0s",
                 id="staleness-the-user-asks-for"),
    pytest.param({"kai.scheduler/staleness-grace-period": "soon"}, {}, "stalenessGracePeriod", "-1s",
                 id="a-bad-staleness-leaves-kai-fns-default"),
    pytest.param({}, {}, "stalenessGracePeriod", "-1s", id="kai-fns-default-where-nothing-is-said"),
]


@pytest.mark.parametrize(("job_notes", "pod_notes", "field", "expected"), DURATIONS)
def test_preemption_delay_and_staleness_as_kai_writes_them(job_notes, pod_notes, field, expected):
    spec = podgroup(trainjob(annotations=job_notes), runtime(pod_template(annotations=pod_notes)))["spec"]
    assert spec.get(field) == expected


def topology_job(name: str, notes: dict[str, str], **kw: Any) -> dict[str, Any]:
    job = rjob(name, **kw)
    job["template"].setdefault("metadata", {})["annotations"] = notes
    return job


TOPO = {"kai.scheduler/topology": "racks", "kai.scheduler/topology-required-placement": "rack"}


def test_a_replicated_jobs_own_topology_becomes_its_gangs_when_it_is_the_gang():
    pg = podgroup(rt=runtime(topology_job("node", TOPO)))
    assert pg["spec"]["topologyConstraint"] == {"topology": "racks", "requiredTopologyLevel": "rack"}


def test_a_replicated_jobs_topology_kai_fn_cannot_hold_flat_is_a_warning():
    rt = runtime(topology_job("init", TOPO, ancestor="dataset-initializer"), rjob("node", depends_on=["init"]))
    result = plan(*typed(trainjob(), rt))
    assert "topologyConstraint" not in result.podgroup["spec"]
    assert [p.blocking for p in result.problems if "not applied" in p.message] == [False]


def test_kais_defaults_configmap_is_read_as_its_json_decoder_reads_it():
    cluster = KaiCluster(defaults_configured=True, defaults={"types": '[{"TYPENAME": "JobSet", "priorityName": "b"}]'})
    assert type_defaults(cluster)["JobSet"].priority_class == "b"
    assert type_defaults(KaiCluster(defaults_configured=True, defaults={"types": "{"})) is None
    assert type_defaults(KaiCluster(defaults_configured=True, defaults={})) is None
    assert type_defaults(KaiCluster()) == {}


@pytest.mark.parametrize(("text", "expected"), [("90s", "1m30s"), ("1h", "1h0m0s"), ("1.5s", "1.5s"),
                                                ("500ms", "500ms"), ("-1s", "-1s"), ("0", "0s"), ("2us", "2µs"),
                                                ("1h2m3.004s", "1h2m3.004s"), ("5", None), ("", None), ("1e3s", None)])
def test_durations_parse_and_print_as_go_does(text, expected):
    ns = duration.parse(text)
    assert (None if ns is None else duration.text(ns)) == expected


@pytest.mark.parametrize(("uid", "line"), [(UID, f"uid: {UID}"), ("123", 'uid: "123"'), ("1e5", 'uid: "1e5"'),
                                           ("yes", 'uid: "yes"')])
def test_top_owner_metadata_quotes_what_yaml_would_read_as_another_type(uid, line):
    assert top_owner_metadata("job", uid).splitlines()[1] == line
