"""When the data cannot order two values: one rule (:func:`tied`) for scores re-measured on new samples
(``hpo.analysis.noise``) and for means over seeds (the confirmation, the budget ladder and the width
transfer)."""

from __future__ import annotations

import math
from typing import Protocol


class SeedMean(Protocol):
    @property
    def mean(self) -> float: ...

    @property
    def standard_error(self) -> float: ...


TIE_SDS = 2.0  # two values are tied when they differ by less than this many sd of their difference


def tied(a: float, b: float, sd_of_difference: float) -> bool:
    """The one tie rule: ``a`` and ``b`` differ by less than ``TIE_SDS`` standard deviations of their
    difference, so the noise alone could order them. Never tied when a value is NaN or infinite."""
    return abs(a - b) < TIE_SDS * sd_of_difference


def within_two_standard_errors(a: SeedMean, b: SeedMean) -> bool:
    """Tied over seeds: the sd of the difference of two means is the hypotenuse of their standard
    errors (independent seeds). Never tied when a mean is NaN or infinite (a diverged run)."""
    return tied(a.mean, b.mean, math.hypot(a.standard_error, b.standard_error))
