"""The function as a real local process: ``python -m kai_fn.function.serve`` serving ``main.py`` on a loopback port.

Used by the demo, the tests and the benchmarks, so all of them exercise the same server Knative runs.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Self

import psutil

REPO = Path(__file__).resolve().parents[2]


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now on ``host``; ``""``: on every interface, for upstream servers that bind ``:<port>`` (Knative's
    pprof and queue-proxy), not loopback only."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def serve_command(port: int, source: Path = REPO / "main.py", target: str = "handle") -> list[str]:
    """The container's command (knative/base/service.yaml), on loopback."""
    return [sys.executable, "-m", "kai_fn.function.serve", "--source", str(source), "--target", target,
            "--host", "127.0.0.1", "--port", str(port)]


def read_from(path: Path, offset: int) -> str:
    """A log's text from byte ``offset`` on (what a process wrote since then); ``""`` for a log not made yet."""
    if not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


class Output:
    """Where a started process writes (``log``), and what it wrote since it was last started. Kept even when the
    caller wants no log: why a process exited before it was ready is read from it."""

    def __init__(self, log: IO[bytes] | int | None) -> None:
        self.log = log
        self._kept: IO[bytes] | None = None
        self._from = 0

    def restart(self) -> IO[bytes] | int | None:
        """What to give ``Popen`` as stdout, for a start whose output begins now."""
        if self.log == subprocess.DEVNULL and self._kept is None:
            self._kept = tempfile.TemporaryFile()  # noqa: SIM115 - kept while the process runs; close() closes it
        self._from = self._size()
        return self._kept or self.log

    def text(self) -> str:
        """Since the last start; ``""`` when the log cannot be read back (a caller's pipe, or no path)."""
        if self._kept is not None:
            self._kept.seek(self._from)
            return self._kept.read().decode(errors="replace")
        path = self._path()
        return read_from(path, self._from) if path else ""

    def address_in_use(self) -> bool:
        """Whether it could not bind a port: another process took it after :func:`free_port` chose it (Python's
        ``[Errno 98] Address already in use``, Go's ``bind: address already in use``)."""
        return "address already in use" in self.text().lower()

    def quoted(self, chars: int = 2000) -> str:
        """Its last words, for an error message."""
        said = self.text()
        return f"; it said:\n{said[-chars:]}" if said else ""

    def close(self) -> None:
        if self._kept is not None:
            self._kept.close()
            self._kept = None

    def _size(self) -> int:
        if self._kept is not None:
            return self._kept.seek(0, os.SEEK_END)
        path = self._path()
        return path.stat().st_size if path else 0

    def _path(self) -> Path | None:
        name = getattr(self.log, "name", None)
        return Path(name) if isinstance(name, str) and os.path.isfile(name) else None


class Started:
    """``with`` over ``start()`` and ``stop()``: what the harness starts, it stops."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FunctionProcess(Started):
    """Start with ``env`` (e.g. KUBECONFIG and KAI_* settings) added to this process's environment."""

    def __init__(self, env: dict[str, str], *, log: IO[bytes] | int | None = subprocess.DEVNULL,
                 source: Path = REPO / "main.py", target: str = "handle", threads: int = 8) -> None:
        self.env = {**os.environ, "KAI_FN_THREADS": str(threads), "PYTHONUNBUFFERED": "1", **env}
        self._choose_ports()
        self.source, self.target = source, target
        self.log = log
        self.output = Output(log)
        self.serves_kai_fn = source == REPO / "main.py" and target == "handle"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def _choose_ports(self) -> None:
        self.port = free_port()
        if self.env.get("KAI_FN_METRICS_PORT", "0") != "0":  # each pod has its own; processes here share one host
            self.env["KAI_FN_METRICS_PORT"] = str(free_port())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        """Where ``/metrics`` is served: its own port with ``KAI_FN_METRICS_PORT``, else the event port."""
        port = self.env.get("KAI_FN_METRICS_PORT", "0")
        return f"http://127.0.0.1:{port}" if port not in ("", "0") else self.url

    @property
    def command(self) -> list[str]:
        return serve_command(self.port, self.source, self.target)

    def start(self, ready_timeout: float = 60.0) -> Self:
        """Until it answers its readiness probe and, serving kai_fn, its catch-up pass has ended: what that pass
        queued is then in ``kai_fn_work_queue``, and what a caller seeds after this is not seen by it. A port another
        process took between :func:`free_port` and the bind is given up for a new one: the server then either exits
        saying its address is in use, or the probe is answered by a process that is not it."""
        for _ in range(3):
            if self._started(ready_timeout):
                return self
            self.stop()
            self._choose_ports()
        raise RuntimeError("the function's port was taken by another process three times")

    def _started(self, ready_timeout: float) -> bool:
        """True once ready; False when another process has the port."""
        self.started_at = time.perf_counter()
        self.proc = subprocess.Popen(self.command, env=self.env, cwd=REPO, stdout=self.output.restart(),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if self.output.address_in_use():
                    return False
                raise RuntimeError(f"the function exited with {self.proc.returncode} before it answered"
                                   + self.output.quoted())
            # One request at a time, each closed before the next: a probe needs no more (a server that closed
            # connections on its main loop, gunicorn's gthread worker, stalled on two at once: 0a723c8).
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as response:
                    answered = response.status == 200
                if answered and not self.listening():
                    return False
                if answered and (not self.serves_kai_fn or self.caught_up()):
                    return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the function did not answer on {self.url} within {ready_timeout}s")

    def listening(self) -> bool:
        """Whether this process (or a child of it) listens on the port, not another that bound it."""
        return listens(self.proc, {self.port})

    def caught_up(self) -> bool:
        """Whether ``kai_fn_catch_up_total`` counts the catch-up's end (``off`` without a work queue)."""
        with urllib.request.urlopen(f"{self.metrics_url}/metrics", timeout=1) as response:
            text = response.read().decode()
        return any(line.startswith("kai_fn_catch_up_total{") and float(line.rsplit(" ", 1)[1]) > 0
                   for line in text.splitlines())

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            end(self.proc, 10)
        self.output.close()

    def kill(self) -> None:
        """SIGKILL the server and its workers at once, as a pod dies."""
        end(self.proc)


def listens(proc: subprocess.Popen[bytes] | None, ports: set[int]) -> bool:
    """Whether ``proc`` (or a child of it) listens on every one of ``ports``, not another process that bound one."""
    try:
        main = psutil.Process(proc.pid if proc else -1)
        group = [main, *main.children(recursive=True)]
        bound = {c.laddr.port for p in group for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False
    return ports <= bound


def built(component: str) -> Path:
    """Where ``testbed/build.sh <component>`` put its binaries (cached by version: a warm call builds nothing)."""
    done = subprocess.run([str(REPO / "testbed" / "build.sh"), component], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"testbed/build.sh {component} failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1].split("=", 1)[1])


def end(proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None, timeout: float | None = None) -> None:
    """Wait ``timeout`` for a process already told to stop, then SIGKILL its whole group (a worker or child outliving
    it would keep its port); ``None``: SIGKILL at once."""
    if proc is None or proc.poll() is not None:
        return
    if timeout is not None:
        try:
            proc.wait(timeout)
            return
        except subprocess.TimeoutExpired:
            pass
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
