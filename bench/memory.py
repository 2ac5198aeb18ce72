"""Peak memory of the function server, one process (kai_fn/function/serve.py: threads, no fork), sampled from a
background thread."""
from __future__ import annotations

import threading
from typing import Any

import psutil

MB = 1024 * 1024


class RssSampler:
    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.server = psutil.Process(pid)
        self.interval = interval
        self.peak_total = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        self.peak_total = max(self.peak_total, self.server.memory_info().rss)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except psutil.Error:
                return

    def __enter__(self) -> RssSampler:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(2)

    def now(self) -> dict[str, Any]:
        """RSS, PSS and USS of the server right now (PSS counts its shared pages once per sharer)."""
        full = self.server.memory_full_info()
        return {"rss_mb": round(full.rss / MB, 1), "pss_mb": round(full.pss / MB, 1), "uss_mb": round(full.uss / MB, 1),
                "pid": self.server.pid}

    def peaks(self) -> dict[str, Any]:
        return {"peak_rss_total_mb": round(self.peak_total / MB, 1), "samples": self.samples}
