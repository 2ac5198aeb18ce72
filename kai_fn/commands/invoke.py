"""Sample events: read one from ``samples/events`` and POST it in binary mode, as ``func invoke`` does."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Sample:
    name: str
    description: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: str


class SampleError(ValueError):
    pass


def load_sample(path: str | Path) -> Sample:
    """A sample is ``{"description", "headers", "body"}``; a string body is sent verbatim, anything else as JSON."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SampleError(f"{path}: cannot read: {error.strerror or error}") from None
    except json.JSONDecodeError as error:
        raise SampleError(f"{path}:{error.lineno}:{error.colno}: not JSON: {error.msg}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("headers"), dict) or "body" not in doc:
        raise SampleError(f"{path}: a sample needs an object with 'headers' (an object) and 'body'")
    body: Any = doc["body"]
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    return Sample(path.stem, str(doc.get("description") or ""), {str(k): str(v) for k, v in doc["headers"].items()}, raw)


def post(url: str, sample: Sample, timeout: float = 30.0) -> Answer:
    request = urllib.request.Request(url, data=sample.body, headers=sample.headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(response.status, dict(response.headers), response.read().decode(errors="replace"))
    except urllib.error.HTTPError as error:
        return Answer(error.code, dict(error.headers), error.read().decode(errors="replace"))
