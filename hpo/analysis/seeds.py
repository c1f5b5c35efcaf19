"""When the data cannot order two values: one rule (:func:`tied`) for scores re-measured on new samples
(``hpo.analysis.noise``) and for means over seeds (the confirmation, the budget ladder and the width
transfer)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class SeedMean(Protocol):
    @property
    def mean(self) -> float: ...

    @property
    def standard_error(self) -> float: ...


@dataclass(frozen=True)
class SeedStats:
    """Mean ± sd of one score over training seeds: the one estimate the confirmation, the budget
    ladder's curve and the width transfer each build their rows from."""

    mean: float  # NaN with no seed
    sd: float  # over seeds: the sample standard deviation, 0 with one seed
    seeds: int

    @property
    def standard_error(self) -> float:
        """Of the mean: sd / √seeds (infinite with no seed)."""
        return self.sd / math.sqrt(self.seeds) if self.seeds else math.inf

    @classmethod
    def of(cls, values: Sequence[float]) -> SeedStats:
        mean = statistics.fmean(values) if values else math.nan
        return cls(mean, statistics.stdev(values) if len(values) > 1 else 0.0, len(values))


TIE_SDS = 2.0  # two values are tied when they differ by less than this many sd of their difference


def tied(a: float, b: float, sd_of_difference: float) -> bool:
    """The one tie rule: ``a`` and ``b`` differ by less than ``TIE_SDS`` standard deviations of their
    difference, so the noise alone could order them. Never tied when a value is NaN or infinite."""
    return abs(a - b) < TIE_SDS * sd_of_difference


def within_two_standard_errors(a: SeedMean, b: SeedMean) -> bool:
    """Tied over seeds: the sd of the difference of two means is the hypotenuse of their standard
    errors (independent seeds). Never tied when a mean is NaN or infinite (a diverged run)."""
    return tied(a.mean, b.mean, math.hypot(a.standard_error, b.standard_error))
