"""Cold start (process start to the first answered event) and import time, each against a bare baseline."""
from __future__ import annotations

import http.client
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

from bench.cloudevent import Post
from kai_fn.local.process import REPO, FunctionProcess

BARE = Path(__file__).resolve().parent / "bare_main.py"
PROD_DEPS = Path(__file__).resolve().parent / "prod_deps"  # hides dev-only packages, see its module


def production(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the dev-only packages hidden, as in the image built from requirements.txt."""
    path = env.get("PYTHONPATH", os.environ.get("PYTHONPATH"))
    return {**env, "PYTHONPATH": str(PROD_DEPS) + (os.pathsep + path if path else "")}
COLD_TIMEOUT = 60.0


def cold_start(env: dict[str, str], request: Post, *, source: Path, threads: int) -> dict[str, float]:
    """Seconds from Popen of the server (``python -m kai_fn.function.serve``) to the first TCP accept and to the
    first answered POST.

    The command and environment are FunctionProcess's own; only the readiness probe differs: a real event,
    retried every 5 ms, instead of GET /healthz every 50 ms."""
    fn = FunctionProcess(env, source=source, threads=threads)
    began = time.perf_counter()
    fn.proc = subprocess.Popen(fn.command, env=fn.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    listening = None
    try:
        deadline = began + COLD_TIMEOUT
        while time.perf_counter() < deadline:
            if fn.proc.poll() is not None:
                raise RuntimeError(f"{source.name} exited with {fn.proc.returncode} before it answered")
            conn = http.client.HTTPConnection("127.0.0.1", fn.port, timeout=COLD_TIMEOUT)
            try:
                conn.connect()
                listening = listening or time.perf_counter() - began
                conn.request("POST", "/", body=request.body, headers=request.headers)
                response = conn.getresponse()
                response.read()
                answered = time.perf_counter() - began
                if response.status >= 300:
                    raise RuntimeError(f"{source.name} answered the first event with HTTP {response.status}")
                return {"listening_s": listening, "answered_s": answered}
            except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected):
                time.sleep(0.005)
            finally:
                conn.close()
        raise RuntimeError(f"{source.name} did not answer within {COLD_TIMEOUT}s")
    finally:
        fn.stop()


def cold_starts(env: dict[str, str], make_request: Callable[[], Post], repeats: int, threads: int) -> dict[str, Any]:
    """kai_fn as installed here (dev venv), kai_fn with production deps only, and the bare function, in turn,
    ``repeats`` times each; medians and the ratios to the bare function."""
    runs: dict[str, list[dict[str, float]]] = {"kai_fn": [], "kai_fn_prod_deps": [], "bare": []}
    for _ in range(repeats):
        runs["kai_fn"].append(cold_start(env, make_request(), source=REPO / "main.py", threads=threads))
        runs["kai_fn_prod_deps"].append(cold_start(production(env), make_request(), source=REPO / "main.py",
                                                   threads=threads))
        runs["bare"].append(cold_start(env, make_request(), source=BARE, threads=threads))
    out: dict[str, Any] = {"repeats": repeats}
    for name, samples in runs.items():
        out[name] = {k: round(statistics.median(s[k] for s in samples), 3) for k in ("listening_s", "answered_s")}
        out[name]["answered_all_s"] = [round(s["answered_s"], 3) for s in samples]
    out["ratio"] = round(out["kai_fn"]["answered_s"] / out["bare"]["answered_s"], 2)
    out["ratio_prod_deps"] = round(out["kai_fn_prod_deps"]["answered_s"] / out["bare"]["answered_s"], 2)
    return out


_IMPORT = "import time; t = time.perf_counter(); import {m}; print(time.perf_counter() - t)"


def _import_seconds(module: str, env: dict[str, str]) -> float:
    done = subprocess.run([sys.executable, "-c", _IMPORT.format(m=module)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def import_times(env: dict[str, str], repeats: int) -> dict[str, Any]:
    """``import main`` (which builds the App: settings and API client) vs ``import functions_framework``,
    each in a fresh interpreter, alternating; medians."""
    runs: dict[str, list[float]] = {"main": [], "main_prod_deps": [], "functions_framework": []}
    for _ in range(repeats):
        runs["main"].append(_import_seconds("main", env))
        runs["main_prod_deps"].append(_import_seconds("main", production(env)))
        runs["functions_framework"].append(_import_seconds("functions_framework", env))
    out: dict[str, Any] = {"repeats": repeats}
    for name, samples in runs.items():
        out[name + "_s"] = round(statistics.median(samples), 3)
    out["ratio"] = round(out["main_s"] / out["functions_framework_s"], 2)
    out["ratio_prod_deps"] = round(out["main_prod_deps_s"] / out["functions_framework_s"], 2)
    out["breakdown_ms"] = import_breakdown(env)
    out["breakdown_prod_deps_ms"] = import_breakdown(production(env))
    return out


_WATCH = ("functions_framework", "kubernetes", "kubernetes.config", "kubernetes.dynamic",
          "kubernetes.client.api.custom_objects_api", "kubernetes_validate", "kai_fn.settings", "pydantic",
          "pydantic_settings", "kai_fn.core.models", "kai_fn.function.cluster", "kai_fn.function.handler", "main")


def import_breakdown(env: dict[str, str]) -> dict[str, float]:
    """Cumulative import time of the main subtrees of ``import main``, from one ``python -X importtime`` run
    (a package counts where it is first imported; its cost is not counted again elsewhere)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import main"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True)
    found: dict[str, float] = {}
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)$", line)
        if m and m[2] in _WATCH:
            found[m[2]] = round(int(m[1]) / 1000, 1)
    return {k: found[k] for k in _WATCH if k in found}
