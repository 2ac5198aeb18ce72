"""The body of a core/v1 Event kai_fn posts on a TrainJob: one shape for the function's reports and the commands'."""
from __future__ import annotations

import datetime
import hashlib
import socket
from typing import Any

from kai_fn.core import keys
from kai_fn.core.objects import stamp

_INSTANCE = socket.gethostname()

def event_body(trainjob: dict[str, Any], reason: str, message: str, warning: bool, key: str | None = None,
               kind: tuple[str, str] = (keys.TRAINER_API, keys.TRAINJOB_KIND)) -> dict[str, Any]:
    """A core/v1 Event on the TrainJob (or on the object of ``kind``, its apiVersion and kind). Its name is derived
    from ``key`` (default: the message), so a duplicate or concurrent delivery that reports the same thing gets a 409
    instead of writing a second Event."""
    meta = trainjob["metadata"]
    digest = hashlib.sha256(f"{meta.get('uid')}|{reason}|{message if key is None else key}".encode()).hexdigest()[:10]
    now = stamp(datetime.datetime.now(datetime.UTC))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name'][:200]}.kai-fn.{digest}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": kind[0],
            "kind": kind[1],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": keys.MANAGED_BY},
        "reportingComponent": keys.MANAGED_BY,
        "reportingInstance": _INSTANCE,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
