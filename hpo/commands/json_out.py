"""The one writer of the ``--json`` outputs (``hpo status``, ``hpo confirm``): standard JSON, where a
NaN or infinite number (a score not measured) is ``null``."""

from __future__ import annotations

import json
import math


def json_safe(value: object) -> object:
    """``value`` with tuples as lists, keys as strings and every non-finite float as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def json_text(data: object, indent: int | None = 2) -> str:
    return json.dumps(json_safe(data), indent=indent, allow_nan=False)
