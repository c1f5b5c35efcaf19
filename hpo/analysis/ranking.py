"""Finished trials ranked, and which of them the score's noise cannot separate from the best."""

from __future__ import annotations

import math
from collections.abc import Sequence

from optuna.trial import FrozenTrial, TrialState

from hpo.analysis.noise import Noise


def score_of(t: FrozenTrial) -> float:
    """A trial's score (its objective value); NaN for a trial that has none."""
    return float(t.value) if isinstance(t.value, (int, float)) else math.nan


def best_first(trials: Sequence[FrozenTrial], *, maximize: bool = False) -> list[FrozenTrial]:
    """The complete trials that have a value, best first (lowest, unless ``maximize``): the one
    ranking of finished trials that the report, narrowing, confirmation and warm starts read."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and isinstance(t.value, (int, float))]
    return sorted(done, key=score_of, reverse=maximize)


def ties_with_best(done: Sequence[FrozenTrial], noise: Noise) -> list[int]:
    """Numbers of the complete trials (``best_first`` order) tied with the best: within the noise."""
    if not done:
        return []
    best = score_of(done[0])
    return [t.number for t in done[1:] if noise.within_tie_margin(best, score_of(t))]
