"""KAI's BindRequests in a namespace, when each was made, for the fault scenario.

KAI's scheduler allocates a whole gang in one session and then writes one BindRequest per pod (named after the pod);
the binder binds each. A gang is partly bound for good only if the scheduler that wrote some of its BindRequests died
before writing the rest and the next one did not finish it: so the scenario asks, for each gang, whether its
BindRequests came from one scheduler process (all made before the kill, or all after). When a BindRequest was made
is the API server's ``creationTimestamp`` (whole seconds, the same clock as the test's), not when the watch saw it,
which can lag by seconds on a loaded machine; the scenario leaves two seconds between the kill and the restart. The
watch survives an API server restart: on any error it lists again and watches from there.
"""
from __future__ import annotations

import datetime
import threading

from kubernetes import client, watch

BIND_REQUESTS = ("scheduling.run.ai", "v1alpha2", "bindrequests")


class BindRequestWatch:
    """``seen``: BindRequest name (its pod's name) -> when it was made (seconds since the epoch)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.objs, self.namespace = client.CustomObjectsApi(api), namespace
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"bindwatch-{namespace}", daemon=True)

    def __enter__(self) -> BindRequestWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _saw(self, obj: dict) -> None:
        made = datetime.datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        self.seen.setdefault(obj["metadata"]["name"], made.timestamp())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listed = self.objs.list_namespaced_custom_object(*BIND_REQUESTS[:2], self.namespace, BIND_REQUESTS[2],
                                                                 _request_timeout=10)
                for obj in listed["items"]:
                    self._saw(obj)
                for event in watch.Watch().stream(
                        self.objs.list_namespaced_custom_object, *BIND_REQUESTS[:2], self.namespace, BIND_REQUESTS[2],
                        resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=5,
                        _request_timeout=10):
                    if event["type"] == "ADDED":
                        self._saw(event["object"])
                    if self._stop.is_set():
                        break
            except Exception:  # the API server restarting, or an expired watch
                self._stop.wait(0.5)


def split_gangs(seen: dict[str, float], gang_of: dict[str, str | None], killed_at: float) -> dict[str, list[str]]:
    """Gangs whose BindRequests were made both before and after ``killed_at`` (epoch seconds): pod names by side."""
    sides: dict[str, dict[bool, list[str]]] = {}
    for pod, at in seen.items():
        sides.setdefault(gang_of.get(pod) or "-", {}).setdefault(at > killed_at, []).append(pod)
    return {gang: sorted(s[False]) + ["|"] + sorted(s[True]) for gang, s in sides.items() if len(s) == 2}
