"""A score's noise: how much FID moves between two independent sample sets of the same weights.

Each re-scored trial gives one pair (a, b); |a − b| / √2 estimates the standard deviation of one
score, and the pooled estimate over n pairs is the root mean square of those. Two scores closer than
twice the standard deviation of their difference (2·√2·sd) are tied: the noise alone could order them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from optuna.trial import FrozenTrial, TrialState

from hpo.analysis.seeds import TIE_SDS, tied
from hpo.records import Payload, TrialRecord


@dataclass(frozen=True)
class Noise(Payload):
    """A study stores it pooled (``fid_noise``: ``as_dict``); ``StudyRecord.noise_sd`` reads its sd."""

    sd: float | None  # standard deviation of one score; None when no pair was measured
    pairs: int  # re-scored trials it rests on

    @property
    def difference_sd(self) -> float:
        """The sd of the difference of two independent scores: √2 × one score's (0 with none measured)."""
        return math.sqrt(2) * self.sd if self.sd is not None else 0.0

    @property
    def tie_margin(self) -> float:
        return TIE_SDS * self.difference_sd

    def within_tie_margin(self, a: float, b: float) -> bool:
        """``a`` and ``b`` closer than the tie margin (2·√2·sd, :func:`~hpo.analysis.seeds.tied`): the noise
        alone could order them (never with no noise measured)."""
        return self.sd is not None and tied(a, b, self.difference_sd)

    def text(self) -> str:
        if self.sd is None:
            return "noise not measured yet (no trial re-scored)"
        return f"± {self.sd:.2g} (sd from {self.pairs} re-scored trial{'s' if self.pairs != 1 else ''})"


def pair_sd(a: float, b: float) -> float:
    """One pair's estimate of a score's standard deviation."""
    return abs(a - b) / math.sqrt(2)


def halves_difference_sd(halves: Sequence[tuple[float, float]]) -> float:
    """The sd of the difference between two of k settings' values on the same samples, from each
    setting's values on the two disjoint halves of them: every pair of settings gives one estimate of
    a half-count difference's sd (:func:`pair_sd` of their differences in each half), pooled (root
    mean square), scaled by 1/√2 to the whole count (a value's variance goes as 1/count). Pooled over
    pairs it equals the sd of the k half-to-half differences / √2: k − 1 degrees of freedom."""
    return statistics.stdev(a - b for a, b in halves) / math.sqrt(2)


def pooled(estimates: Sequence[float]) -> Noise:
    if not estimates:
        return Noise(None, 0)
    return Noise(math.sqrt(statistics.fmean(e * e for e in estimates)), len(estimates))


def noise_estimates(trials: Sequence[FrozenTrial]) -> list[float]:
    """Each re-scored trial's estimate of a score's standard deviation (``fid_noise``)."""
    return [v for t in trials if (v := TrialRecord.of(t).noise) is not None]


NEAR_BEST = 2.0  # re-scored trials within this factor of the best score measure the noise near it


def noise_of(trials: Sequence[FrozenTrial]) -> Noise:
    """The score noise near the best score, pooled over the re-scored trials within a factor of
    ``NEAR_BEST`` of it (every re-scored trial when none is): a score's sampling noise grows with the
    score (measured on the quickstart: sd 2.6 at 133, 0.4 at 3.6), so a baseline far above the best
    must not widen the margin that decides ties among the best trials."""
    scored = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    if not scored:
        return pooled(noise_estimates(trials))
    best = min(float(t.value or 0.0) for t in scored)
    near = [t for t in scored if float(t.value or 0.0) <= NEAR_BEST * max(best, 1e-9)]
    return pooled(noise_estimates(near) or noise_estimates(trials))
