"""From a fresh clone to ``kubectl kai-fn status -A`` against a real API server: the wheel built as ``pip install .``
builds it (the backend pinned in pyproject.toml), installed into a fresh virtualenv with nothing else (every
dependency pinned by constraints.txt; PyPI through pip, whose cache makes a warm run fast), ``kai-fn --help``, and
kubectl v1.36 (built with the testbed) running the plugin from the PATH with kubectl's flags as users type them."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kai_fn import __version__
from tests.packaging import REPO, build_wheel
from tests.testbed.conftest import LiveCluster


@dataclass(frozen=True)
class Installed:
    bin: Path
    cwd: Path  # not the checkout, so nothing imports kai_fn from it

    @property
    def env(self) -> dict[str, str]:
        """kubectl finds plugins on the PATH; the venv's bin first, and no PYTHONPATH into the checkout."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KUBECONFIG", "KAI_"))}
        return env | {"PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}

    def run(self, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), cwd=self.cwd, env=self.env | (env or {}), capture_output=True, text=True,
                              timeout=120)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Iterator[Installed]:
    """A fresh virtualenv (as `python -m venv` makes one) with the wheel installed, -c constraints.txt."""
    root = tmp_path_factory.mktemp("fresh-install")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    python = venv / "bin" / "python"
    pip_env = {k: v for k, v in os.environ.items() if k not in ("PIP_NO_CACHE_DIR", "PYTHONPATH")}
    wheel = build_wheel(python, root, isolated=True, env=pip_env)
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel),
                           "-c", str(REPO / "constraints.txt")], capture_output=True, text=True, timeout=900,
                          env=pip_env)
    assert done.returncode == 0, done.stdout + done.stderr
    yield Installed(bin=venv / "bin", cwd=root)


def test_the_fresh_install_is_the_package_its_pinned_dependencies_and_nothing_test_only(installed):
    listed = installed.run(str(installed.bin / "python"), "-c", "import importlib.metadata as m, json; "
                           "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")
    assert listed.returncode == 0, listed.stderr
    versions = {normalise(name): version for name, version in json.loads(listed.stdout).items()}
    constraints = {normalise(line.split("==")[0]): line.split("==")[1].strip()
                   for line in (REPO / "constraints.txt").read_text().splitlines()
                   if line.strip() and not line.startswith("#")}
    assert versions.pop("kai-fn") == __version__
    for tool in ("pip", "setuptools"):  # what `python -m venv` puts in every virtualenv
        versions.pop(tool, None)
    assert {n: v for n, v in versions.items() if constraints.get(n) != v} == {}, "not at constraints.txt's pins"
    assert "kmock" not in versions
    assert not {"functions-framework", "flask", "gunicorn", "waitress", "cloudevents"} & set(versions), "the server is an extra"
    where = installed.run(str(installed.bin / "python"), "-c", "import importlib.util as u, kai_fn; "
                          "print(kai_fn.__file__, u.find_spec('kai_fn.local'), u.find_spec('kmock'))")
    path, local, kmock = where.stdout.split()
    assert "site-packages" in path and not path.startswith(str(REPO)) and (local, kmock) == ("None", "None")


def test_kai_fn_help(installed):
    done = installed.run(str(installed.bin / "kai-fn"), "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: kai-fn ")
    assert "Gang scheduling for Kubeflow Trainer TrainJobs on KAI Scheduler" in done.stdout


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def current_context(kubeconfig: Path) -> str:
    return yaml.safe_load(kubeconfig.read_text())["current-context"]


def test_kubectl_lists_the_plugin(installed, testbed: LiveCluster):
    done = installed.run(str(testbed.kubectl_path), "plugin", "list")
    assert str(installed.bin / "kubectl-kai_fn") in done.stdout, done.stdout + done.stderr


def test_kubectl_kai_fn_status_all_namespaces_against_the_real_api_server(installed, testbed: LiveCluster):
    kubectl = str(testbed.kubectl_path)
    done = installed.run(kubectl, "kai-fn", "status", "-A", "--kubeconfig", str(testbed.kubeconfig))
    assert done.returncode in (0, 1), done.stderr  # 1: something held longer than 2m (other tests' TrainJobs)
    assert done.stdout.startswith(("NAMESPACE ", "no TrainJob in kai_fn's scope")), done.stdout
    # The same reading as the checkout's own CLI, through kubectl's flags in every position users type them.
    ours = subprocess.run([sys.executable, "-m", "kai_fn", "status", "-A", "-o", "json", "--kubeconfig",
                           str(testbed.kubeconfig)], cwd=REPO, capture_output=True, text=True, timeout=120)
    expected = sorted((i["namespace"], i["name"]) for i in json.loads(ours.stdout))
    context = current_context(testbed.kubeconfig)
    for argv, env in [
        (["kai-fn", "--kubeconfig", str(testbed.kubeconfig), "--context", context, "status", "-A", "-o", "json"], {}),
        (["kai-fn", "status", "-o", "json", "--context", context], {"KUBECONFIG": str(testbed.kubeconfig)}),
        (["kai-fn", "-A", "status", "--output", "json"], {"KUBECONFIG": str(testbed.kubeconfig)}),
    ]:
        done = installed.run(kubectl, *argv, env=env)
        assert done.returncode in (0, 1), (argv, done.stderr)
        assert sorted((i["namespace"], i["name"]) for i in json.loads(done.stdout)) == expected, argv


def test_kubectl_kai_fn_explain_and_release_answer_from_the_real_api_server(installed, testbed: LiveCluster):
    kubectl, kubeconfig = str(testbed.kubectl_path), str(testbed.kubeconfig)
    testbed.ensure_namespace("kai-fn-plugin")
    done = installed.run(kubectl, "kai-fn", "explain", "-n", "kai-fn-plugin", "nope", "--kubeconfig", kubeconfig)
    assert done.returncode == 2 and done.stderr.startswith("error: no TrainJob kai-fn-plugin/nope"), done.stderr
    done = installed.run(kubectl, "kai-fn", "-n", "kai-fn-plugin", "release", "--held", "--kubeconfig", kubeconfig)
    assert (done.returncode, done.stdout.strip()) == (0, "nothing held in namespace kai-fn-plugin"), done.stderr


def test_kubectl_kai_fn_with_a_context_the_kubeconfig_lacks_says_so_in_one_line(installed, testbed: LiveCluster):
    done = installed.run(str(testbed.kubectl_path), "kai-fn", "status", "--context", "nope", "--kubeconfig",
                         str(testbed.kubeconfig))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: no Kubernetes API to talk to") and len(done.stderr.splitlines()) == 1
