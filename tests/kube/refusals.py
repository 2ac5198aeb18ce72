"""The refusals kai_fn meets, each provoked for real on whatever API server a session talks to: one table, run
against the emulator (tests/kube/test_refusals.py) and the real kube-apiserver (tests/testbed/test_refusals.py),
so that the two agree on which exception each status is."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kai_fn.kube import AlreadyExists, ApiError, ApiSession, Conflict, GuardFailed, Invalid, NotFound
from kai_fn.kube.session import JSON_PATCH, MERGE_PATCH, path


def configmap(session: ApiSession, namespace: str, name: str) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}
    return session.request("POST", path("v1", "configmaps", namespace), body=body, namespace=namespace)


def _missing(session: ApiSession, ns: str) -> None:
    session.request("GET", path("v1", "configmaps", ns, "missing"), namespace=ns, name="missing")


def _taken(session: ApiSession, ns: str) -> None:
    configmap(session, ns, "taken")
    configmap(session, ns, "taken")


def _stale(session: ApiSession, ns: str) -> None:
    old = configmap(session, ns, "stale")["metadata"]["resourceVersion"]
    where = {"namespace": ns, "name": "stale"}
    session.request("PATCH", path("v1", "configmaps", ns, "stale"), body={"data": {"a": "1"}},
                    content_type=MERGE_PATCH, **where)
    session.request("PATCH", path("v1", "configmaps", ns, "stale"), body={"metadata": {"resourceVersion": old},
                    "data": {"a": "2"}}, content_type=MERGE_PATCH, **where)


def _other_uid(session: ApiSession, ns: str) -> None:
    configmap(session, ns, "other-uid")
    session.request("DELETE", path("v1", "configmaps", ns, "other-uid"), namespace=ns, name="other-uid",
                    body={"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}})


def _failed_test(session: ApiSession, ns: str) -> None:
    configmap(session, ns, "guarded")
    session.request("PATCH", path("v1", "configmaps", ns, "guarded"), namespace=ns, name="guarded",
                    body=[{"op": "test", "path": "/metadata/name", "value": "another"}], content_type=JSON_PATCH)


def _missing_path(session: ApiSession, ns: str) -> None:
    configmap(session, ns, "moved")
    session.request("PATCH", path("v1", "configmaps", ns, "moved"), namespace=ns, name="moved",
                    body=[{"op": "remove", "path": "/metadata/labels/gone"}], content_type=JSON_PATCH)


def _refused_patch(session: ApiSession, ns: str) -> None:
    configmap(session, ns, "refused")
    session.request("PATCH", path("v1", "configmaps", ns, "refused"), namespace=ns, name="refused",
                    body=[{"op": "add", "path": "/metadata/labels", "value": {"a": "not a label value!"}}],
                    content_type=JSON_PATCH)


def _bad_name(session: ApiSession, ns: str) -> None:
    configmap(session, ns, "Not_A_Name")


# name: (what provokes it, the exception, the status code)
CASES: dict[str, tuple[Callable[[ApiSession, str], None], type[ApiError], int]] = {
    "a GET of an object that is not there: 404 NotFound": (_missing, NotFound, 404),
    "a create of a name that is taken: 409 AlreadyExists": (_taken, AlreadyExists, 409),
    "a patch naming an old resourceVersion: 409 Conflict": (_stale, Conflict, 409),
    "a delete whose uid precondition fails: 409 Conflict": (_other_uid, Conflict, 409),
    "a JSON Patch whose test op fails: 422 GuardFailed": (_failed_test, GuardFailed, 422),
    "a JSON Patch removing a path no longer there: 422 GuardFailed": (_missing_path, GuardFailed, 422),
    "a JSON Patch that applies, of an object refused: 422 Invalid, no guard": (_refused_patch, Invalid, 422),
    "a create of an invalid object: 422 Invalid": (_bad_name, Invalid, 422),
}
