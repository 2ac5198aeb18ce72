"""Kubernetes resource quantities: parsed and summed exactly, printed as Go does.

Go's ``resource.Quantity`` keeps the format of the value it was parsed from (binary ``Ki``..``Ei`` or decimal
``m``, ``k``..``E``) and a sum keeps the format of its first term, which is why Trainer's coscheduling plugin
reports ``2×1Gi + 512Mi`` as ``2560Mi``. We reproduce that so minResources reads the same as upstream.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Literal

Format = Literal["binary", "decimal"]

# apimachinery's grammar (pkg/api/resource/quantity.go): a signed decimal number and one optional suffix.
_SYNTAX = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?\d+))?$")
_NANO = Decimal("1e-9")
_BINARY = [(6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")]
_DECIMAL = [(18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"), (0, ""), (-3, "m"), (-6, "u"), (-9, "n")]
_FACTORS = {suffix: Decimal(1024) ** power for power, suffix in _BINARY} | {
    suffix: Decimal(10) ** exponent for exponent, suffix in _DECIMAL}
# The largest quantity kai_fn reads: far above anything a node has (Kubernetes counts in int64, 9.2E), and a bound
# keeps every later sum and printout cheap whatever a runtime or TrainJob says.
LIMIT = Decimal(10) ** 24


def _value(raw: str) -> Decimal:
    match = _SYNTAX.fullmatch(raw)
    if match is None:
        raise ValueError(f"{raw!r} is not a Kubernetes quantity")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if match.group(4):  # an exponent, not the suffix E
            exponent = int(suffix[1:])
            if abs(exponent) > 30:
                raise ValueError(f"{raw!r} is out of range for a Kubernetes quantity")
            value = Decimal(number).scaleb(exponent)
        else:
            value = Decimal(number) * _FACTORS[suffix]
    except InvalidOperation:
        raise ValueError(f"{raw!r} is not a Kubernetes quantity") from None
    if abs(value) > LIMIT:
        raise ValueError(f"{raw!r} is out of range for a Kubernetes quantity (at most {LIMIT})")
    return value


@dataclass(frozen=True)
class Quantity:
    value: Decimal
    format: Format = "decimal"

    @classmethod
    def parse(cls, text: str | int | float) -> Quantity:
        raw = str(text).strip()
        if len(raw) > 64:
            raise ValueError(f"{raw[:20]!r}... is not a Kubernetes quantity (longer than 64 characters)")
        value = _value(raw)
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
