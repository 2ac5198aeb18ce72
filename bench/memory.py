"""Peak memory of the function server: master and forked gunicorn worker, sampled from a background thread."""
from __future__ import annotations

import threading
from typing import Any

import psutil

MB = 1024 * 1024


class RssSampler:
    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak_total = 0
        self.peak_by_pid: dict[int, int] = {}
        self.samples = 0
        self.processes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _tree(self) -> list[psutil.Process]:
        return [self.root, *self.root.children(recursive=True)]

    def sample(self) -> None:
        total = 0
        procs = self._tree()
        for p in procs:
            try:
                rss = p.memory_info().rss
            except psutil.Error:
                continue
            total += rss
            self.peak_by_pid[p.pid] = max(self.peak_by_pid.get(p.pid, 0), rss)
        self.processes = max(self.processes, len(procs))
        self.peak_total = max(self.peak_total, total)
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
        """RSS, PSS and USS of each process right now (PSS splits the pages master and worker share)."""
        out: dict[str, Any] = {"rss_mb": 0.0, "pss_mb": 0.0, "uss_mb": 0.0, "processes": []}
        for p in self._tree():
            try:
                full = p.memory_full_info()
                name = " ".join(p.cmdline()[:1]) or p.name()
            except psutil.Error:
                continue
            row = {"pid": p.pid, "role": "master" if p.pid == self.root.pid else "worker",
                   "rss_mb": round(full.rss / MB, 1), "pss_mb": round(full.pss / MB, 1),
                   "uss_mb": round(full.uss / MB, 1), "exe": name.rsplit("/", 1)[-1]}
            out["processes"].append(row)
            for k in ("rss_mb", "pss_mb", "uss_mb"):
                out[k] = round(out[k] + row[k], 1)
        return out

    def peaks(self) -> dict[str, Any]:
        return {"peak_rss_total_mb": round(self.peak_total / MB, 1),
                "peak_rss_by_process_mb": {("master" if pid == self.root.pid else f"worker {pid}"): round(v / MB, 1)
                                           for pid, v in self.peak_by_pid.items()},
                "samples": self.samples, "processes": self.processes}
