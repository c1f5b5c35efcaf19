"""A curve's entries: what a run measured at each evaluation point, keyed by the point's 1-based index
as text, and the worse of its two copy shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpo.records.keys import COPY_SPACES


def worst_copy(entry: Mapping[str, Any], part: str = "") -> float | None:
    """The worse (larger) of the pixel and feature copy shares in a stored curve entry or floor:
    ``part`` "" for the share, "_low" / "_high" for its interval's ends; None when neither was measured."""
    values = [float(entry[key]) for space in COPY_SPACES if (key := f"copy_{space}{part}") in entry]
    return max(values) if values else None


def last_entry(curve: dict[str, dict[str, float]]) -> dict[str, float] | None:
    """The last evaluation point's entry of a curve (keyed by the point's 1-based index as text)."""
    return curve[max(curve, key=int)] if curve else None
