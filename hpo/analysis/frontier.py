"""Quality against sampling cost: each trained model's frontier (the best score reached within each
number of network evaluations per image), and the best model and combination within a budget.

Read from the combinations a trial stored, at the stage that scored every one of them (the screen
when the sweep had one, else the full count): every trial of a study shares that stage's count and
statistic, so frontiers compare across trials. Cost is NFE, network evaluations per image:
:meth:`~hpo.spec.sampling.SamplingConfig.evaluations` (steps, twice under guidance of a
conditional network)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hpo.analysis.sweep import SCREEN_NAMES, ComboScore, Stage
from hpo.spec.sampling import SamplingConfig


@dataclass(frozen=True)
class FrontierPoint:
    nfe: int
    value: float  # the stage's ranking number (lower is better)
    sampling: SamplingConfig


@dataclass(frozen=True)
class Frontier:
    """One trial's frontier: points of increasing cost, each better than every cheaper one."""

    trial: int
    stage: Stage
    statistic: str  # what ``value`` is, in words
    points: list[FrontierPoint]

    def within(self, max_nfe: int) -> FrontierPoint | None:
        """The best point that costs at most ``max_nfe`` (None when even the cheapest costs more)."""
        affordable = [p for p in self.points if p.nfe <= max_nfe]
        return affordable[-1] if affordable else None

    @property
    def cheapest(self) -> int:
        return self.points[0].nfe


def compared_stage(scores: Sequence[ComboScore]) -> Stage:
    """The stage that scored every combination: the screen when there was one."""
    return "screen" if any(s.stage == "screen" for s in scores) else "full"


def stage_statistic(scores: Sequence[ComboScore], stage: Stage) -> str:
    rows = [s for s in scores if s.stage == stage]
    if not rows:
        return "no score"
    return f"{SCREEN_NAMES[rows[0].ranked_by]} of {rows[0].num_samples} samples"


def trial_frontier(trial: int, scores: Sequence[ComboScore], *, conditional: bool) -> Frontier | None:
    """The frontier of one trial's stored sweep; None without a finite score."""
    stage = compared_stage(scores)
    rows = sorted(
        ((s.evaluations(conditional), s.rank_value, s.sampling) for s in scores if s.stage == stage),
        key=lambda r: (r[0], r[1]),
    )
    points: list[FrontierPoint] = []
    for nfe, value, sampling in rows:
        if math.isfinite(value) and (not points or value < points[-1].value):
            points.append(FrontierPoint(nfe, value, sampling))
    return Frontier(trial, stage, stage_statistic(scores, stage), points) if points else None


@dataclass(frozen=True)
class BudgetPick:
    """The best trial and combination within ``max_nfe``, and what the budget costs in the score."""

    max_nfe: int
    trial: int
    point: FrontierPoint
    best_trial: int  # the unconstrained best, on the same statistic
    best: FrontierPoint
    statistic: str

    @property
    def text(self) -> str:
        at = f"trial {self.trial} at {self.point.sampling.words} ({self.point.nfe} NFE): {self.point.value:.4g}"
        if self.best_trial == self.trial and self.best == self.point:
            return f"within {self.max_nfe} NFE, {at}, the unconstrained best too ({self.statistic})"
        best = f"trial {self.best_trial} at {self.best.sampling.words} ({self.best.nfe} NFE): {self.best.value:.4g}"
        cost = self.point.value - self.best.value
        return f"within {self.max_nfe} NFE, {at}; unconstrained, {best}: the budget costs {cost:.3g} ({self.statistic})"


def best_within(frontiers: Mapping[int, Frontier], max_nfe: int) -> BudgetPick | None:
    """Over every trial's frontier, the best point costing at most ``max_nfe``; None when none does."""
    picks = [(f.trial, p) for f in frontiers.values() if (p := f.within(max_nfe)) is not None]
    if not picks:
        return None
    trial, point = min(picks, key=lambda tp: tp[1].value)
    best_trial, best = min(((f.trial, f.points[-1]) for f in frontiers.values()), key=lambda tp: tp[1].value)
    statistic = next(iter(frontiers.values())).statistic
    return BudgetPick(max_nfe, trial, point, best_trial, best, statistic)


def cheapest_text(frontiers: Mapping[int, Frontier], max_nfe: int) -> str:
    """Why nothing fits: the cheapest scored combination's cost."""
    cheapest = min((f.cheapest for f in frontiers.values()), default=None)
    if cheapest is None:
        return "no trial stored a scored sampling combination"
    return f"no scored combination costs at most {max_nfe} NFE; the cheapest costs {cheapest} (raise --max-nfe)"
