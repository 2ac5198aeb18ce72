"""Bad input (fuzzed headers, bodies, identities, sizes and specs) gets its 4xx and never an API write but a warning.

The events are the TrainJob's and, in the JobSet gate, the held JobSet's (Resource mode: the pass of the TrainJob
that controls it). A valid event for a TrainJob the fuzzed process has decided costs no API call: the process
remembers it by uid, from the first delivery (kai_fn/function/recent.py).
"""
from __future__ import annotations

import collections
import dataclasses
import json
import time
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_fn.commands.invoke import Sample
from tests.ce import ref, resource
from tests.conftest import opt_in_read, sample_object, seed
from tests.reliability import MARKER, MISSING, QUEUE, publish, shape
from tests.builders import held_by_0_2

FUZZ_LIMIT = 65536  # KAI_FN_MAX_BODY_BYTES of the fuzzed server, so "just under the limit" stays cheap
FUZZ_NS = "rel-fuzz"
FUZZ_UID = "0f0f0f0f-1111-4222-8333-444455556666"
UNDECIDED_UID = "0f0f0f0f-7777-4888-9999-aaaabbbbcccc"


def fuzz_trainjob(marked: bool) -> dict[str, Any]:
    """The base TrainJob: a ``marked`` one is decided already (its live JobSet carries kai_fn's decision, and the
    fuzzed process remembers so from its first delivery): a valid event for it costs no API call after that. An
    unmarked one (another uid) needs a pass. The marker in the body is decoration: bodies are never read."""
    tj = sample_object("trainjob-llama-finetune")
    tj["metadata"].update(namespace=FUZZ_NS, name="fuzz", uid=FUZZ_UID if marked else UNDECIDED_UID,
                          resourceVersion="7")
    if marked:
        tj["metadata"]["annotations"] = {MARKER: f"pg-fuzz-{FUZZ_UID}"}
    return tj


def fuzz_jobset(decided: bool = False) -> dict[str, Any]:
    """The JobSet of the marked TrainJob: held, as its event brings it, or ``decided`` as it lives in the cluster."""
    js = held_by_0_2(sample_object("jobset-llama-finetune"))
    js["metadata"].update(namespace=FUZZ_NS, name="fuzz", uid="0f0f0f0f-dddd-4eee-8fff-000011112222",
                          resourceVersion="8")
    js["metadata"]["ownerReferences"][0].update(name="fuzz", uid=FUZZ_UID)
    if decided:
        js["metadata"]["labels"].pop("kai-fn/held", None)
        js["metadata"]["annotations"] = {MARKER: f"pg-fuzz-{FUZZ_UID}"}
        js["spec"]["suspend"] = False
    return js


MARKED_ADD = resource(fuzz_trainjob(True), event_id="fuzz-1")
UNMARKED_ADD = resource(fuzz_trainjob(False), event_id="fuzz-2")
REF_ADD = ref(FUZZ_NS, "fuzz", event_id="fuzz-3")
JOBSET_ADD = resource(fuzz_jobset(), event_id="fuzz-4")


VALID = "the run's valid token"  # Case.authorization: send the token of the fuzzed server's own source


@dataclasses.dataclass(frozen=True)
class Case:
    family: str
    what: str
    headers: dict[str, str]
    body: bytes | Any  # bytes, or an iterator of chunks (sent chunked, without Content-Length)
    statuses: frozenset[int]
    calls_allowed: bool = False  # False: the function must not call the API at all
    # The Authorization header: VALID, None (left out), a value, or a function of the run's tokens giving one.
    authorization: Any = VALID

    def __repr__(self) -> str:
        return f"Case({self.family}: {self.what}; statuses {sorted(self.statuses)})"


HEADER_TEXT = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
NOT_A_STRING = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.lists(
    st.integers(), max_size=2) | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
NOT_A_DNS_NAME = NOT_A_STRING | st.sampled_from(
    ["", "Upper", "under_score", "-leading", "trailing-", "dots..dots", "x" * 254, "spa ce", "ünï"])
NOT_A_DNS_LABEL = NOT_A_DNS_NAME | st.sampled_from(["a.b", "x" * 64])


def body_of(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@st.composite
def garbage_bodies(draw) -> Case:
    """Valid Ce-* headers of a resource add, a body that is not a TrainJob."""
    if draw(st.booleans()):
        body = draw(st.binary(max_size=2048))
        what = f"{len(body)} random bytes"
    else:
        value = draw(JSON)
        body, what = body_of(value), f"random JSON {type(value).__name__}"
    return Case("garbage body", what, dict(MARKED_ADD.headers), body, frozenset({400}))


IDENTITY_FIELDS = {  # path in the resource-mode data -> values that make the event unusable
    ("kind",): NOT_A_STRING | st.sampled_from(["", "trainjob", "Pod", "JobSet"]),
    ("apiVersion",): NOT_A_STRING | st.sampled_from(["", "trainer.kubeflow.org/v1", "v1", "kubeflow.org/v1"]),
    ("metadata",): NOT_A_STRING.filter(lambda v: not isinstance(v, dict)) | st.just("metadata"),
    ("metadata", "name"): NOT_A_DNS_NAME,
    ("metadata", "namespace"): NOT_A_DNS_LABEL,
    ("metadata", "uid"): NOT_A_STRING | st.just(""),
}
REF_FIELDS = {("kind",): IDENTITY_FIELDS[("kind",)], ("apiVersion",): IDENTITY_FIELDS[("apiVersion",)],
              ("name",): NOT_A_DNS_NAME, ("namespace",): NOT_A_DNS_LABEL}


def set_path(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        doc = doc[part]
    if value is MISSING:
        del doc[path[-1]]
    else:
        doc[path[-1]] = value


@st.composite
def broken_identities(draw) -> Case:
    """A TrainJob (or ref) with one identifying field removed or given a value of the wrong type or syntax."""
    is_ref = draw(st.booleans())
    sample = REF_ADD if is_ref else MARKED_ADD
    fields = REF_FIELDS if is_ref else IDENTITY_FIELDS
    path = draw(st.sampled_from(sorted(fields)))
    value = draw(st.just(MISSING) | fields[path])
    data = json.loads(sample.body)
    set_path(data, path, value)
    what = f"{'ref' if is_ref else 'resource'} data.{'.'.join(path)} " + (
        "removed" if value is MISSING else f"= {json.dumps(value)[:40]}")
    return Case("broken identity", what, dict(sample.headers), body_of(data), frozenset({400}))


def _owner(data: dict[str, Any]) -> dict[str, Any]:
    return data["metadata"]["ownerReferences"][0]


JOBSET_MANGLINGS: dict[str, tuple[Any, frozenset[int]]] = {
    # what: (change to the held JobSet's data, statuses): unusable -> 400, owned by no TrainJob or deleted -> 2xx
    "kind Job": (lambda d: d.update(kind="Job"), frozenset({400})),
    "apiVersion jobset.x-k8s.io/v1alpha1": (lambda d: d.update(apiVersion="jobset.x-k8s.io/v1alpha1"),
                                            frozenset({400})),
    "metadata a string": (lambda d: d.update(metadata="metadata"), frozenset({400})),
    "ownerReferences an object": (lambda d: d["metadata"].update(ownerReferences={"kind": "TrainJob"}),
                                  frozenset({400})),
    "ownerReferences a list of strings": (lambda d: d["metadata"].update(ownerReferences=["fuzz"]), frozenset({400})),
    "owner name removed": (lambda d: _owner(d).pop("name"), frozenset({400})),
    "owner name not a DNS name": (lambda d: _owner(d).update(name="Not_A-Name"), frozenset({400})),
    "owner uid removed": (lambda d: _owner(d).pop("uid"), frozenset({400})),
    "owner uid a number": (lambda d: _owner(d).update(uid=7), frozenset({400})),
    "namespace not a DNS label": (lambda d: d["metadata"].update(namespace="a.b"), frozenset({400})),
    "labels not a map of strings": (lambda d: d["metadata"].update(labels={"kai-fn/held": True}), frozenset({400})),
    "no ownerReferences": (lambda d: d["metadata"].pop("ownerReferences"), frozenset({200})),
    "owner not the controller": (lambda d: _owner(d).update(controller=False), frozenset({200})),
    "owner a Deployment": (lambda d: _owner(d).update(kind="Deployment", apiVersion="apps/v1"), frozenset({200})),
    "a delete": (None, frozenset({200})),
    "unchanged (its TrainJob absent)": (lambda d: None, frozenset({200})),
}


def mangled_jobset_event(what: str) -> tuple[dict[str, str], Any, frozenset[int]]:
    """The held JobSet's event with the row ``what`` of JOBSET_MANGLINGS applied (None: made a delete)."""
    change, statuses = JOBSET_MANGLINGS[what]
    headers, data = dict(JOBSET_ADD.headers), json.loads(JOBSET_ADD.body)
    if change is None:
        headers["Ce-Type"] = headers["Ce-Type"].rsplit(".", 1)[0] + ".delete"
    else:
        change(data)
    return headers, data, statuses


@st.composite
def jobset_events(draw) -> Case:
    """The held JobSet's event with one field broken: 400 when unusable, 2xx (ignored) when no TrainJob controls
    it or it is a delete, and when valid, 2xx (ignored) after the read of its TrainJob (absent here): a JobSet's event
    is judged by the JobSet's uid, which no earlier delivery decided."""
    what = draw(st.sampled_from(sorted(JOBSET_MANGLINGS)))
    headers, data, statuses = mangled_jobset_event(what)
    return Case("held JobSet event", what, headers, body_of(data), statuses,
                calls_allowed=what.startswith("unchanged"))


@pytest.mark.parametrize("what", sorted(JOBSET_MANGLINGS), ids=sorted(JOBSET_MANGLINGS))
def test_each_broken_held_jobset_event_gets_its_status_and_no_write(api, function, what):
    """Every row of the table above, each once (the fuzz draws from it too): no call before the answer, but for a
    usable event the read of its TrainJob (absent here: ignored)."""
    headers, data, statuses = mangled_jobset_event(what)
    api.reset_calls()
    answer = requests.post(function.url, data=body_of(data), headers=headers, timeout=10)
    assert answer.status_code in statuses, answer.text[:200]
    usable = what.startswith("unchanged")
    assert [(c.verb, c.resource) for c in api.calls if not opt_in_read(c)] == ([("get", "trainjobs")] if usable else [])
    if 400 in statuses:  # one line saying why
        assert len(answer.text.strip().splitlines()) == 1, answer.text
    else:
        assert answer.headers.get("X-Kai-Fn-Outcome") == "ignored"


REQUIRED = ("Ce-Specversion", "Ce-Id", "Ce-Source", "Ce-Type")
OPTIONAL = ("Ce-Subject", "Ce-Time", "Ce-Kind", "Ce-Apiversion", "Ce-Name", "Ce-Namespace", "Content-Type")
NEAR_MISS_TYPES = ["dev.knative.apiserver.resource.patch", "dev.knative.apiserver.pod.add",
                   "dev.knative.apiserver.resource", "dev.knative.apiserver.", "dev.knative.sources.pingx",
                   "DEV.KNATIVE.APISERVER.RESOURCE.ADD", "dev.knative.apiserver.resource.add.extra"]


def header_expectation(name: str, value: str | None) -> frozenset[int]:
    """What the CloudEvents contract says of one header changed on a valid event for a marked TrainJob."""
    if value is not None:
        value = value.strip()  # HTTP trims optional whitespace around a header value
    if name in REQUIRED and value is None:
        return frozenset({400})  # a required attribute missing
    if name == "Ce-Specversion":
        return frozenset({200} if value in ("1.0", "0.3") else {400})
    if name in ("Ce-Id", "Ce-Type") and not value:
        return frozenset({400})
    if name == "Content-Type" and value and value.startswith("application/cloudevents+json"):
        return frozenset({400})  # structured mode, but the body is a bare TrainJob
    return frozenset({200})  # other types and kinds are ignored; the rest is not read (valid: marked -> skipped)


@st.composite
def mangled_headers(draw) -> Case:
    """One Ce-* header dropped, emptied or garbled (type and kind also set to near misses)."""
    headers = {**MARKED_ADD.headers, "Content-Type": "application/json"}
    name = draw(st.sampled_from(REQUIRED + OPTIONAL))
    choices = st.none() | st.just("") | HEADER_TEXT
    if name == "Ce-Type":
        choices = choices.filter(lambda v: v is None or not v.startswith("dev.knative")) | st.sampled_from(
            NEAR_MISS_TYPES)
    if name == "Ce-Specversion":
        choices = choices | st.sampled_from(["1.0", "0.3", "1", "2.0", "1.0.0"])
    if name == "Content-Type":
        choices = choices | st.sampled_from(["application/cloudevents+json", "text/plain",
                                             "application/cloudevents-batch+json"])
    value = draw(choices)
    if value is None:
        del headers[name]
    else:
        headers[name] = value
    if draw(st.booleans()):  # header names are case-insensitive
        headers = {k.lower(): v for k, v in headers.items()}
    return Case("mangled header", f"{name} {'dropped' if value is None else '= ' + repr(value)}", headers,
                MARKED_ADD.body, header_expectation(name, value))


@st.composite
def ignorable(draw) -> Case:
    """Valid events kai_fn has nothing to do for: deletes, other kinds, other sources' types: 2xx, no call."""
    which = draw(st.sampled_from(["delete", "kind", "type"]))
    sample = draw(st.sampled_from([MARKED_ADD, UNMARKED_ADD, REF_ADD]))
    headers, data = dict(sample.headers), json.loads(sample.body)
    if which == "delete":
        headers["Ce-Type"] = headers["Ce-Type"].rsplit(".", 1)[0] + ".delete"
        what = headers["Ce-Type"]
    elif which == "kind":
        kind = draw(st.sampled_from(["Pod", "TrainingRuntime", "trainjob", "jobset"]) | HEADER_TEXT.filter(
            lambda k: k not in ("TrainJob", "JobSet", "PodGroup")))
        headers["Ce-Kind"] = data["kind"] = kind
        what = f"kind {kind!r}"
    else:
        headers["Ce-Type"] = draw(HEADER_TEXT.filter(lambda t: not t.startswith("dev.knative")))
        what = f"type {headers['Ce-Type']!r}"
    return Case("ignorable", what, headers, body_of(data), frozenset({200}))


def padded(sample: Sample, size: int) -> bytes:
    """The sample's TrainJob with a padding annotation making the body exactly ``size`` bytes (if it can)."""
    data = json.loads(sample.body)
    data["metadata"].setdefault("annotations", {})["example.com/padding"] = ""
    room = size - len(body_of(data))
    data["metadata"]["annotations"]["example.com/padding"] = "p" * max(room, 0)
    body = body_of(data)
    assert len(body) == size, (len(body), size)
    return body


@st.composite
def sizes(draw) -> Case:
    """Bodies at the limit: just under it (valid or not), over it, and over it in chunks with no Content-Length."""
    kind = draw(st.sampled_from(["valid under", "garbage under", "over", "chunked over"]))
    headers = dict(MARKED_ADD.headers)
    if kind == "valid under":
        size = FUZZ_LIMIT - draw(st.integers(0, 64))
        return Case("size", f"valid {size} bytes", headers, padded(MARKED_ADD, size), frozenset({200}))
    if kind == "garbage under":
        size = FUZZ_LIMIT - draw(st.integers(0, 64))
        body = (b'{"kind": "TrainJob", "x": "' + b"y" * FUZZ_LIMIT)[:size]  # cut short: not JSON
        return Case("size", f"truncated JSON {size} bytes", headers, body, frozenset({400}))
    size = FUZZ_LIMIT + draw(st.integers(1, 4096))
    body = padded(MARKED_ADD, size)
    if kind == "over":
        return Case("size", f"valid but {size} bytes", headers, body, frozenset({413}))
    chunk = draw(st.integers(1024, 16384))
    chunks = [body[i:i + chunk] for i in range(0, len(body), chunk)]
    return Case("size", f"{size} bytes in {len(chunks)} chunks", headers, iter(chunks), frozenset({413}))


SPEC_PATHS = st.sampled_from([
    ("spec",), ("spec", "runtimeRef"), ("spec", "runtimeRef", "name"), ("spec", "runtimeRef", "kind"),
    ("spec", "runtimeRef", "apiGroup"), ("spec", "trainer"), ("spec", "trainer", "numNodes"),
    ("spec", "trainer", "resourcesPerNode"), ("spec", "trainer", "resourcesPerNode", "requests"),
    ("spec", "trainer", "resourcesPerNode", "requests", "nvidia.com/gpu"), ("spec", "suspend"),
    ("metadata", "labels"), ("metadata", "labels", QUEUE), ("metadata", "annotations"),
    ("metadata", "annotations", "kai-fn/hold"), ("metadata", "deletionTimestamp"), ("status",),
])


@st.composite
def mangled_specs(draw) -> Case:
    """A well-formed event whose TrainJob has a field removed or replaced by any JSON: the planner must cope."""
    data = json.loads(UNMARKED_ADD.body)
    path = draw(SPEC_PATHS)
    value = draw(st.just(MISSING) | JSON | NOT_A_STRING)
    parent = data
    for part in path[:-1]:
        parent = parent.setdefault(part, {}) if isinstance(parent, dict) else parent
    if value is MISSING:
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = value
    what = f"data.{'.'.join(path)} " + ("removed" if value is MISSING else f"= {json.dumps(value)[:40]}")
    # No JobSet exists: a plannable TrainJob waits for it, anything else is ignored or warned: 2xx either way;
    # labels and annotations that are not maps of strings are refused at the door.
    allowed = {200} | ({400} if path[:2] in (("metadata", "labels"), ("metadata", "annotations")) else set())
    return Case("mangled TrainJob", what, dict(UNMARKED_ADD.headers), body_of(data), frozenset(allowed),
                calls_allowed=True)


@pytest.mark.parametrize("annotations", [True, 5, 0.5, "kai-fn/podgroup", "kai-fn/skipped"],
                         ids=["true", "int", "float", "marker-string", "skipped-string"])
def test_a_trainjob_whose_annotations_are_not_a_map_is_refused_not_a_500(api, function, annotations):
    data = json.loads(UNMARKED_ADD.body)
    data["metadata"]["annotations"] = annotations
    api.reset_calls()
    answer = requests.post(function.url, data=body_of(data), headers=UNMARKED_ADD.headers, timeout=10)
    assert answer.status_code == 400, answer.text[:200]
    assert answer.text.strip() == "data.metadata.annotations: must be a map of strings"
    assert api.calls == []


B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
SEGMENT = st.text(st.sampled_from(B64URL), min_size=1, max_size=60)


def _mangle(token: str, at: int, how: str) -> str:
    """The valid token, changed by one character (or cut or grown): a different token that no one issued."""
    i = at % len(token)
    if how == "cut":
        return token[:i] or token[:-1]
    if how == "grow":
        return token[:i] + "A" + token[i:]
    old = token[i]
    new = "B" if old == "A" else "A"
    return token[:i] + new + token[i + 1:]


@st.composite
def odd_authorizations(draw) -> Case:
    """A valid event for a TrainJob that is done already, with an Authorization no Knative source sends:
    401, or 403 for a real token of a sender not listed; never an API call but the TokenReview. A token the API
    server must review and refuses may also get 429 once this client's refused reviews are spent (kai_fn/function/
    ratelimit.py): the fuzz sends hundreds from one address."""
    kind = draw(st.sampled_from(["absent", "scheme", "bearer-text", "jwt-like", "mangled", "other-audience",
                                 "other-sender", "doubled"]))
    statuses = frozenset({401, 429} if kind in ("jwt-like", "mangled", "other-audience", "doubled") else {401})
    value: Any
    if kind == "absent":
        value, what = None, "no header"
    elif kind == "scheme":
        scheme = draw(st.sampled_from(["Basic", "Digest", "Token", "Bearer:", "Bearerx", "JWT", "Negotiate"])
                      | HEADER_TEXT.filter(lambda s: s.lower() != "bearer"))
        value = f"{scheme} {draw(HEADER_TEXT)}"
        what = value
    elif kind == "bearer-text":
        value = draw(st.sampled_from(["Bearer", "bearer", "BEARER"])) + draw(
            st.sampled_from(["", " ", "  ", " \t "])) + draw(st.just("") | HEADER_TEXT)
        what = repr(value)
    elif kind == "jwt-like":
        value = "Bearer " + ".".join(draw(st.lists(SEGMENT, min_size=3, max_size=3)))
        what = "three random base64url segments"
    elif kind == "mangled":
        at, how = draw(st.integers(0, 10_000)), draw(st.sampled_from(["cut", "grow", "flip"]))
        value, what = (lambda tokens: "Bearer " + _mangle(tokens["valid"], at, how)), f"valid token, {how} at {at}"
    elif kind == "other-audience":
        value, what = (lambda tokens: "Bearer " + tokens["other-audience"]), "a real token for another audience"
    elif kind == "other-sender":
        value, what = (lambda tokens: "Bearer " + tokens["other-sender"]), "a real token of a sender not listed"
        statuses = frozenset({403})
    else:
        value, what = (lambda tokens: f"Bearer {tokens['valid']} {tokens['valid']}"), "the valid token twice"
    return Case("odd Authorization", what, dict(MARKED_ADD.headers), MARKED_ADD.body, statuses, authorization=value)


FUZZ_CASES = 1200
FUZZ_AUDIENCE = "kai-fn"
FUZZ_SENDER = ("kai-fn", "kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource")
CASES = st.one_of(garbage_bodies(), broken_identities(), mangled_headers(), ignorable(), sizes(), mangled_specs(),
                  odd_authorizations(), jobset_events())


@pytest.mark.slow
def test_fuzzed_headers_and_bodies_get_their_status_and_only_a_warning_event_is_ever_written(api, functions):
    """1,200 hypothesis cases (derandomized) against the real server with a 64 KiB body limit and authenticated
    delivery, on a cluster holding the runtime and the marked TrainJob with its decided JobSet: each case's family
    fixes the statuses it may get. The first delivery (the marked TrainJob's) reads both, is decided from the
    JobSet's decision and remembered, so every valid event of it (or of its JobSet) after that costs no call."""
    fn = functions(KAI_FN_MAX_BODY_BYTES=str(FUZZ_LIMIT), KAI_FN_AUDIENCE=FUZZ_AUDIENCE,
                   KAI_FN_SENDERS="system:serviceaccount:{}:{}".format(*FUZZ_SENDER))
    seed(api, sample_object("clustertrainingruntime-torch-kai"), fuzz_trainjob(True), fuzz_jobset(decided=True))
    tokens = {"valid": api.issue_token(*FUZZ_SENDER, [FUZZ_AUDIENCE]),
              "other-audience": api.issue_token(*FUZZ_SENDER, ["https://kubernetes.default.svc.cluster.local"]),
              "other-sender": api.issue_token("rel-fuzz", "default", [FUZZ_AUDIENCE])}
    tally: collections.Counter[tuple[str, int]] = collections.Counter()
    session = requests.Session()
    first = session.post(fn.url, data=MARKED_ADD.body, headers={**MARKED_ADD.headers, "Authorization": "Bearer "
                         + tokens["valid"]}, timeout=10)  # the valid token is reviewed once, here
    assert (first.status_code, first.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped")
    api.reset_calls()
    again = session.post(fn.url, data=JOBSET_ADD.body, headers={**JOBSET_ADD.headers, "Authorization": "Bearer "
                         + tokens["valid"]}, timeout=10)
    assert (again.status_code, again.headers.get("X-Kai-Fn-Outcome")) == (200, "skipped")
    assert api.calls == []  # its JobSet was decided by the first delivery's pass, and remembered
    started = time.perf_counter()

    @settings(max_examples=FUZZ_CASES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(case=CASES)
    def one(case: Case) -> None:
        assert time.perf_counter() - started < 150, "wall-clock guard: the fuzz ran over 150 s"
        api.reset_calls()
        headers = dict(case.headers)
        authorization = case.authorization(tokens) if callable(case.authorization) else case.authorization
        if authorization is not None:
            headers["Authorization"] = "Bearer " + tokens["valid"] if authorization is VALID else authorization
        response = session.post(fn.url, data=case.body, headers=headers, timeout=10)
        tally[(case.family, response.status_code)] += 1
        assert response.status_code in case.statuses, (case, response.text[:200])
        if response.status_code < 300:
            assert response.content == b""
        elif response.status_code == 503:
            assert int(response.headers["Retry-After"]) > 0
        else:
            assert len(response.text.strip().splitlines()) == 1, response.text  # one line saying why
        if response.status_code in (401, 403):  # refused at the door: a TokenReview at most
            assert {(c.verb, c.resource) for c in api.calls} <= {("create", "tokenreviews")}, (case, api.calls)
        elif not case.calls_allowed or response.status_code in (400, 413):
            assert api.calls == [], (case, [shape(c) for c in api.calls])
        # The only write a bad TrainJob may cause is a Warning Event on it.
        bad = [c for c in api.writes() if c.resource != "tokenreviews"
               and not (c.resource == "events" and (c.body or {}).get("type") == "Warning")]
        assert bad == [], (case, [shape(c) for c in bad])

    with session:
        one()
    elapsed = time.perf_counter() - started
    assert requests.get(fn.url + "/healthz", timeout=5).status_code == 200
    assert sum(tally.values()) >= 1000
    families: dict[str, dict[int, int]] = collections.defaultdict(dict)
    for (family, status), n in sorted(tally.items()):
        families[family][status] = n
    publish("Bad input (hypothesis, derandomized)", [
        f"- cases: {sum(tally.values())} in {elapsed:.1f} s against the real server "
        f"(KAI_FN_MAX_BODY_BYTES={FUZZ_LIMIT}, authenticated delivery); 0 unexpected statuses; no write but "
        "Warning Events; "
        "GET /healthz 200 after",
        *[f"- {family}: " + ", ".join(f"{s} x{n}" for s, n in statuses.items())
          for family, statuses in families.items()],
    ])
