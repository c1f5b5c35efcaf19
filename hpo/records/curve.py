"""A curve: what a run measured at each evaluation point, stored keyed by the point's 1-based index as
text and read as typed points (``CurvePoint``), and the worse of an entry's two copy shares."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpo.records.keys import COPY_SPACES


def worst_copy(entry: Mapping[str, Any], part: str = "") -> float | None:
    """The worse (larger) of the pixel and feature copy shares in a stored curve entry or floor:
    ``part`` "" for the share, "_low" / "_high" for its interval's ends; None when neither was measured."""
    values = [float(entry[key]) for space in COPY_SPACES if (key := f"copy_{space}{part}") in entry]
    return max(values) if values else None


@dataclass(frozen=True)
class CurvePoint:
    """One evaluation point as a trial or summary.json stores it: the images seen by then (``kimg``), the
    validation metric at each noise level and its mean, and (``hpo train``, budget ladders) the score at
    the watched combination, the copy shares and the generalisation gap, each under its name."""

    index: int  # 1-based
    values: Mapping[str, float]

    @property
    def kimg(self) -> float:
        return float(self.values.get("kimg", 0.0))

    @property
    def score(self) -> float | None:
        """The score at the watched combination, where this point was scored and it was finite."""
        value = self.get("score")
        return value if value is not None and math.isfinite(value) else None

    def get(self, name: str) -> float | None:
        """The value measured under ``name`` (e.g. ``PRUNING_METRIC``, ``gap``); None when absent."""
        value = self.values.get(name)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def worst_copy(self, part: str = "") -> float | None:
        return worst_copy(self.values, part)


def curve_points(curve: Mapping[str, Any]) -> list[CurvePoint]:
    """A stored curve's points in order (an entry that is not a mapping under an integer key is left out)."""
    points = [CurvePoint(int(k), dict(v)) for k, v in curve.items() if str(k).isdigit() and isinstance(v, Mapping)]
    return sorted(points, key=lambda p: p.index)
