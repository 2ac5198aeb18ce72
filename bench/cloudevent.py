"""CloudEvents as the ApiServerSource adapter sends them: CloudEvents SDK, binary mode, Go header case.

The few lines of ``tests/ce.py`` the benchmark needs, copied so that ``bench`` does not import ``tests``.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from cloudevents.conversion import to_binary
from cloudevents.http import CloudEvent

SOURCE = "https://10.96.0.1:443"


@dataclass(frozen=True)
class Post:
    """One HTTP request body and headers, built before the clock starts."""

    headers: dict[str, str]
    body: bytes


def _go_case(headers: dict[str, str]) -> dict[str, str]:
    """The adapter is written in Go: ``Ce-Specversion``, not ``ce-specversion``."""
    return {"-".join(part.capitalize() for part in k.split("-")): v for k, v in headers.items()}


def resource(obj: dict[str, Any], action: str = "add") -> Post:
    """Resource mode: the data is the whole object as the watch saw it; a fresh id per emission."""
    meta = obj["metadata"]
    event = CloudEvent({
        "id": str(uuid.uuid4()),
        "type": f"dev.knative.apiserver.resource.{action}",
        "source": SOURCE,
        "subject": f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{meta['namespace']}/trainjobs/{meta['name']}",
        "kind": "TrainJob",
        "apiversion": "trainer.kubeflow.org/v1alpha1",
        "name": meta["name"],
        "namespace": meta["namespace"],
    }, obj)
    headers, body = to_binary(event)
    return Post(_go_case(dict(headers)), body if isinstance(body, bytes) else body.encode())
