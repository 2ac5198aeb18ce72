"""The small kustomize renderer (tests/kustomize.py) agrees with kubectl and refuses what it does not support."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests import kustomize
from tests.manifests import KNATIVE, KUBECTL, VARIANTS


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not on PATH")
@pytest.mark.parametrize("variant", VARIANTS)
def test_python_renderer_agrees_with_kubectl_kustomize(variant):
    done = subprocess.run([KUBECTL, "kustomize", str(KNATIVE / variant)], capture_output=True, text=True, check=True)
    theirs = sorted((d for d in yaml.safe_load_all(done.stdout) if d), key=kustomize.object_id)
    ours = sorted(kustomize.render(KNATIVE / variant), key=kustomize.object_id)
    assert ours == theirs


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


DEPLOY = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  template:
    spec:
      containers:
        - {name: a, image: "example.com/app:1"}
        - {name: b, image: "other.io/x"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r}
rules: []
"""


@pytest.mark.parametrize(
    "images,expected",
    [
        ([{"name": "example.com/app", "newTag": "2"}], "example.com/app:2"),
        ([{"name": "example.com/app", "newName": "reg/app", "digest": "sha256:" + "a" * 64}], "reg/app@sha256:" + "a" * 64),
        ([{"name": "example.com/app", "newName": "reg:5000/app"}], "reg:5000/app:1"),
        ([{"name": "example.com/ap", "newTag": "9"}], "example.com/app:1"),
    ],
    ids=["new-tag", "new-name-and-digest", "new-name-keeps-tag", "no-prefix-match"],
)
def test_renderer_sets_images_by_exact_name(tmp_path, images, expected):
    k = {"resources": ["d.yaml"], "images": images}
    _write(tmp_path, {"d.yaml": DEPLOY, "kustomization.yaml": yaml.safe_dump(k)})
    deploy, _ = kustomize.render(tmp_path)
    a, b = deploy["spec"]["template"]["spec"]["containers"]
    assert (a["image"], b["image"]) == (expected, "other.io/x")


def test_renderer_sets_namespace_on_namespaced_objects_only(tmp_path):
    _write(tmp_path, {"d.yaml": DEPLOY, "kustomization.yaml": "namespace: ns\nresources: [d.yaml]\n"})
    deploy, role = kustomize.render(tmp_path)
    assert deploy["metadata"]["namespace"] == "ns"
    assert "namespace" not in role["metadata"]


PATCHED = """\
resources: [../base]
patches:
  - target: {group: apps, version: v1, kind: Deployment, name: d}
    patch: |-
      - op: test
        path: /spec/template/spec/containers/0/name
        value: %s
      - op: replace
        path: /spec/template/spec/containers/0/image
        value: patched
"""


@pytest.mark.parametrize("guard,ok", [("a", True), ("b", False)], ids=["guard-holds", "guard-fails"])
def test_renderer_applies_json6902_patches_with_test_guards(tmp_path, guard, ok):
    _write(tmp_path, {"base/d.yaml": DEPLOY, "base/kustomization.yaml": "resources: [d.yaml]\n"})
    _write(tmp_path, {"overlay/kustomization.yaml": PATCHED % guard})
    if ok:
        deploy, _ = kustomize.render(tmp_path / "overlay")
        assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "patched"
    else:
        with pytest.raises(kustomize.KustomizeError, match="test"):
            kustomize.render(tmp_path / "overlay")


def test_renderer_adds_a_components_objects_and_patches_then_the_includers_namespace(tmp_path):
    component = """\
apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
resources: [cm.yaml]
patches:
  - target: {group: apps, version: v1, kind: Deployment, name: d}
    patch: '[{op: replace, path: /spec/template/spec/containers/0/image, value: from-component}]'
"""
    _write(tmp_path, {"c/kustomization.yaml": component, "c/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\n",
                      "k/d.yaml": DEPLOY, "k/kustomization.yaml": "namespace: ns\nresources: [d.yaml]\ncomponents: [../c]\n"})
    deploy, role, cm = kustomize.render(tmp_path / "k")
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "from-component"
    assert (cm["kind"], cm["metadata"]["namespace"], "namespace" in role["metadata"]) == ("ConfigMap", "ns", False)


@pytest.mark.parametrize(
    "kustomization,refusal",
    [
        ("resources: [d.yaml]\ncommonLabels: {a: b}\n", r"unsupported kustomization fields: \['commonLabels'\]"),
        ("resources: [https://example.com/x.yaml]\n",
         r"remote resources are not supported: https://example\.com/x\.yaml"),
        ("resources: [d.yaml]\npatches:\n  - path: p.yaml\n",  # strategic merge
         r"only JSON 6902 patches \(a list of operations\) are supported"),
        ("resources: [d.yaml]\npatches:\n  - target: {kind: Nope}\n    patch: '[]'\n",
         r"patch target matches nothing: \{'kind': 'Nope'\}"),
        ("resources: [d.yaml, d.yaml]\n", r"duplicate object \('apps', 'Deployment', '', 'd'\)"),
        ("resources: [d.yaml]\ncomponents: [missing]\n", r"component not found: missing"),
    ],
    ids=["unsupported-field", "remote-resource", "strategic-merge", "target-matches-nothing", "duplicate",
         "missing-component"],
)
def test_renderer_refuses_what_it_does_not_support(tmp_path, kustomization, refusal):
    _write(tmp_path, {"d.yaml": DEPLOY, "p.yaml": "kind: Deployment\n", "kustomization.yaml": kustomization})
    with pytest.raises(kustomize.KustomizeError, match=refusal):
        kustomize.render(tmp_path)



DELETE = "$patch: delete\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: any}\n"
ROLE = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\nrules: []\n"


def _delete_with(tmp_path, target: str) -> None:
    _write(tmp_path, {"d.yaml": DEPLOY, "r.yaml": ROLE, "p.yaml": DELETE,
                      "kustomization.yaml": f"resources: [d.yaml, r.yaml]\npatches:\n  - target: {target}\n"
                                            "    path: p.yaml\n"})


@pytest.mark.parametrize("target", ["{kind: Deployment}", "{group: apps, version: v1, kind: Deployment, name: d}"])
def test_a_delete_patch_removes_every_object_its_target_selects_and_no_other(tmp_path, target):
    _delete_with(tmp_path, target)
    assert [o["kind"] for o in kustomize.render(tmp_path)] == ["ClusterRole", "Role"]


def test_a_delete_patch_whose_target_selects_nothing_is_refused(tmp_path):
    _delete_with(tmp_path, "{kind: Deployment, version: v2}")
    with pytest.raises(kustomize.KustomizeError, match="patch target matches nothing"):
        kustomize.render(tmp_path)
