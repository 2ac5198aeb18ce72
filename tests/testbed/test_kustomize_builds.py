"""Every install path, and every variant with each version component and the monitoring component, builds with the
real ``kubectl kustomize`` (testbed/build.sh kubectl, the testbed's version) into what tests/deploy checked with the
renderer of tests/kustomize.py. The deploy tier renders with kubectl only where it is on the PATH; here, in CI, it
must be."""
from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml

from kai_fn.local.process import built
from tests import kustomize
from tests.manifests import INSTALLS, KNATIVE, MONITORING, VARIANTS, VERSION_COMPONENTS, with_components

PATHS = {**{p: p for p in sorted({*INSTALLS.values(), *VARIANTS})},
         **{f"{v} + {c}": with_components(v, c) for v in VARIANTS for c in (*VERSION_COMPONENTS.values(), MONITORING)}}


@cache
def kubectl() -> Path:
    where = built("kubectl")
    return where / "kubectl" if where.is_dir() else where


def by_id(objs):
    return {(*kustomize.object_id(o), o["apiVersion"]): o for o in objs}


@pytest.mark.parametrize("path", PATHS.values(), ids=list(PATHS))
def test_kubectl_kustomize_builds_it_as_the_tests_render_it(path):
    done = subprocess.run([str(kubectl()), "kustomize", str(KNATIVE / path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    real = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert by_id(real) == by_id(kustomize.render(KNATIVE / path))
