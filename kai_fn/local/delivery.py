"""The ApiServerSource adapter's delivery to a direct sink (at least once, retried as below), over real HTTP: one
implementation for the stand-in event sources (kai_fn/local/source.py: the emulator tier, which runs without
Knative) and the tests; the chain runs Knative's own adapters.

knative/eventing's adapter sends through cloudevents/sdk-go with an exponential retry context:
``Backoff(ctx, n)`` waits ``period * 2**n`` before retry n (n = 1..5) and gives up when n would exceed 5, so one
event gets at most 6 tries, 0.1 + 0.2 + 0.4 + 0.8 + 1.6 = 3.1 s apart in all at the 50 ms period. It retries the
status codes of sdk-go's default ``isRetriableFunc`` (404, 413, 425, 429, 502, 503, 504) and every transport
error, **not** 500 (nor any other 4xx/5xx); it ignores ``Retry-After`` and the response body. Tests pass a
shorter ``period`` to fit their time budget; the order and count of tries stay the same.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests
import requests.adapters
import requests.structures

from kai_fn.commands.invoke import Sample

GO_CLIENT_HEADERS = {"User-Agent": "Go-http-client/1.1", "Accept-Encoding": "gzip"}  # what Go's net/http adds
RETRYABLE = frozenset({404, 413, 425, 429, 502, 503, 504})
RETRIES = 5  # sdk-go MaxTries: retries after the first try
PERIOD = 0.05  # seconds


@dataclass(frozen=True)
class Try:
    status: int | None  # None: a transport error (connection refused or reset, timeout)
    error: str | None = None
    retry_after: str | None = None
    body: bytes = b""
    seconds: float = 0.0


@dataclass
class Delivery:
    tries: list[Try] = field(default_factory=list)

    @property
    def status(self) -> int | None:
        return self.tries[-1].status if self.tries else None

    @property
    def acked(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def statuses(self) -> list[int | None]:
        return [t.status for t in self.tries]


class Adapter:
    """``send(sample)`` delivers one event with the adapter's retries; thread-safe (one HTTP session per thread).

    ``stop`` (a threading.Event) ends a delivery early, between tries, for the tests' wall-clock guards.
    """

    def __init__(self, url: str, *, period: float = PERIOD, retries: int = RETRIES, timeout: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep, stop: threading.Event | None = None) -> None:
        self.url, self.period, self.retries, self.timeout, self.sleep = url, period, retries, timeout, sleep
        self.stop = stop or threading.Event()
        self._local = threading.local()

    @property
    def session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers = requests.structures.CaseInsensitiveDict(GO_CLIENT_HEADERS)  # no Accept, no Connection
            session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=4, max_retries=0))
        return session

    def backoff(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1-based), sdk-go's BackoffStrategyExponential."""
        return float(self.period * 2 ** retry)

    def post(self, sample: Sample) -> Try:
        started = time.perf_counter()
        try:
            response = self.session.post(self.url, data=sample.body, headers=sample.headers, timeout=self.timeout)
        except requests.RequestException as error:
            return Try(None, type(error).__name__, seconds=time.perf_counter() - started)
        return Try(response.status_code, None, response.headers.get("Retry-After"), response.content,
                   time.perf_counter() - started)

    def send(self, sample: Sample) -> Delivery:
        delivery = Delivery()
        for retry in range(self.retries + 1):
            if retry:
                self.sleep(self.backoff(retry))
            attempt = self.post(sample)
            delivery.tries.append(attempt)
            if attempt.status is not None and attempt.status not in RETRYABLE:
                break  # 2xx is done; 500 and other codes are final too
            if self.stop.is_set():
                break
        return delivery
