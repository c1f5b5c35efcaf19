"""A budget's words → seconds: ``8h``, ``90m``, ``1h30m``, ``45s``, ``2d`` (back: ``tables.duration``)."""

from __future__ import annotations

import re

from hpo.errors import HpoError

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_budget(text: str) -> float:
    """Seconds in ``text``: one or more number-unit pairs (s, m, h, d), e.g. ``8h``, ``1h30m``, ``20m``."""
    compact = text.strip().lower().replace(" ", "")
    parts = PART.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise HpoError(
            f"--budget {text!r}: not a duration; give a number with a unit s, m, h or d, e.g. 8h, 90m, 1h30m"
        )
    seconds = sum(float(n) * UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise HpoError(f"--budget {text!r}: the budget must be more than nothing, e.g. 20m")
    return seconds
