"""Aligned text tables for what people read in a terminal (``explain``, the demo)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kai_fn.commands.terminal import visible


def table(rows: Sequence[Sequence[Any]], header: Sequence[str] | None = None, indent: str = "  ") -> str:
    """Columns aligned to their widest cell, two spaces apart; None prints as '-', control characters as their
    escapes (:mod:`kai_fn.commands.terminal`)."""
    cells = [[("-" if c is None else visible(c)) for c in row] for row in ([header] if header else []) + list(rows)]
    if not cells:
        return ""
    width = max(len(r) for r in cells)
    widths = [max(len(row[i]) for row in cells if i < len(row)) for i in range(width)]
    return "\n".join(indent + "  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in cells)
