"""Go's ``time.ParseDuration`` and ``Duration.String``: what KAI parses from an annotation and writes back.

KAI's podgrouper stores a parsed duration (``metav1.Duration``), so ``90s`` on a workload is ``1m30s`` on its PodGroup;
kai_fn writes the same text.
"""
from __future__ import annotations

import re

_UNITS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?(ns|us|µs|μs|ms|s|m|h)")
_MAX = (1 << 63) - 1


def parse(text: str) -> int | None:
    """Nanoseconds, or None where Go returns an error."""
    rest = text
    negative = rest[:1] == "-"
    rest = rest[1:] if rest[:1] in "-+" and rest else rest
    if rest == "0":
        return 0
    if not rest:
        return None
    total = 0
    while rest:
        part = _PART.match(rest)
        if part is None or not (part.group(1) or part.group(2)):
            return None
        whole, fraction, unit = part.group(1), part.group(2) or "", _UNITS[part.group(3)]
        value = int(whole or "0") * unit
        if fraction:  # Go scales the fraction in float64, as here
            value += int(int(fraction) * (unit / 10 ** len(fraction)))
        total += value
        if total > _MAX + (1 if negative else 0):
            return None
        rest = rest[part.end():]
    return -total if negative else total


def text(ns: int) -> str:
    """Go's ``Duration.String``: ``0s``, ``1.5s``, ``1m30s``, ``1h0m0s``, ``500ms``, ``-1s``."""
    if ns == 0:
        return "0s"
    sign, u = ("-" if ns < 0 else ""), abs(ns)
    if u < 10**9:
        for limit, unit, scale in ((10**3, "ns", 1), (10**6, "µs", 10**3), (10**9, "ms", 10**6)):
            if u < limit:
                return sign + _fraction(u, scale) + unit
    out = _fraction(u % (60 * 10**9), 10**9) + "s"
    minutes = u // (60 * 10**9)
    if minutes:
        out = f"{minutes % 60}m" + out
        if minutes // 60:
            out = f"{minutes // 60}h" + out
    return sign + out


def _fraction(value: int, scale: int) -> str:
    whole, rest = divmod(value, scale)
    digits = f"{rest:0{len(str(scale)) - 1}d}".rstrip("0") if scale > 1 else ""
    return f"{whole}.{digits}" if digits else str(whole)
