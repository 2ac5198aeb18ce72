"""Build a testbed Go program through its ``testbed/<name>/build.sh`` (cached by version key) and return its path."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def built(name: str) -> Path:
    """The binary's path; without Go the test is skipped with one line, or fails where the tier is required (CI)."""
    if shutil.which("go") is None:
        if os.environ.get("KAI_FN_REQUIRE_TESTBED") == "1":
            pytest.fail(f"real tier required (KAI_FN_REQUIRE_TESTBED=1) but go is not installed: testbed/{name}")
        pytest.skip(f"real tier: go is not installed, so testbed/{name} cannot be built")
    done = subprocess.run([str(REPO / "testbed" / name / "build.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"testbed/{name}/build.sh failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])
