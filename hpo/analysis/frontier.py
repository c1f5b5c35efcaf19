"""Quality against sampling cost: each trained model's frontier (the best score reached within each
number of network evaluations per image), and the best model and combination within a budget.

Read from the combinations a trial completed to the full count, never from its screen: a frontier's
values are the trial's own statistic (the count and metric of its value), so a point compares with
the trial's value and across trials. The sweep completes the screen's frontier for this
(:func:`screen_frontier`: the screen's best at each cost that beats every cheaper one), so a screened
trial's frontier reaches down to its cheapest cost. Cost is NFE, network evaluations per image:
:meth:`~hpo.spec.sampling.SamplingConfig.evaluations` (steps, twice under guidance of a conditional
network)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hpo.analysis.sweep import ComboScore
from hpo.spec.sampling import SamplingConfig


@dataclass(frozen=True)
class FrontierPoint:
    nfe: int
    value: float  # the trial's statistic at this combination (lower is better)
    sampling: SamplingConfig


@dataclass(frozen=True)
class Frontier:
    """One trial's frontier: completed combinations of increasing cost, each better than every cheaper one."""

    trial: int
    statistic: str  # what ``value`` is, in words
    points: list[FrontierPoint]

    def within(self, max_nfe: int) -> FrontierPoint | None:
        """The best point that costs at most ``max_nfe`` (None when even the cheapest costs more)."""
        affordable = [p for p in self.points if p.nfe <= max_nfe]
        return affordable[-1] if affordable else None

    @property
    def cheapest(self) -> int:
        return self.points[0].nfe


def cost_frontier(rows: Iterable[tuple[int, float, SamplingConfig]]) -> list[FrontierPoint]:
    """(NFE, value, combination) rows → the points that beat every cheaper one, cheapest first."""
    points: list[FrontierPoint] = []
    for nfe, value, sampling in sorted(rows, key=lambda r: (r[0], r[1])):
        if math.isfinite(value) and (not points or value < points[-1].value):
            points.append(FrontierPoint(nfe, value, sampling))
    return points


def screen_frontier(scores: Sequence[ComboScore], conditional: bool) -> list[SamplingConfig]:
    """The combinations on the screen's own frontier (by the screen's ranking statistic): what the
    sweep completes beside its finalists, so that every cost level's best has a completed value."""
    rows = ((s.evaluations(conditional), s.rank_value, s.sampling) for s in scores if s.stage == "screen")
    return [p.sampling for p in cost_frontier(rows)]


def trial_frontier(
    trial: int, scores: Sequence[ComboScore], *, conditional: bool, metric: str = "FID"
) -> Frontier | None:
    """The frontier of one trial's completed combinations; None without a finite completed score."""
    full = [s for s in scores if s.stage == "full"]
    points = cost_frontier((s.evaluations(conditional), s.score, s.sampling) for s in full)
    return Frontier(trial, f"{metric} of {full[0].num_samples} samples", points) if points else None


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
