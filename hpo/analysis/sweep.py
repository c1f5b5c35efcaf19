"""A sampling sweep read back (:func:`hpo.scoring.sweep.run_sweep` measures it; each score is a
``hpo.records.ComboScore``): the sweep's scores together, what a trial's value is, the sweep as a
table, and which EMA length won at each guidance scale."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hpo.records import ComboScore, ScreenStatistic, ValueStatistic
from hpo.spec.counts import pca_dims
from hpo.spec.samplers import DEFAULT_SAMPLER, DEFAULT_SPACING
from hpo.spec.sampling import SamplingConfig


@dataclass
class SweepResult:
    scores: list[ComboScore] = field(default_factory=list)  # every score, screening and full
    paired_sd: float | None = None  # sd of a difference between two full-count values on the same samples

    @property
    def full(self) -> list[ComboScore]:
        return [s for s in self.scores if s.stage == "full"]

    @property
    def best(self) -> ComboScore:
        return min(self.full, key=lambda s: s.score)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.scores)


def value_statistic(result: SweepResult, metric: str, features: int) -> ValueStatistic:
    """What a trial's value is, stored beside it: the metric, its sample count and feature
    dimensions, its bias correction (none: the plug-in Fréchet distance, biased upward by about 1/n
    by an amount that depends on the samples' spread, so values compare at equal counts only), and
    how the combination was picked: how many were completed to the full count, after which screen."""
    full, screened = result.full, [s for s in result.scores if s.stage == "screen"]
    screen = None
    if screened:
        n, by = screened[0].num_samples, screened[0].ranked_by
        screen = ScreenStatistic(n, by, pca_dims(n, features) if by == "pca" else None)
    return ValueStatistic(
        metric=metric, samples=result.best.num_samples, features=features, bias_correction="none",
        combinations=len({s.sampling for s in result.scores}), completed=len(full), screen=screen,
        paired_sd=result.paired_sd,
    )  # fmt: skip


def statistic_text(stat: ValueStatistic) -> str:
    """A stored :func:`value_statistic` in words."""
    bias = stat.bias_correction
    correction = "plug-in, not bias-corrected: compared at equal counts only" if bias == "none" else bias
    text = f"{stat.metric} of {stat.samples} samples in {stat.features} feature dimensions ({correction})"
    screen = stat.screen
    if screen is None:
        return f"{text}; the best of all {stat.combinations} sampling combinations"
    by = f"FID in {screen.dims} principal components" if screen.by == "pca" else screen.by.upper()
    ranked = f"a screen of all {stat.combinations} on {screen.samples} samples by {by}"
    if stat.completed == 1:
        return f"{text}; the one sampling combination {ranked} ranked first"
    return f"{text}; the best of the {stat.completed} sampling combinations completed after {ranked}"


SCREEN_NAMES = {"pca": "FID in the reference's top principal components", "kid": "KID", "fid": "FID"}


def sweep_table(result: SweepResult, metric: str) -> str:
    """The sweep as aligned text, best full-count score marked; an EMA column when it was swept, a
    sampler column when more than DDIM was, a guidance-interval column when one was set."""
    best = result.best
    extra = [(head, cell) for head, cell, shown in optional_columns() if any(shown(s.sampling) for s in result.scores)]
    lines = [
        f"{'guidance':>8} {'steps':>5} {'eta':>4}{''.join(f' {h}' for h, _ in extra)} {'stage':>6} {'samples':>7} "
        f"{metric:>15} {'KID':>9} {'prec':>5} {'recall':>6}"
    ]
    for s in sorted(result.scores, key=lambda s: (s.stage != "full", s.rank_value)):
        mark = "  <- best" if s is best else ""
        cells = "".join(f" {cell(s.sampling)}" for _, cell in extra)
        lines.append(
            f"{s.sampling.guidance_scale:8.3g} {s.sampling.steps:5d} {s.sampling.eta:4.2g}{cells} "
            f"{s.stage:>6} {s.num_samples:7d} {s.score:15.4g} {s.kid:9.4g} {fraction(s.precision):>5} "
            f"{fraction(s.recall):>6}{mark}"
        )
    by = {s.ranked_by for s in result.scores if s.stage == "screen"} - {"fid"}
    if by:
        name = SCREEN_NAMES[by.pop()]
        lines.append(f"screen rows are ranked by {name} (well-posed at their count); full rows by the score itself")
    return "\n".join(lines)


Column = tuple[str, Callable[[SamplingConfig], str], Callable[[SamplingConfig], bool]]


def optional_columns() -> list[Column]:
    """(head, cell, whether a combination needs the column): settings shown only when swept or set."""
    return [
        (f"{'EMA':>5}", lambda c: f"{'own':>5}" if c.ema_sigma_rel is None else f"{c.ema_sigma_rel:5.3g}",
         lambda c: c.ema_sigma_rel is not None),
        (f"{'sampler':>8}", lambda c: f"{c.sampler:>8}", lambda c: c.sampler != DEFAULT_SAMPLER),
        (f"{'guided σ':>12}", lambda c: f"{c.interval_text if c.interval_set else 'all':>12}",
         lambda c: c.interval_set),
        (f"{'spacing':>8}", lambda c: f"{c.spacing:>8}", lambda c: c.spacing != DEFAULT_SPACING),
    ]  # fmt: skip


def fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def best_ema_by_guidance(scores: Sequence[ComboScore]) -> dict[float, float]:
    """Guidance scale → the EMA length of its best score, read at the stage that scored every
    combination (screening when there was one); empty when the EMA length was not swept."""
    staged = [s for s in scores if s.stage == "screen"] or [s for s in scores if s.stage == "full"]
    swept = [s for s in staged if s.sampling.ema_sigma_rel is not None]
    best: dict[float, ComboScore] = {}
    for s in swept:
        w = s.sampling.guidance_scale
        if w not in best or s.rank_value < best[w].rank_value:
            best[w] = s
    return {w: float(s.sampling.ema_sigma_rel or 0.0) for w, s in sorted(best.items())}


def ema_sentence(scores: Sequence[ComboScore]) -> str | None:
    """'EMA σ_rel 0.08 is best at guidance 1; 0.15 at guidance 3' (None without an EMA sweep)."""
    by_guidance = best_ema_by_guidance(scores)
    if not by_guidance:
        return None
    parts = [f"{sigma:g} at guidance {w:g}" for w, sigma in by_guidance.items()]
    return f"EMA σ_rel {parts[0].replace(' at', ' is best at', 1)}" + "".join(f"; {p}" for p in parts[1:])
