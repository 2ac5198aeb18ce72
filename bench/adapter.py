"""``python -m bench.adapter``: what Knative's own ApiServerSource adapter does with each answer of its sink, measured
on a running testbed (``./run.sh cluster up``; ``KAI_FN_TESTBED_DIR`` picks it) with a scripted sink on loopback.

Every scenario runs knative/base's TrainJob source (kai_fn/local/adapter.py, the real ``apiserver_receive_adapter``)
on namespaces of its own and makes real changes on the API server; the sink records when each try arrived and
answers what the scenario says. Prints a Markdown section for knative/README.md; asserts nothing (the behaviours
kai_fn relies on are pinned, by count and order, in tests/testbed/test_adapter_delivery.py).
"""
from __future__ import annotations

import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client, config

from kai_fn.local.adapter import RealApiServerSource, load, narrowed
from kai_fn.local.process import REPO, free_port
from kai_fn.local.sink import Answer, Request, ScriptedSink

TRAINJOBS = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
ENABLED = {"kai-fn.io/enabled": "true"}
LAB = "kai-fn.lab/run"
_RETRIES = re.compile(r"\((\d+)x\)")


@dataclass
class Lab:
    """Fresh labelled namespaces, TrainJobs in them, and the real adapter of knative/base's TrainJob source
    watching only this lab's namespaces."""

    api: client.ApiClient
    logs: Path
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    made: list[str] = field(default_factory=list)

    def namespaces(self, n: int) -> list[str]:
        core = client.CoreV1Api(self.api)
        names = [f"lab-{self.tag}-{len(self.made) + i}" for i in range(n)]
        for name in names:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
                name=name, labels={**ENABLED, LAB: self.tag})))
        self.made += names
        return names

    @contextmanager
    def adapter(self, sink: str, name: str = "kai-fn-trainjobs") -> Iterator[RealApiServerSource]:
        spec = narrowed(load(REPO / "knative" / "base" / "apiserversource.yaml"), {LAB: self.tag})
        with RealApiServerSource(self.api, spec, sink, self.logs / f"{name}-{self.tag}.log") as src:
            yield src

    def create(self, namespace: str, name: str) -> float:
        body = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
                "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": True}}
        client.CustomObjectsApi(self.api).create_namespaced_custom_object(*TRAINJOBS[:2], namespace, TRAINJOBS[2],
                                                                          body)
        return time.monotonic()

    def touch(self, namespace: str, name: str) -> None:
        client.CustomObjectsApi(self.api).patch_namespaced_custom_object(
            *TRAINJOBS[:2], namespace, TRAINJOBS[2], name, {"metadata": {"labels": {"touched": str(time.time_ns())}}})

    def cleanup(self) -> None:
        core = client.CoreV1Api(self.api)
        for name in self.made:
            core.delete_namespace(name)
        self.made.clear()


def named(requests: list[Request], name: str) -> list[Request]:
    return [r for r in requests if r.ce.get("name") == name]


def gaps(tries: list[Request]) -> list[float]:
    return [round(b.started - a.started, 2) for a, b in zip(tries, tries[1:])]


# -- scenarios -----------------------------------------------------------------------------------------------------

@dataclass
class Burst:
    events: int
    delivered: int
    max_in_flight: int
    in_order: bool  # each namespace's adds arrived in the order the TrainJobs were created
    seconds: float  # first create to last answer


def burst(lab: Lab, n: int, namespaces: int = 1, delay: float = 0.05, timeout: float = 60) -> Burst:
    """``n`` TrainJobs created back to back, round-robin over ``namespaces``; the sink takes ``delay`` per answer."""
    nss = lab.namespaces(namespaces)
    with ScriptedSink(lambda r, i: Answer(200, delay)) as sink, lab.adapter(sink.url):
        start = time.monotonic()
        order = [(nss[i % namespaces], f"tj-{i:03d}") for i in range(n)]
        for ns, name in order:
            lab.create(ns, name)
        sink.wait(lambda got: len(got) >= n, timeout)
        got = sink.settle(0.5, 5)
    in_order = all([r.ce["name"] for r in got if r.ce["namespace"] == ns] == [m for s, m in order if s == ns]
                   for ns in nss)
    return Burst(n, len(got), sink.max_in_flight, in_order, round(max(r.ended for r in got) - start, 2))


@dataclass
class Answered:
    answer: str
    tries: int  # deliveries of the event the sink refused
    gaps: list[float]  # seconds between its tries
    next_delivered: bool  # the event after it (same namespace) came anyway
    next_waited: float  # seconds from the next TrainJob's create to its delivery
    next_behind: bool  # the next event's delivery began only after the last answer to this one (one at a time)
    dropped: bool  # the refused event never came back


def answered(lab: Lab, answer: Answer, label: str = "", timeout: float = 30) -> Answered:
    """The sink answers ``answer`` to every try of TrainJob ``first``, 200 to the rest; ``next`` is created right
    after ``first``, in the same namespace."""
    (ns,) = lab.namespaces(1)
    with ScriptedSink(lambda r, i: answer if r.ce.get("name") == "first" else Answer(200)) as sink, \
            lab.adapter(sink.url):
        lab.create(ns, "first")
        created = lab.create(ns, "next")
        sink.wait(lambda got: bool(named(got, "next")), timeout)
        got = sink.settle(1.0, 10)
    first, after = named(got, "first"), named(got, "next")
    return Answered(label or str(answer.status), len(first), gaps(first), bool(after),
                    round(after[0].started - created, 2) if after else -1.0,
                    bool(first and after and after[0].started >= first[-1].ended),
                    not (first and 200 <= first[-1].status < 300))


@dataclass
class Down:
    created: int
    delivered: list[str]  # what arrived once the sink was back, in order
    failures_logged: list[int]  # the adapter's "failed to send" lines: retries each (sdk-go's "(Nx)")
    first_failure_after: float  # seconds from the first create to the first "failed to send" line


def sink_down(lab: Lab, n: int, down: float, timeout: float = 30) -> Down:
    """Nothing listens on the sink's port (connection refused) while ``n`` TrainJobs are created; after ``down``
    seconds a sink starts on that port. Which events arrive?"""
    (ns,) = lab.namespaces(1)
    port = free_port()
    with lab.adapter(f"http://127.0.0.1:{port}") as src:
        start = time.monotonic()
        for i in range(n):
            lab.create(ns, f"down-{i}")
        time.sleep(max(0.0, down - (time.monotonic() - start)))
        with ScriptedSink(port=port) as sink:
            lab.create(ns, "after")
            sink.wait(lambda got: bool(named(got, "after")), timeout)
            got = sink.settle(1.0, 10)
        assert src.current
        failed = [(t, line) for t, line in src.current.timed_lines if "failed to send cloudevent" in line]
    return Down(n, [r.ce["name"] for r in got], [int(m.group(1)) if (m := _RETRIES.search(line)) else 0
                                                 for _, line in failed],
                round(failed[0][0] - start, 2) if failed else -1.0)


@dataclass
class Restarted:
    received: list[tuple[str, str]]  # (action, name) after the restart


def restart(lab: Lab, timeout: float = 30) -> Restarted:
    """``before`` exists when the adapter stops; ``while-down`` is created while it is down; after it is back,
    ``after`` is created and both older ones are changed."""
    (ns,) = lab.namespaces(1)
    with ScriptedSink() as sink, lab.adapter(sink.url) as src:
        lab.create(ns, "before")
        sink.wait(lambda got: bool(named(got, "before")), timeout)
        assert src.current
        src.current.stop()
        mark = len(sink.requests)
        lab.create(ns, "while-down")
        src.restart()
        lab.create(ns, "after")
        lab.touch(ns, "before")
        lab.touch(ns, "while-down")
        sink.wait(lambda got: len(got) >= mark + 3, timeout)
        got = sink.settle(1.0, 5)[mark:]
    return Restarted([(r.ce["type"].rsplit(".", 1)[1], r.ce["name"]) for r in got])


# -- the report ----------------------------------------------------------------------------------------------------

ANSWERS: list[tuple[str, Answer]] = [
    ("200", Answer(200)), ("400", Answer(400)), ("401", Answer(401)), ("403", Answer(403)), ("404", Answer(404)),
    ("409", Answer(409)), ("413", Answer(413)), ("429", Answer(429)),
    ("429, Retry-After: 3", Answer(429, headers={"Retry-After": "3"})), ("500", Answer(500)),
    ("502", Answer(502)), ("503", Answer(503)), ("503, Retry-After: 3", Answer(503, headers={"Retry-After": "3"})),
    ("504", Answer(504)), ("200 after 10 s", Answer(200, delay=10.0)), ("503 after 2 s", Answer(503, delay=2.0)),
]


def report(api: client.ApiClient, say: Callable[[str], None] = print) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-adapter-") as tmp:
        lab = Lab(api, Path(tmp))
        try:
            say("| sink answers the event | tries | seconds between tries | next event (same namespace) "
                "delivered after | event dropped |")
            say("|---|---|---|---|---|")
            for label, answer in ANSWERS:
                a = answered(lab, answer, label)
                say(f"| {a.answer} | {a.tries} | {', '.join(map(str, a.gaps)) or '-'} | {a.next_waited} s | "
                    f"{'yes' if a.dropped else 'no'} |")
            say("")
            say("| burst | events | delivered | max in flight | per-namespace order kept | seconds |")
            say("|---|---|---|---|---|---|")
            for n, nss, delay in ((20, 1, 0.05), (20, 2, 0.05), (20, 4, 0.05)):
                b = burst(lab, n, nss, delay)
                say(f"| {n} TrainJobs in {nss} namespace(s), sink {delay * 1000:.0f} ms | {b.events} | "
                    f"{b.delivered} | {b.max_in_flight} | {b.in_order} | {b.seconds} |")
            say("")
            for n, down in ((6, 7.0),):
                d = sink_down(lab, n, down)
                say(f"sink refusing connections for {down} s while {n} TrainJobs are created: delivered once back "
                    f"{d.delivered}; 'failed to send' logged {len(d.failures_logged)}x with retries "
                    f"{d.failures_logged}, the first {d.first_failure_after} s after the first create")
            r = restart(lab)
            say(f"adapter restarted: received {r.received}")
        finally:
            lab.cleanup()


def main(argv: list[str]) -> int:
    import os
    state = Path(os.environ.get("KAI_FN_TESTBED_DIR", Path.home() / ".cache" / "kai-fn" / "testbed"))
    kubeconfig = state / "kubeconfig"
    if not kubeconfig.exists():
        print(f"bench.adapter: no testbed at {state} (./run.sh cluster up)", file=sys.stderr)
        return 2
    api = config.new_client_from_config(str(kubeconfig))
    rbac = [o for o in yaml.safe_load_all(_kustomize(state)) if o and o["kind"] in
            ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
    _apply(state, rbac)
    started = time.monotonic()
    report(api)
    print(f"\n(measured in {time.monotonic() - started:.0f} s)")
    return 0


def _kubectl(state: Path) -> str:
    return dict(line.split("=", 1) for line in (state / "bin.env").read_text().split())["kubectl"]


def _kustomize(state: Path) -> str:
    import subprocess
    return subprocess.run([_kubectl(state), "kustomize", str(REPO / "knative" / "base")], capture_output=True,
                          text=True, check=True).stdout


def _apply(state: Path, objs: list[dict]) -> None:
    import subprocess
    subprocess.run([_kubectl(state), "--kubeconfig", str(state / "kubeconfig"), "apply", "--server-side",
                    "--force-conflicts", "--field-manager=bench-adapter", "-f", "-"],
                   input=yaml.safe_dump_all(objs), capture_output=True, text=True, check=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
