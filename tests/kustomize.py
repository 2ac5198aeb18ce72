"""A small kustomize renderer for the tests, for machines without ``kubectl``.

It supports exactly what ``knative/`` uses and refuses everything else, so that
it can never quietly render something other than kustomize would:

* ``resources``: local YAML files and local directories holding a
  ``kustomization.yaml`` (rendered recursively); no URLs, no generators.
* ``namespace``: set on every object whose kind is not cluster-scoped.
  ServiceAccount subjects of (Cluster)RoleBindings must already name that
  namespace, and a Namespace object must already be named after it (kustomize
  rewrites both; this renderer only checks, because the manifests spell them out).
* ``images``: ``name`` with ``newName`` and one of ``newTag`` / ``digest``,
  applied to every ``containers`` / ``initContainers`` list anywhere in an object.
* ``patches``: JSON 6902 patches (inline ``patch`` or ``path``) with a
  ``target`` of group/version/kind/name (exact matches). ``test`` operations are
  honoured, so a failed guard fails the render as it does in kustomize.
  Of strategic-merge patches only the one that deletes (``$patch: delete``, with a ``target``) is supported: every
  object the target selects is removed, as kustomize removes an object such a patch empties. Others are refused.

* ``components``: local directories holding a ``kind: Component``
  kustomization (same fields, no ``namespace``; a component may list components of its own). As in kustomize, a component's
  resources join the including kustomization's after its own resources, and its
  patches apply to everything accumulated so far; the includer's own
  transformers (namespace, images) then apply to all of it.

Like kustomize, the namespace goes only on kinds listed below as cluster-scoped:
kustomize's built-in schema does not know the admission policies' scope, so it (and this
renderer) set a namespace on those, which the API server clears.

Transformers run in kustomize's order for these kinds: patches, then the
namespace, then images. A patch target that matches nothing is an error here
(kustomize ignores it), which only makes the renderer stricter.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import jsonpatch
import yaml

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_KEYS = {"apiVersion", "kind", "namespace", "resources", "images", "patches", "components"}
COMPONENT_KEYS = {"apiVersion", "kind", "resources", "images", "patches", "components"}

# Cluster-scoped kinds this project can contain (a namespace is never set on them).
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "ClusterTrainingRuntime",
    "Queue",
    "Topology",
}


class KustomizeError(ValueError):
    """The kustomization uses something this renderer does not support, or is broken."""


def _kustomization_file(directory: Path) -> Path:
    for name in KUSTOMIZATION_FILES:
        path = directory / name
        if path.is_file():
            return path
    raise KustomizeError(f"no kustomization file in {directory}")


def _load_docs(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            raise KustomizeError(f"{path}: not a Kubernetes object: {doc!r:.80}")
    return docs


def object_id(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    """(group, kind, namespace, name): what kustomize treats as one object."""
    group = obj["apiVersion"].rpartition("/")[0]
    meta = obj.get("metadata") or {}
    return group, obj["kind"], meta.get("namespace", ""), meta.get("name", "")


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _matches(target: dict[str, Any], obj: dict[str, Any]) -> bool:
    unknown = set(target) - {"group", "version", "kind", "name", "namespace"}
    if unknown:
        raise KustomizeError(f"unsupported patch target fields: {sorted(unknown)}")
    group, version = _group_version(obj["apiVersion"])
    meta = obj.get("metadata") or {}
    checks = {
        "group": group,
        "version": version,
        "kind": obj["kind"],
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", ""),
    }
    return all(target[key] == checks[key] for key in target)


def _apply_patches(objs: list[dict[str, Any]], patches: list[dict[str, Any]], base: Path) -> None:
    for entry in patches:
        unknown = set(entry) - {"target", "patch", "path"}
        if unknown:
            raise KustomizeError(f"unsupported patch fields: {sorted(unknown)}")
        if ("patch" in entry) == ("path" in entry):
            raise KustomizeError("a patch needs exactly one of `patch` and `path`")
        text = entry["patch"] if "patch" in entry else (base / entry["path"]).read_text()
        ops = yaml.safe_load(text)
        if isinstance(ops, dict) and ops.get("$patch") == "delete" and "target" in entry:
            doomed = [obj for obj in objs if _matches(entry["target"], obj)]
            if not doomed:
                raise KustomizeError(f"patch target matches nothing: {entry['target']}")
            objs[:] = [obj for obj in objs if not any(obj is d for d in doomed)]
            continue
        if not isinstance(ops, list):
            raise KustomizeError("only JSON 6902 patches (a list of operations) are supported, and a strategic-merge "
                                 "`$patch: delete` with a target")
        if "target" not in entry:
            raise KustomizeError("a JSON 6902 patch needs a target")
        patch = jsonpatch.JsonPatch(ops)
        hits = [i for i, obj in enumerate(objs) if _matches(entry["target"], obj)]
        if not hits:
            raise KustomizeError(f"patch target matches nothing: {entry['target']}")
        for i in hits:
            try:
                objs[i] = patch.apply(objs[i])
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise KustomizeError(f"patch {entry['target']} failed: {exc}") from exc


def _set_namespace(objs: list[dict[str, Any]], namespace: str) -> None:
    for obj in objs:
        kind = obj["kind"]
        meta = obj.setdefault("metadata", {})
        if kind == "Namespace":
            if meta.get("name") != namespace:
                raise KustomizeError(
                    f"Namespace {meta.get('name')!r} would be renamed to {namespace!r}: unsupported"
                )
            continue
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            for subject in obj.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount" and subject.get("namespace") != namespace:
                    raise KustomizeError(
                        f"{kind} {meta.get('name')!r}: ServiceAccount subject must name namespace "
                        f"{namespace!r} explicitly"
                    )
        if kind not in CLUSTER_SCOPED:
            meta["namespace"] = namespace


_IMAGE_RE = re.compile(r"^(?P<name>[^@]+?)(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[^@]+))?$")


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """'reg:5000/a/b:tag@sha256:..' -> ('reg:5000/a/b', 'tag', 'sha256:..')."""
    match = _IMAGE_RE.match(image)
    if not match:
        raise KustomizeError(f"cannot parse image {image!r}")
    name, tag, digest = match["name"], match["tag"], match["digest"]
    # A ':' in the last path segment only: 'host:5000/x' has no tag.
    if tag is None and ":" in name.rsplit("/", 1)[-1]:
        raise KustomizeError(f"cannot parse image {image!r}")
    return name, tag, digest


def _containers(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from (c for c in value if isinstance(c, dict))
            else:
                yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


def _set_images(objs: list[dict[str, Any]], images: list[dict[str, Any]]) -> None:
    for entry in images:
        unknown = set(entry) - {"name", "newName", "newTag", "digest"}
        if unknown:
            raise KustomizeError(f"unsupported images fields: {sorted(unknown)}")
        if "newTag" in entry and "digest" in entry:
            raise KustomizeError("images: give newTag or digest, not both")
        for obj in objs:
            for container in _containers(obj):
                image = container.get("image")
                if not isinstance(image, str):
                    continue
                name, tag, digest = split_image(image)
                if name != entry["name"]:
                    continue
                new = entry.get("newName", name)
                if "digest" in entry:
                    new += "@" + entry["digest"]
                elif "newTag" in entry:
                    new += ":" + str(entry["newTag"])
                else:
                    new += (":" + tag if tag else "") + ("@" + digest if digest else "")
                container["image"] = new


def render(directory: str | Path) -> list[dict[str, Any]]:
    """Render the kustomization in ``directory`` to a list of objects."""
    return _render(Path(directory), component=False)


def _render(directory: Path, component: bool, objs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    path = _kustomization_file(directory)
    kustomization = yaml.safe_load(path.read_text()) or {}
    kind = "Component" if component else "Kustomization"
    allowed = COMPONENT_KEYS if component else SUPPORTED_KEYS
    unknown = set(kustomization) - allowed
    if unknown:
        raise KustomizeError(f"{path}: unsupported {kind.lower()} fields: {sorted(unknown)}")
    if kustomization.get("kind", "Kustomization") != kind:
        raise KustomizeError(f"{path}: kind must be {kind}")

    objs = [] if objs is None else objs
    for resource in kustomization.get("resources") or []:
        if re.match(r"^[a-z][a-z0-9+.-]*://", resource) or resource.startswith("github.com/"):
            raise KustomizeError(f"{path}: remote resources are not supported: {resource}")
        target = (directory / resource).resolve()
        if target.is_dir():
            objs.extend(render(target))
        elif target.is_file():
            objs.extend(copy.deepcopy(_load_docs(target)))
        else:
            raise KustomizeError(f"{path}: resource not found: {resource}")
    for entry in kustomization.get("components") or []:
        target = (directory / entry).resolve()
        if not target.is_dir():
            raise KustomizeError(f"{path}: component not found: {entry}")
        objs = _render(target, component=True, objs=objs)

    _apply_patches(objs, kustomization.get("patches") or [], directory)
    if "namespace" in kustomization:
        _set_namespace(objs, kustomization["namespace"])
    _set_images(objs, kustomization.get("images") or [])

    seen: set[tuple[str, str, str, str]] = set()
    for obj in objs:
        oid = object_id(obj)
        if oid in seen:
            raise KustomizeError(f"{path}: duplicate object {oid}")
        seen.add(oid)
    return objs
