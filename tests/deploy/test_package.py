"""The installable package (pyproject.toml), built as pip builds it: kai_fn without kai_fn/local, the entry points
``kai-fn`` and ``kubectl-kai_fn``, the pins of requirements.txt; and no module it holds imports kai_fn.local, kmock or
aiohttp. Offline: the build backend comes from the test environment (requirements-dev.txt pins the same one);
tests/testbed/test_kubectl_plugin.py installs the package into a fresh virtualenv and runs it against a real API
server."""
from __future__ import annotations

import configparser
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from kai_fn import __version__
from tests.commands.test_cli import run
from tests.packaging import BLOCKED, BLOCKER, REPO, blocker, build_wheel, wheel_files, wheel_text

# The function's server and what only it needs: never a requirement of the command line.
SERVER = {"functions-framework", "flask", "gunicorn", "cloudevents", "prometheus-client", "werkzeug", "waitress"}
# The modules `kubectl kai-fn` runs, and the server's libraries they must do without.
CLI_PACKAGES = ("kai_fn.commands", "kai_fn.kube", "kai_fn.core", "kai_fn.settings")
SERVER_MODULES = ("functions_framework", "flask", "gunicorn", "cloudevents", "prometheus_client", "werkzeug",
                  "waitress")
CLI_BLOCKER = blocker(BLOCKED + SERVER_MODULES, "is the server's or test-only: the command line must not import it")
ENTRY_POINTS = {"kai-fn": "kai_fn.commands.cli:main", "kubectl-kai_fn": "kai_fn.commands.cli:kubectl_plugin"}
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def shipped_modules() -> list[str]:
    """Every module of kai_fn but kai_fn.local and its own, as the sources hold them."""
    out = []
    for path in sorted((REPO / "kai_fn").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[:2] != ("kai_fn", "local") and "__pycache__" not in parts:
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def pins(path: Path) -> dict[str, str]:
    """name -> version of a requirements file's lines (``-r`` lines and comments skipped); names normalised."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            name, sep, version = line.partition("==")
            assert sep and re.fullmatch(r"[\w.]+", version), f"{path.name}: {line!r} is not pinned exactly"
            out[normalise(name)] = version
    return out


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(sys.executable, tmp_path_factory.mktemp("package"), isolated=False)


@pytest.fixture(scope="module")
def unpacked(wheel, tmp_path_factory) -> Path:
    """The wheel's files as a directory to import from: the installed package, minus the install."""
    where = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(where)
    return where


def test_the_wheel_holds_kai_fn_without_its_workstation_harness(wheel):
    files = wheel_files(wheel)
    assert not [f for f in files if f.startswith("kai_fn/local")]
    modules = {f for f in files if f.endswith(".py")}
    assert modules == {path.relative_to(REPO).as_posix() for path in (REPO / "kai_fn").rglob("*.py")
                       if path.relative_to(REPO).parts[:2] != ("kai_fn", "local")}
    assert {"kai_fn/__main__.py", "kai_fn/commands/cli.py", "kai_fn/function/handler.py"} <= modules


def test_the_wheel_carries_the_version_and_the_apache_licence(wheel):
    metadata = wheel_text(wheel, ".dist-info/METADATA")
    assert re.search(rf"^Version: {re.escape(__version__)}$", metadata, re.M)
    assert re.search(r"^License-Expression: Apache-2\.0$", metadata, re.M)
    assert wheel_text(wheel, ".dist-info/licenses/LICENSE") == (REPO / "LICENSE").read_text()


def test_the_wheel_declares_the_two_console_scripts(wheel):
    entry_points = configparser.ConfigParser()
    entry_points.read_string(wheel_text(wheel, ".dist-info/entry_points.txt"))
    assert dict(entry_points["console_scripts"]) == ENTRY_POINTS


def test_the_wheel_requires_python_311_the_clis_pins_and_the_servers_as_the_extra_function(wheel):
    metadata = wheel_text(wheel, ".dist-info/METADATA")
    assert re.search(r"^Name: kai-fn$", metadata, re.M) and re.search(r"^Requires-Python: >=3\.11$", metadata, re.M)
    required = re.findall(r"^Requires-Dist: (\S+)==([\w.]+)(; extra == \"(\w+)\")?$", metadata, re.M)
    assert len(required) == len(re.findall(r"^Requires-Dist:", metadata, re.M)), "every requirement pinned exactly"
    assert {normalise(n): v for n, v, _, extra in required if not extra} == pins(REPO / "requirements-cli.txt")
    server = {normalise(n): v for n, v, _, extra in required if extra == "function"}
    assert server == pins(REPO / "requirements.txt") and {extra for *_, extra in required} == {"", "function"}
    assert re.findall(r"^Provides-Extra: (\S+)$", metadata, re.M) == ["function"]


def test_every_pin_agrees_with_constraints_and_the_test_only_ones_stay_out_of_the_runtime():
    constraints = pins(REPO / "constraints.txt")
    cli, runtime, dev = (pins(REPO / name) for name in ("requirements-cli.txt", "requirements.txt",
                                                        "requirements-dev.txt"))
    (backend,) = PYPROJECT["build-system"]["requires"]
    name, _, version = backend.partition("==")
    build = {normalise(name): version}
    assert build == {"setuptools": dev["setuptools"]}, "the build backend: pyproject.toml pins what the tests use"
    for source in (cli, runtime, dev, build):
        assert {n: constraints.get(n) for n in source} == source
    assert not {"kmock", "aiohttp"} & (set(cli) | set(runtime))
    assert not SERVER & set(cli), "the command line needs no server"
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"


@pytest.mark.parametrize("module", ["kmock", "aiohttp.web", "kai_fn.local.emulator"])
def test_the_refusal_refuses(module):
    code = BLOCKER + f"sys.path.insert(0, {str(REPO)!r})\nimport {module}\n"
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "is test-only: the installed package must not import it" in done.stderr


@pytest.mark.parametrize("module", [m for m in shipped_modules() if m != "kai_fn.__main__"])
def test_each_module_of_the_wheel_imports_with_the_test_only_libraries_refused(unpacked, module):
    """In a fresh interpreter, from the wheel's files only (-I: not the checkout)."""
    code = BLOCKER + f"sys.path.insert(0, {str(unpacked)!r})\nimport {module}\n" \
        f"assert {module}.__file__.startswith({str(unpacked)!r}), {module}.__file__\n"
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=unpacked)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("module", [m for m in shipped_modules() if m.startswith(CLI_PACKAGES)])
def test_the_command_lines_modules_import_with_the_servers_libraries_refused_too(unpacked, module):
    """What `pip install kai-fn` installs (no extra) is enough for kubectl kai-fn: no module it runs needs the
    function's server."""
    code = CLI_BLOCKER + f"sys.path.insert(0, {str(unpacked)!r})\nimport {module}\n"
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=unpacked)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_servers_refusal_refuses():
    code = CLI_BLOCKER + f"sys.path.insert(0, {str(REPO)!r})\nimport kai_fn.function.handler\n"
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "the command line must not import it" in done.stderr


@pytest.mark.parametrize("script, prog", [("kai-fn", "kai-fn"), ("kubectl-kai_fn", "kubectl kai-fn")])
def test_each_console_script_answers_help_with_the_server_and_the_test_only_libraries_refused(unpacked, script, prog):
    module, _, function = ENTRY_POINTS[script].partition(":")
    code = CLI_BLOCKER + f"sys.path.insert(0, {str(unpacked)!r})\nsys.argv = [{script!r}, '--help']\n" \
        f"from {module} import {function}\nsys.exit({function}())\n"
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=unpacked)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"usage: {prog} ")
    assert "Gang scheduling for Kubeflow Trainer TrainJobs on KAI Scheduler" in done.stdout
    assert "demo" not in done.stdout


def test_python_m_kai_fn_offers_the_demo_in_a_checkout_only(unpacked):
    code = f"import runpy, sys\nsys.path.insert(0, {str(unpacked)!r})\nsys.argv = ['kai_fn', '--help']\n" \
        "runpy.run_module('kai_fn', run_name='__main__', alter_sys=True)\n"
    installed = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60,
                               cwd=unpacked)
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert installed.stdout.startswith("usage: python -m kai_fn ") and "demo" not in installed.stdout
    checkout = run("--help")
    assert checkout.returncode == 0 and re.search(r"^    demo +", checkout.stdout, re.M), checkout.stdout
