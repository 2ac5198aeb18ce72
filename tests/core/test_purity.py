"""kai_fn.core is pure: no core module pulls in an I/O library or the shell, not even through another module."""
from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import kai_fn.core

REPO = Path(__file__).resolve().parents[2]

# Packages core must never load: the shell and the local tools are built on them.
FORBIDDEN = ("kubernetes", "flask", "functions_framework", "waitress", "cloudevents", "requests", "urllib3", "aiohttp",
             "kmock", "kai_fn.function", "kai_fn.local")
CORE = sorted(info.name for info in pkgutil.iter_modules(kai_fn.core.__path__, "kai_fn.core."))


def loaded_after_importing(module: str) -> list[str]:
    """The names in sys.modules after importing ``module`` alone, in a fresh interpreter."""
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_every_core_module_is_checked():
    assert {"kai_fn.core.plan", "kai_fn.core.patch", "kai_fn.core.quantity"} <= set(CORE)


@pytest.mark.parametrize("module", CORE)
def test_core_module_loads_no_io_library_and_no_shell(module):
    loaded = loaded_after_importing(module)
    assert module in loaded
    assert [name for name in loaded if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)] == []
