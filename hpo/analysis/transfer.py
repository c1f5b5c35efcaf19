"""Does the learning rate found on a narrow proxy transfer to the real network?

Reads a grid of training runs — each width (base channels) × each learning rate × each seed, one
score per run, lower is better — and answers per width where the lr optimum sits (with the grid
interval the seeds cannot separate from it), then across widths whether it holds or drifts: a
least-squares fit lr_opt ∝ width^α in log-log with its residuals, and what the smallest width's best
lr costs at the largest width, against the seeds' noise. Without a width-aware parameterisation the
optimum of Adam's lr is expected to fall with width (EDM2's presets: ≈ 0.136/√channels); with µP it
should hold (Yang et al. 2022, "Tensor Programs V").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hpo.analysis.seeds import SeedStats, within_two_standard_errors


@dataclass(frozen=True)
class TransferRun:
    width: int  # base channels of the network
    lr: float
    seed: int
    score: float  # lower is better; NaN or inf for a run that diverged


@dataclass(frozen=True)
class LrMean:
    lr: float
    mean: float  # over seeds; inf when any seed diverged
    standard_error: float  # of the mean (0 with one seed)
    seeds: int

    @property
    def spread(self) -> float:
        """Standard deviation over the seeds."""
        return self.standard_error * math.sqrt(self.seeds)


@dataclass(frozen=True)
class Optimum:
    width: int
    lr: float  # the seed-mean optimum, refined by a parabola in log(lr) through the best grid point's neighbours
    grid_lr: float  # the best grid point
    low: float  # the grid lrs tied with the best (within two standard errors) span low..high
    high: float
    edge: str | None  # "low" or "high" when the best grid point is the grid's end: the optimum may lie beyond
    means: tuple[LrMean, ...]  # by lr

    @property
    def best(self) -> LrMean:
        """The best grid point's mean over seeds."""
        return self.mean_at(self.grid_lr)

    def mean_at(self, lr: float) -> LrMean:
        """The grid point nearest ``lr`` in log scale."""
        return min(self.means, key=lambda m: abs(math.log(m.lr / lr)))


@dataclass(frozen=True)
class Transfer:
    optima: tuple[Optimum, ...]  # by width, narrowest first
    alpha: float  # lr_opt ∝ width^alpha (log-log least squares)
    residuals: tuple[float, ...]  # per width: fitted over observed optimum, as a factor (1 = on the line)
    spread: float  # largest over smallest optimum lr across widths, as a factor ≥ 1
    regret: float  # score at the widest width with the narrowest width's best grid lr, minus its own best
    regret_se: float  # standard error of that difference
    state: str  # holds | drifts | undetermined
    text: str


def lr_means(runs: Sequence[TransferRun]) -> tuple[LrMean, ...]:
    by_lr: dict[float, list[float]] = defaultdict(list)
    for run in runs:
        by_lr[run.lr].append(run.score if math.isfinite(run.score) else math.inf)
    out = []
    for lr, scores in sorted(by_lr.items()):
        if all(math.isfinite(s) for s in scores):
            stats = SeedStats.of(scores)
            out.append(LrMean(lr, stats.mean, stats.standard_error, stats.seeds))
        else:  # a diverged seed: the learning rate is out, whatever the others scored
            out.append(LrMean(lr, math.inf, 0.0, len(scores)))
    return tuple(out)


def refine(means: Sequence[LrMean], best: int) -> float:
    """The vertex of the parabola through the best grid point and its two neighbours in log(lr), kept
    between the neighbours; the grid point itself at an edge, next to a diverged run or on a flat top."""
    if best == 0 or best == len(means) - 1:
        return means[best].lr
    trio = means[best - 1 : best + 2]
    if not all(math.isfinite(m.mean) for m in trio):
        return means[best].lr
    x = np.log([m.lr for m in trio])
    a, b, _ = np.polyfit(x, [m.mean for m in trio], 2)
    if a <= 0:
        return means[best].lr
    return float(np.exp(np.clip(-b / (2 * a), x[0], x[2])))


def optimum(width: int, runs: Sequence[TransferRun]) -> Optimum:
    means = lr_means(runs)
    if len(means) < 3:
        raise ValueError(f"width {width}: needs at least 3 learning rates to place an optimum, got {len(means)}")
    best = min(range(len(means)), key=lambda i: means[i].mean)
    if not math.isfinite(means[best].mean):
        raise ValueError(f"width {width}: every learning rate diverged")
    tied_lrs = [m.lr for m in means if m is means[best] or within_two_standard_errors(m, means[best])]
    edge = "low" if best == 0 else "high" if best == len(means) - 1 else None
    return Optimum(width, refine(means, best), means[best].lr, min(tied_lrs), max(tied_lrs), edge, means)


def transfer(runs: Sequence[TransferRun]) -> Transfer:
    """The verdict over a width × lr × seed grid (at least 2 widths and 3 learning rates each)."""
    widths = sorted({r.width for r in runs})
    if len(widths) < 2:
        raise ValueError(f"needs runs at 2 or more widths to say whether the lr transfers, got {widths}")
    optima = tuple(optimum(w, [r for r in runs if r.width == w]) for w in widths)
    x, y = np.log(widths), np.log([o.lr for o in optima])
    alpha, intercept = np.polyfit(x, y, 1)
    residuals = tuple(float(np.exp(intercept + alpha * xi - yi)) for xi, yi in zip(x, y, strict=True))
    narrow, wide = optima[0], optima[-1]
    borrowed, own = wide.mean_at(narrow.grid_lr), wide.mean_at(wide.grid_lr)
    regret, regret_se = borrowed.mean - own.mean, math.hypot(borrowed.standard_error, own.standard_error)
    spread = float(np.exp(y.max() - y.min()))
    state = _state(optima, narrow, wide)
    text = _text(state, optima, float(alpha), spread, regret, regret_se)
    return Transfer(optima, float(alpha), residuals, spread, regret, regret_se, state, text)


def _state(optima: Sequence[Optimum], narrow: Optimum, wide: Optimum) -> str:
    if any(o.edge for o in optima):
        return "undetermined"
    return "holds" if wide.low <= narrow.grid_lr <= wide.high else "drifts"


def _text(state: str, optima: Sequence[Optimum], alpha: float, spread: float, regret: float, se: float) -> str:
    narrow, wide = optima[0], optima[-1]
    grid = f"{len(optima)} widths, {len(narrow.means)} learning rates, {narrow.means[0].seeds} seed(s)"
    cost = (
        f"width {narrow.width}'s best lr costs {regret:.3g} at width {wide.width} "
        f"(the seeds' noise: 2 SE = {2 * se:.2g})"
    )
    if state == "undetermined":
        at = [f"width {o.width} at the {o.edge} end ({o.grid_lr:.3g})" for o in optima if o.edge]
        return (
            f"the lr optimum is not placed: the best lr sits at the grid's edge for {', '.join(at)}; "
            f"widen the grid there ({grid})"
        )
    if state == "holds":
        return (
            f"the lr transfers: its optimum moves within ×{spread:.2g} from width {narrow.width} to {wide.width} "
            f"({grid}); {cost}"
        )
    factor = (wide.width / narrow.width) ** alpha
    return (
        f"the lr optimum drifts as width^{alpha:.2f}: at width {wide.width} use the width-{narrow.width} lr × "
        f"({wide.width}/{narrow.width})^{alpha:.2f} = × {factor:.2g} ({grid}); {cost}"
    )
