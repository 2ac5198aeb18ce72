"""Kubernetes resource quantities: parsed and summed exactly, printed as Go does.

Go's ``resource.Quantity`` keeps the format of the value it was parsed from (binary ``Ki``..``Ei`` or decimal
``m``, ``k``..``E``) and a sum keeps the format of its first term, which is why Trainer's coscheduling plugin
reports ``2×1Gi + 512Mi`` as ``2560Mi``. We reproduce that so minResources reads the same as upstream.
"""
from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Literal

Format = Literal["binary", "decimal"]

# apimachinery's grammar (pkg/api/resource/quantity.go); the client's parser alone accepts "1K", "NaN" and "inf".
_SYNTAX = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?\d+))?$")
_NANO = Decimal("1e-9")
_BINARY = [(6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")]
_DECIMAL = [(18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"), (0, ""), (-3, "m"), (-6, "u"), (-9, "n")]


def _client_parser() -> Callable[[str], Decimal]:
    """The official client's ``parse_quantity``, loaded from its own file.

    ``from kubernetes.utils import parse_quantity`` would load the whole client (urllib3 included), which the pure
    core must not; that one file needs only ``decimal``.
    """
    client = importlib.util.find_spec("kubernetes")
    if client is None or not client.submodule_search_locations:
        raise ImportError("the kubernetes client package is not installed (see requirements.txt)")
    path = Path(next(iter(client.submodule_search_locations))) / "utils" / "quantity.py"
    spec = importlib.util.spec_from_file_location("kai_fn.core._client_quantity", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parse: Callable[[str], Decimal] = module.parse_quantity
    return parse


_parse_quantity = _client_parser()


@dataclass(frozen=True)
class Quantity:
    value: Decimal
    format: Format = "decimal"

    @classmethod
    def parse(cls, text: str | int | float) -> Quantity:
        raw = str(text).strip()
        if not _SYNTAX.match(raw):
            raise ValueError(f"{raw!r} is not a Kubernetes quantity")
        value = _parse_quantity(raw)
        # Go keeps at most nanosecond-scale precision and rounds up what lies below it.
        value = (value / _NANO).to_integral_value(rounding=ROUND_CEILING) * _NANO
        fmt: Format = "binary" if raw.endswith("i") else "decimal"
        return cls(value, fmt)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self.format)

    def __mul__(self, factor: int) -> Quantity:
        return Quantity(self.value * factor, self.format)

    __rmul__ = __mul__

    def __str__(self) -> str:
        return canonical(self.value, self.format)


def canonical(value: Decimal, fmt: Format = "decimal") -> str:
    """The string Go's ``Quantity.String()`` gives: the largest suffix that keeps the mantissa whole."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if fmt == "binary" and value < 1024:
        fmt = "decimal"  # Go prints small binary values in decimal rather than round them
    if fmt == "binary" and value == value.to_integral_value():
        whole = int(value)
        for power, suffix in _BINARY:
            if whole % (1024**power) == 0:
                return f"{sign}{whole // 1024**power}{suffix}"
        return f"{sign}{whole}"
    nanos = int((value / _NANO).to_integral_value(rounding=ROUND_CEILING))
    for exponent, suffix in _DECIMAL:
        step = 10 ** (exponent + 9)
        if nanos % step == 0:
            return f"{sign}{nanos // step}{suffix}"
    raise AssertionError("unreachable: every integer count of nanos is a multiple of 1")
