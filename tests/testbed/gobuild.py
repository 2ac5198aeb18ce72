"""Build a testbed Go program through its ``testbed/<name>/build.sh`` (cached by version key) and return its path."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

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


class LineOracle:
    """A testbed Go program run once for a module: a JSON line in, a JSON line out (its ``error``: a refusal)."""

    def __init__(self, name: str, *args: str) -> None:
        self.name = name
        self.proc = subprocess.Popen([str(built(name)), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(request) + "\n")
        answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
        assert "error" not in answer, f"testbed/{self.name} refused the case: {answer['error']}"
        return answer

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
