"""Custom objects of one namespace as first seen, for the fault scenarios: KAI's BindRequests and PodGroups.

KAI's scheduler allocates a whole gang in one session and then writes one BindRequest per pod (named after the pod);
the binder binds each. A scheduler killed between two of a gang's writes would leave the gang partly bound until the
next one wrote the rest, so :func:`split_gangs` tells which gangs' BindRequests two scheduler processes made. When a
BindRequest was made is the API server's ``creationTimestamp`` (whole seconds, the test's clock), not when the watch
saw it, which can lag by seconds on a loaded machine. PodGroups are watched to count those of each TrainJob, whoever
made them. The watch survives an API server restart: on any error it lists again and watches from there.
"""
from __future__ import annotations

import datetime
import threading
from typing import Any

from kubernetes import client

from kai_fn.local import k8s

BIND_REQUESTS = ("scheduling.run.ai", "v1alpha2", "bindrequests")
KAI_PODGROUPS = ("scheduling.run.ai", "v2alpha2", "podgroups")


class ObjectWatch:
    """``seen``: name -> its ``creationTimestamp`` (seconds since the epoch); ``objects``: name -> the object as last seen (kept
    after it is deleted, so nothing made and gone in between is missed)."""

    def __init__(self, api: client.ApiClient, resource: tuple[str, str, str], namespace: str) -> None:
        self.objs, self.resource, self.namespace = client.CustomObjectsApi(api), resource, namespace
        self.seen: dict[str, float] = {}
        self.objects: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{resource[2]}-{namespace}", daemon=True)

    def __enter__(self) -> ObjectWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _saw(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        made = datetime.datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        self.seen.setdefault(name, made.timestamp())
        self.objects[name] = obj

    def _run(self) -> None:
        group, version, plural = self.resource
        while not self._stop.is_set():
            try:
                listed = k8s.obj(self.objs.list_namespaced_custom_object(group, version, self.namespace, plural,
                                                                         _request_timeout=10))
                for obj in listed["items"]:
                    self._saw(obj)
                for event in k8s.Stream(
                        self.objs.list_namespaced_custom_object, group, version, self.namespace, plural,
                        resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=5,
                        _request_timeout=10):
                    if event["type"] in ("ADDED", "MODIFIED"):
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
