"""The installable package as pip builds it from a clean copy of the sources (the checkout stays untouched: setuptools
writes build/ and *.egg-info beside what it builds), and an interpreter that refuses the test-only libraries."""
from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# What the installed package must never import: the workstation harness and the libraries only it needs.
BLOCKED = ("kai_fn.local", "kmock", "aiohttp")



def blocker(blocked: tuple[str, ...], why: str = "is test-only: the installed package must not import it") -> str:
    """Prepended to a `python -c` program: any import of ``blocked`` raises ImportError(``<name> <why>``), however
    deep in the import chain it happens."""
    return f"""\
import sys

class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in {blocked!r}):
            raise ImportError(f"{{name}} {why}")
        return None

sys.meta_path.insert(0, _Blocked())
"""


BLOCKER = blocker(BLOCKED)


def source_copy(dest: Path) -> Path:
    """What a fresh clone holds for the build: pyproject.toml, README.md, LICENSE and kai_fn/ (with kai_fn/local,
    which the build must leave out)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "kai_fn", dest / "kai_fn", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def build_wheel(python: Path | str, out: Path, isolated: bool, env: dict[str, str] | None = None) -> Path:
    """``pip wheel --no-deps`` of a copy of the sources, with ``python``'s pip. Isolated, pip fetches the build
    backend pinned in pyproject.toml (from PyPI, or pip's cache); not isolated, it uses the one installed
    (requirements-dev.txt pins the same), offline."""
    src = source_copy(out / "src")
    args = [str(python), "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
            "-w", str(out / "dist"), str(src)]
    if not isolated:
        args.insert(4, "--no-build-isolation")
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (out / "dist").glob("kai_fn-*.whl")
    return wheel


def wheel_files(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def wheel_text(wheel: Path, suffix: str) -> str:
    """The text of the wheel's one file whose name ends with ``suffix`` (``.dist-info/entry_points.txt``)."""
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(suffix)]
        return z.read(name).decode()
