"""CloudEvents as the ApiServerSource adapter sends them (binary mode, Go header case), made with the CloudEvents SDK."""
from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from cloudevents.conversion import to_binary, to_structured
from cloudevents.http import CloudEvent

from kai_fn.commands.invoke import Answer, Sample, post
from kai_fn.local.source import go_case as _go_case

SOURCE = "https://10.96.0.1:443"


def _event(ce_type: str, namespace: str, name: str, data: Any, event_id: str | None,
           api_version: str = "trainer.kubeflow.org/v1alpha1", kind: str = "TrainJob") -> CloudEvent:
    plural = {"TrainJob": "trainjobs", "PodGroup": "podgroups"}.get(kind, kind.lower() + "s")
    return CloudEvent({
        "id": event_id or str(uuid.uuid4()),
        "type": ce_type,
        "source": SOURCE,
        "subject": f"/apis/{api_version}/namespaces/{namespace}/{plural}/{name}",
        "kind": kind,
        "apiversion": api_version,
        "name": name,
        "namespace": namespace,
    }, data)


def resource(obj: dict[str, Any], action: str = "add", *, event_id: str | None = None,
             structured: bool = False) -> Sample:
    """Resource mode: the data is the whole object as the watch saw it (a TrainJob, or a PodGroup)."""
    meta = obj["metadata"]
    event = _event(f"dev.knative.apiserver.resource.{action}", meta["namespace"], meta["name"], obj, event_id,
                   obj.get("apiVersion", "trainer.kubeflow.org/v1alpha1"), obj.get("kind", "TrainJob"))
    return _sample(event, structured)


def ref(namespace: str, name: str, action: str = "add", *, event_id: str | None = None,
        structured: bool = False) -> Sample:
    """Reference mode (the source's default): kind, namespace, name and apiVersion only."""
    data = {"kind": "TrainJob", "namespace": namespace, "name": name, "apiVersion": "trainer.kubeflow.org/v1alpha1"}
    return _sample(_event(f"dev.knative.apiserver.ref.{action}", namespace, name, data, event_id), structured)


def ping(event_id: str | None = None) -> Sample:
    event = CloudEvent({"id": event_id or str(uuid.uuid4()), "type": "dev.knative.sources.ping",
                        "source": "/apis/v1/namespaces/kai-fn/pingsources/kai-fn-resync"}, {"resync": True})
    return _sample(event, False)


def _sample(event: CloudEvent, structured: bool) -> Sample:
    headers, body = (to_structured if structured else to_binary)(event)
    return Sample(event["type"], "", _go_case(dict(headers)), body if isinstance(body, bytes) else body.encode())


def send(url: str, sample: Sample, timeout: float = 30.0, *, token: str | None = None,
         authorization: str | None = None) -> Answer:
    """POST ``sample``; with ``token``, as a Knative source with OIDC on sends it (or any raw ``authorization``)."""
    if token is not None:
        authorization = f"Bearer {token}"
    if authorization is not None:
        sample = dataclasses.replace(sample, headers={**sample.headers, "Authorization": authorization})
    return post(url, sample, timeout=timeout)
