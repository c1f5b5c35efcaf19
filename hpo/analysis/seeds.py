"""Means over seeds and when the seeds cannot order two of them: one rule for the confirmation,
the budget ladder and the width transfer."""

from __future__ import annotations

import math
from typing import Protocol


class SeedMean(Protocol):
    @property
    def mean(self) -> float: ...

    @property
    def standard_error(self) -> float: ...


def within_two_standard_errors(a: SeedMean, b: SeedMean) -> bool:
    """Tied: the means differ by less than twice the standard error of the difference (over seeds),
    so the data cannot order them. Never tied when a mean is NaN or infinite (a diverged run)."""
    se = math.hypot(a.standard_error, b.standard_error)
    return abs(a.mean - b.mean) < 2 * se
