"""Quality against sampling cost: each trained model's frontier (the best score reached within each
number of network evaluations per image), and the best model and combination within a budget.

Read from the combinations a trial completed to the full count, never from its screen: a frontier's
values are the trial's own statistic (the count and metric of its value), so a point compares with
the trial's value and across trials. The sweep completes the screen's frontier for this
(:func:`screen_frontier`: the screen's best at each cost that beats every cheaper one), so a screened
trial's frontier reaches down to its cheapest cost; :func:`finalists` says what else it completes.
Cost is NFE, network evaluations per image:
:meth:`~hpo.spec.sampling.SamplingConfig.evaluations` (steps, twice under guidance of a conditional
network)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from hpo.records import ComboScore
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


K = TypeVar("K", bound=Hashable)


def lower_envelope(rows: Iterable[tuple[int, float, K]]) -> list[tuple[int, float, K]]:
    """(cost, value, key) rows → those whose value beats every cheaper one's, cheapest first (values that
    are not finite never do)."""
    out: list[tuple[int, float, K]] = []
    for row in sorted(rows, key=lambda r: (r[0], r[1])):
        if math.isfinite(row[1]) and (not out or row[1] < out[-1][1]):
            out.append(row)
    return out


def cost_frontier(rows: Iterable[tuple[int, float, SamplingConfig]]) -> list[FrontierPoint]:
    """(NFE, value, combination) rows → the points that beat every cheaper one, cheapest first."""
    return [FrontierPoint(*row) for row in lower_envelope(rows)]


@dataclass(frozen=True)
class Screened(Generic[K]):
    """One combination as a screen saw it: what :func:`finalists` chooses from."""

    key: K
    guidance: float  # its guidance scale (1 for every combination of an unconditional network)
    nfe: int
    value: float  # the screen's ranking statistic (lower is better)


def finalists(screened: Sequence[Screened[K]], top: int) -> list[K]:
    """What a screen sends on to the full count: its best ``top``; its best at each guidance scale,
    because a small count misorders guidance scales (they trade diversity, which it measures worst, for
    fidelity) where it orders steps at one scale as the full count does (docs/screening.md: a photo
    model's best, guidance 2, was ranked last at every step count on 64 samples and first on 1 024); and
    its frontier, so that every cost level's best has a completed value. In that order, once each."""
    ranked = sorted(screened, key=lambda s: s.value)
    chosen = [s.key for s in ranked[:top]]
    best_at: dict[float, K] = {}
    for s in ranked:
        best_at.setdefault(s.guidance, s.key)
    chosen += best_at.values()
    chosen += [key for _, _, key in lower_envelope((s.nfe, s.value, s.key) for s in screened)]
    return list(dict.fromkeys(chosen))


def screened_combinations(scores: Sequence[ComboScore], conditional: bool) -> list[Screened[SamplingConfig]]:
    """A sweep's screen scores as :func:`finalists` reads them."""
    out: list[Screened[SamplingConfig]] = []
    for s in scores:
        if s.stage == "screen":
            guidance = s.sampling.guidance_scale if conditional else 1.0
            out.append(Screened(s.sampling, guidance, s.evaluations(conditional), s.rank_value))
    return out


def screen_finalists(scores: Sequence[ComboScore], top: int, conditional: bool) -> list[SamplingConfig]:
    """The combinations a sweep completes after its screen (:func:`finalists`)."""
    return finalists(screened_combinations(scores, conditional), top)


def screen_frontier(scores: Sequence[ComboScore], conditional: bool) -> list[SamplingConfig]:
    """The combinations on the screen's own frontier (by the screen's ranking statistic)."""
    rows = ((s.nfe, s.value, s.key) for s in screened_combinations(scores, conditional))
    return [key for _, _, key in lower_envelope(rows)]


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
