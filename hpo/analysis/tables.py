"""Plain-text tables for the terminal: one format for ``hpo status``, ``hpo confirm`` and the rest."""

from __future__ import annotations

from collections.abc import Sequence


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    """Columns padded to their widest cell, a dashed rule under the header."""
    cells = [[str(c) for c in header]] + [[cell_text(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cell_text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def duration(seconds: float) -> str:
    """``1h05m`` from an hour on, else ``12m30s`` (``0m45s`` under a minute): whole seconds."""
    s = max(0, int(seconds))
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
