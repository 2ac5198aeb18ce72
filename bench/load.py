"""Closed-loop load: ``concurrency`` threads, each with one keep-alive connection (as the Go adapter keeps),
POST prepared requests until the list or the time budget runs out. Every loop is bounded in count and time."""
from __future__ import annotations

import http.client
import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Sequence
from urllib.parse import urlsplit

from bench.cloudevent import Post

REQUEST_TIMEOUT = 30.0


@dataclass
class LoadResult:
    concurrency: int
    sent: int = 0
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    reconnects: int = 0

    @property
    def answered(self) -> int:
        return len(self.latencies)

    @property
    def rate(self) -> float:
        return self.answered / self.elapsed if self.elapsed > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        return {
            "concurrency": self.concurrency,
            "events": self.answered,
            "seconds": round(self.elapsed, 3),
            "events_per_s": round(self.rate, 1),
            "p50_ms": _ms(percentile(lat, 50)),
            "p95_ms": _ms(percentile(lat, 95)),
            "p99_ms": _ms(percentile(lat, 99)),
            "max_ms": _ms(lat[-1] if lat else None),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "outcomes": dict(sorted(self.outcomes.items())),
            "errors": dict(self.errors),
            "reconnects": self.reconnects,
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def percentile(ordered: Sequence[float], pct: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default) on an already sorted list."""
    if not ordered:
        return None
    k = (len(ordered) - 1) * pct / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class _Connection:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.conn: http.client.HTTPConnection | None = None

    def post(self, request: Post) -> tuple[int, str]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=REQUEST_TIMEOUT)
        self.conn.request("POST", "/", body=request.body, headers=request.headers)
        response = self.conn.getresponse()
        response.read()
        if response.getheader("Connection", "").lower() == "close":
            self.close()
        return response.status, response.getheader("X-Kai-Fn-Outcome") or ""

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def drive(url: str, requests: Sequence[Post], concurrency: int, max_seconds: float) -> LoadResult:
    """Send each request at most once (a request whose connection dropped before an answer is resent once on
    a new connection: the server's keep-alive may close an idle socket, and every event here is idempotent)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    result = LoadResult(concurrency)
    lock = threading.Lock()
    ticket = itertools.count()
    start = threading.Barrier(concurrency + 1)
    go = threading.Event()
    deadline = [0.0]

    def worker() -> None:
        conn = _Connection(host, port)
        lat: list[float] = []
        statuses: Counter[int] = Counter()
        outcomes: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        reconnects = 0
        try:
            conn.conn = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT)
            conn.conn.connect()  # connect before the clock starts, as a long-running adapter would have
        except OSError:
            conn.close()
        start.wait()
        go.wait()
        try:
            while time.perf_counter() < deadline[0]:
                i = next(ticket)
                if i >= len(requests):
                    break
                request = requests[i]
                began = time.perf_counter()
                for attempt in range(2):
                    try:
                        status, outcome = conn.post(request)
                    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as error:
                        conn.close()
                        if attempt == 0:
                            reconnects += 1
                            continue
                        errors[type(error).__name__] += 1
                        break
                    except (OSError, http.client.HTTPException) as error:
                        conn.close()
                        errors[type(error).__name__] += 1
                        break
                    lat.append(time.perf_counter() - began)
                    statuses[status] += 1
                    outcomes[outcome or f"HTTP {status}"] += 1
                    break
        finally:
            conn.close()
            with lock:
                result.latencies.extend(lat)
                result.statuses.update(statuses)
                result.outcomes.update(outcomes)
                result.errors.update(errors)
                result.reconnects += reconnects

    threads = [threading.Thread(target=worker, name=f"poster-{n}", daemon=True) for n in range(concurrency)]
    for t in threads:
        t.start()
    start.wait()  # every thread is connected
    began = time.perf_counter()
    deadline[0] = began + max_seconds
    go.set()
    for t in threads:
        t.join(max_seconds + REQUEST_TIMEOUT + 5)
    result.elapsed = time.perf_counter() - began
    result.sent = min(next(ticket), len(requests))
    return result
