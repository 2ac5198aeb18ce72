"""Every LIST of the kube layer is read in pages (``limit`` and ``continue``), keeps what the caller's selector
chooses, and leaves out an object over ``max_object_bytes`` with a log line and a call of the server's
``on_oversized`` hook: a tenant's huge objects cost a page, not the function's memory (issue 39, attack 1)."""
from __future__ import annotations

import logging

import pytest

from kai_fn.kube import ApiServer, api_client
from kai_fn.kube.listing import MAX_OBJECT_BYTES, PAGE_SIZE, Oversized, read_page
from tests.conftest import JOBSET, seed


def jobset(name: str, namespace: str = "team-a", labels: dict[str, str] | None = None,
           tolerations: int = 0) -> dict[str, object]:
    pod = {"containers": [{"name": "node", "image": "trainer:1"}], "tolerations": [{}] * tolerations}
    return {"apiVersion": JOBSET, "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"suspend": True, "replicatedJobs": [
                {"name": "node", "replicas": 1, "template": {"spec": {"template": {"spec": pod}}}}]}}


def test_a_list_is_read_in_pages_and_an_oversized_object_is_left_out_logged_and_reported(api, caplog):
    """Two and a half pages of JobSets and a tenant's 1.3 MB one among them: every other JobSet, once; three
    requests of ``limit`` objects each, the later ones continuing the earlier; the big one named to the hook."""
    count = PAGE_SIZE * 2 + PAGE_SIZE // 2
    seed(api, *(jobset(f"js-{i:03}") for i in range(count)), jobset("js-050x", tolerations=330_000))
    heard: list[Oversized] = []
    session = ApiServer(api_client(str(api.kubeconfig)), 30.0, on_oversized=heard.append).session()
    with caplog.at_level(logging.WARNING, logger="kai_fn"):
        listed = session.list_jobsets()
    lists = [c for c in api.calls if (c.verb, c.resource) == ("list", "jobsets")]
    assert [o["metadata"]["name"] for o in listed] == [f"js-{i:03}" for i in range(count)]
    assert [(c.query.get("limit"), "continue" in c.query) for c in lists] == [
        (str(PAGE_SIZE), False), (str(PAGE_SIZE), True), (str(PAGE_SIZE), True)]
    (big,) = heard
    assert (big.resource, big.namespace, big.name) == ("jobsets", "team-a", "js-050x")
    assert big.size > MAX_OBJECT_BYTES
    assert [r.getMessage() for r in caplog.records] == ["object too large, left out"]


@pytest.mark.parametrize("namespace, selector, listed", [
    (None, "team=x", ["a", "c"]),
    ("team-b", "team=x", ["c"]),
    (None, None, ["a", "b", "c"]),
], ids=["selector", "namespace-and-selector", "everything"])
def test_a_list_is_narrowed_by_the_callers_selector_on_the_server(api, namespace, selector, listed):
    seed(api, jobset("a", labels={"team": "x"}), jobset("b", labels={"team": "y"}),
         jobset("c", namespace="team-b", labels={"team": "x"}))
    session = ApiServer(api_client(str(api.kubeconfig)), 30.0).session()
    assert [o["metadata"]["name"] for o in session.list_jobsets(namespace, selector)] == listed
    (asked,) = [c for c in api.calls if (c.verb, c.resource) == ("list", "jobsets")]
    assert (asked.namespace, asked.query.get("labelSelector")) == (namespace, selector)


@pytest.mark.parametrize("text, match", [
    ('{"items": [1]}', "holds a int"),
    ('{"items": {}}', r"expected '\['"),
    ('[]', r"expected '\{'"),
    ('{"items": [{}', "Expecting|expected"),
], ids=["not-objects", "not-an-array", "not-an-object", "cut-short"])
def test_an_answer_that_is_not_a_list_is_refused(text, match):
    with pytest.raises(ValueError, match=match):
        read_page(text, "jobsets", MAX_OBJECT_BYTES)
