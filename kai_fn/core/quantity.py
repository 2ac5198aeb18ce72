"""Kubernetes resource quantities: parsed and summed exactly, printed as Go does.

Go's ``resource.Quantity`` keeps the format of the value it was parsed from (binary ``Ki``..``Ei`` or decimal
``m``, ``k``..``E``) and a sum keeps the format of its first term, which is why Trainer's coscheduling plugin
reports ``2×1Gi + 512Mi`` as ``2560Mi``. We reproduce that so minResources reads the same as upstream.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Literal

Format = Literal["binary", "decimal"]

# apimachinery's grammar (pkg/api/resource/quantity.go): a number, then a suffix or a decimal exponent.
_SYNTAX = re.compile(r"^(?P<number>[+-]?(\d+(\.\d*)?|\.\d+))"
                     r"((?P<suffix>[KMGTPE]i|[numkMGTPE])|(?P<exponent>[eE][+-]?\d+))?$")
_SUFFIXES = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "Pi": 1024**5, "Ei": 1024**6,
             "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3, "M": 10**6, "G": 10**9,
             "T": 10**12, "P": 10**15, "E": 10**18}
_NANO = Decimal("1e-9")
_BINARY = [(6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")]
_DECIMAL = [(18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"), (0, ""), (-3, "m"), (-6, "u"), (-9, "n")]


@dataclass(frozen=True)
class Quantity:
    value: Decimal
    format: Format = "decimal"

    @classmethod
    def parse(cls, text: str | int | float) -> Quantity:
        raw = str(text).strip()
        match = _SYNTAX.match(raw)
        if not match:
            raise ValueError(f"{raw!r} is not a Kubernetes quantity")
        value = Decimal(match["number"] + (match["exponent"] or "")) * _SUFFIXES.get(match["suffix"] or "", 1)
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
