"""Faults on the chain testbed, as a cluster meets them: the function killed (a pod dying) and started again as
Knative would, event sources' adapters restarted, the API server restarted after a crash, KAI's scheduler killed
and started again. Shared by chain scenario 4 and ``python -m bench faults``.

Each call returns once the fault is over (the component answers again), so a caller's timeline is the faults'.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from kai_fn.local.adapter import RealApiServerSource
from kai_fn.local.chain import Chain
from kai_fn.local.process import REPO


class FaultError(RuntimeError):
    """A fault could not be made, or the component did not come back: one line for the user."""


def until(what: str, probe: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if found := probe():
            return found
        time.sleep(interval)
    raise FaultError(f"not within {timeout:.0f}s: {what}")


def kill_and_restart_function(chain: Chain, down: float = 1.0) -> None:
    """SIGKILL every process of the function at once, as a pod dies, and start it again on its port after ``down``
    seconds, as Knative starts the container again: deliveries meanwhile are refused, and an adapter drops each
    event after its 3.1 s of tries (knative/README.md)."""
    fn = chain.function
    if fn.proc is None:
        raise FaultError("the function is not running")
    fn.kill()
    time.sleep(down)
    fn.start()


def restart_api_server(kubeconfig: Path, timeout: float = 90) -> None:
    """The launcher's SIGUSR1: kube-apiserver SIGKILLed and started again on the same port, certificates and etcd
    (testbed/README.md)."""
    state = kubeconfig.parent
    restarts = state / "apiserver-restarts"
    restarts.unlink(missing_ok=True)
    os.kill(int((state / "launcher.pid").read_text()), signal.SIGUSR1)
    until("the API server restarted", restarts.exists, timeout)
    if not (said := restarts.read_text()).startswith("restarted"):
        raise FaultError(f"the API server did not restart: {said.strip()}")


def kill_kai_scheduler(kubeconfig: Path, timeout: float = 30) -> int:
    """SIGKILL KAI's scheduler (as ``cluster up --chain`` started it); returns once it is gone. Its pid."""
    pid = next(int(line.split()[1]) for line in (kubeconfig.parent / "chain.pids").read_text().splitlines()
               if line.startswith("kai-scheduler "))
    os.kill(pid, signal.SIGKILL)
    until("KAI's scheduler is gone", lambda: not os.path.exists(f"/proc/{pid}")
          or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", timeout)
    return pid


def start_chain_components(env: dict[str, str] | None = None) -> None:
    """``./run.sh cluster up --chain --without-kai-fn``: starts again whatever chain component no longer runs."""
    up = subprocess.run([str(REPO / "run.sh"), "cluster", "up", "--chain", "--without-kai-fn"], cwd=REPO,
                        env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if up.returncode != 0:
        raise FaultError(f"cluster up --chain failed: {up.stderr.strip().splitlines()[-1:]}")


def adapter(chain: Chain, name: str = "kai-fn-trainjobs") -> RealApiServerSource:
    """The running adapter of one of knative/base's ApiServerSources (the chain on Knative's own sources)."""
    found = [s for s in chain.sources if isinstance(s, RealApiServerSource) and s.spec.name == name]
    if not found:
        raise FaultError(f"no adapter for ApiServerSource {name}")
    return found[0]


@contextmanager
def paused(procs: Iterable[Any]) -> Iterator[None]:
    """The processes stopped (SIGSTOP) and continued when the block ends: alive, holding their connections, doing
    nothing, as a process the kernel does not schedule."""
    stopped = list(procs)
    for proc in stopped:
        os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for proc in stopped:
            os.kill(proc.pid, signal.SIGCONT)


def restart_adapters(chain: Chain, names: Iterable[str] = ("kai-fn-trainjobs",),
                     meanwhile: Callable[[], None] = lambda: None) -> None:
    """The adapters' pods die, ``meanwhile`` runs, and new ones start: the events the old ones held are lost, and
    the new ones' lists send nothing for objects that exist (knative/README.md, "A redeploy loses the backlog")."""
    with ExitStack() as down:
        for name in names:
            down.enter_context(adapter(chain, name).down())
        meanwhile()


class Every(threading.Thread):
    """Makes ``fault`` every ``period`` seconds, ``count`` times, the first after ``first`` seconds; ``stop()`` ends
    it between faults. ``times``: when each began (time.monotonic()); ``errors``: the faults that failed."""

    def __init__(self, fault: Callable[[], None], period: float, count: int, first: float = 0.0) -> None:
        super().__init__(name="faults-every", daemon=True)
        self.fault, self.period, self.count, self.first = fault, period, count, first
        self.times: list[float] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        began = time.monotonic()
        for n in range(self.count):
            if self.stopping.wait(max(0.0, began + self.first + n * self.period - time.monotonic())):
                return
            self.times.append(time.monotonic())
            try:
                self.fault()
            except Exception as error:  # noqa: BLE001 - reported by the caller, the schedule goes on
                self.errors.append(f"{type(error).__name__}: {error}")

    def stop(self) -> None:
        self.stopping.set()
        self.join(120)
