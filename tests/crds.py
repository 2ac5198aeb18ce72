"""Validation of objects against the real upstream CRD schemas in ``../shared/crds``.

The CRDs are data owned upstream; tests read them where the workplace lays them
(``KAI_FN_CRDS_DIR`` overrides) and never copy or edit them.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO = Path(__file__).resolve().parent.parent
CRDS_DIR = Path(os.environ.get("KAI_FN_CRDS_DIR", REPO.parent / "shared" / "crds"))


class SchemaError(AssertionError):
    """An object does not fit its CRD's openAPIV3Schema."""


@functools.cache
def _schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema, for every served version of every CRD."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(CRDS_DIR.glob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                schema = version.get("schema", {}).get("openAPIV3Schema")
                if schema:
                    out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    if not out:
        raise RuntimeError(f"no CRDs found in {CRDS_DIR}")
    return out


def known(obj: dict[str, Any]) -> bool:
    return (obj.get("apiVersion"), obj.get("kind")) in _schemas()


@functools.cache
def _validator(key: tuple[str, str]) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(_schemas()[key])


def errors(obj: dict[str, Any]) -> list[str]:
    """Every schema violation of ``obj`` as ``path: message``; empty when it fits."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key not in _schemas():
        return [f"no CRD for apiVersion={key[0]!r} kind={key[1]!r}"]
    validator = _validator(key)
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]


def validate(obj: dict[str, Any]) -> None:
    problems = errors(obj)
    if problems:
        name = obj.get("metadata", {}).get("name")
        raise SchemaError(f"{obj.get('kind')} {name!r} does not fit its CRD:\n  " + "\n  ".join(problems))
