"""One version, written once (kai_fn/__init__.py), and everything that names it agrees: the package's metadata
(pyproject.toml reads it), the image tag of knative/base and func.yaml, CHANGELOG.md's newest release; the licence is
the upstreams' (Apache-2.0), in LICENSE and in the package's metadata."""
from __future__ import annotations

import re
import tomllib

import pytest
import yaml

from kai_fn import __version__
from tests.kustomize import split_image
from tests.packaging import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_the_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_pyproject_reads_the_version_from_the_package():
    assert "version" not in PYPROJECT["project"] and PYPROJECT["project"]["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kai_fn.__version__"}


def base_image_tag() -> str:
    kustomization = yaml.safe_load((REPO / "knative" / "base" / "kustomization.yaml").read_text())
    (entry,) = kustomization["images"]
    return str(entry.get("newTag") or entry.get("digest"))


def func_yaml_tag() -> str:
    _, tag, _ = split_image(yaml.safe_load((REPO / "func.yaml").read_text())["image"])
    return str(tag)


def changelog_releases() -> list[str]:
    return re.findall(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(), re.M)


@pytest.mark.parametrize("where, named", [
    ("knative/base/kustomization.yaml, images: newTag", base_image_tag),
    ("func.yaml, image", func_yaml_tag),
    ("CHANGELOG.md, the newest release", lambda: changelog_releases()[1]),
])
def test_everything_that_names_the_version_names_the_packages(where, named):
    assert named() == __version__, where


def test_the_changelog_keeps_unreleased_work_at_the_top_and_its_releases_newest_first():
    releases = changelog_releases()
    assert releases[0] == "Unreleased"
    numbers = [tuple(int(p) for p in r.split(".")) for r in releases[1:]]
    assert numbers == sorted(numbers, reverse=True) and len(numbers) >= 2


def test_the_licence_is_apache_2_0_as_the_upstreams_and_declared_in_pyproject():
    text = (REPO / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n") and "Version 2.0, January 2004" in text
    assert (PYPROJECT["project"]["license"], PYPROJECT["project"]["license-files"]) == ("Apache-2.0", ["LICENSE"])
