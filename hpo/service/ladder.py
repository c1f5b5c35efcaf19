"""The budget ladder: how a ranking made at the study's budget carries over to 2×, 4×, 16× of it.

``hpo confirm --budgets 1,4,16`` trains each chosen configuration and seed once, to the largest rung,
scoring it at every multiple of the study's budget on the way (the companion study's trials store
``score`` and the copy share in their curve). This module reads those curves: per rung, each
configuration's mean and spread over seeds, the rank correlation with the study's order and a
verdict in words; over the whole ladder, one sentence (the winner holds, from when it is tied, or
where the order flips); per configuration, the stop verdict of its seed-mean curve and a forecast at
``study.target_kimg``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import NamedTuple

import optuna
from optuna.trial import FrozenTrial
from scipy.stats import spearmanr

from hpo.analysis.progress import copy_floor_of
from hpo.analysis.record import LADDER, StudyRecord, TrialRecord
from hpo.analysis.seeds import within_two_standard_errors
from hpo.analysis.stopping import Forecast, Point, StopVerdict, forecast, stop_verdict
from hpo.service.confirm import Confirmed, confirmed_results, reading
from hpo.service.study import require_spec


class CurvePoint(NamedTuple):
    kimg: float
    mean: float  # over the seeds that reached this point
    sd: float
    seeds: int


@dataclass(frozen=True)
class Rung:
    multiple: int
    kimg: float
    configs: list[Confirmed]  # in the study's order
    rank_correlation: float | None
    state: str  # holds | tied | flips | pending
    text: str


@dataclass(frozen=True)
class Ladder:
    rungs: list[Rung]
    summary: str
    curves: dict[int, list[CurvePoint]]  # source trial → its seed-mean curve
    stops: dict[int, StopVerdict]
    forecasts: dict[int, Forecast]
    floor: dict[str, float] | None
    finished: int
    expected: int


@dataclass(frozen=True)
class RungValue:
    """Reads one evaluation point's score from a companion trial's curve."""

    index: int

    def __call__(self, t: FrozenTrial) -> float | None:
        score = TrialRecord.of(t).curve.get(str(self.index), {}).get("score")
        return float(score) if score is not None else None


def ladder_rows(ladder: Ladder) -> list[tuple[str, float, list[str]]]:
    """Per configuration (the study's order): its label, study value and "mean ± sd" at each rung
    ("—" where no seed has reached it): the table that ``hpo confirm`` prints and the report shows."""
    rows = []
    for c in ladder.rungs[0].configs:
        cells = []
        for r in ladder.rungs:
            at = next((x for x in r.configs if x.trial == c.trial), None)
            cells.append(f"{at.mean:.4g} ± {at.spread:.2g}" if at is not None and at.values else "—")
        rows.append((f"#{c.trial}" + (" (baseline)" if c.baseline else ""), c.study_value, cells))
    return rows


def copy_floor_text(floor: dict[str, float]) -> str:
    return f"{100 * (copy_floor_of(floor) or 0.0):.1f} %"


def rung_state(scored: list[Confirmed]) -> str:
    if len(scored) < 2:
        return "pending"
    winner, best = scored[0], min(scored, key=lambda c: c.mean)
    if best is winner:
        return "tied" if any(within_two_standard_errors(c, winner) for c in scored[1:]) else "holds"
    return "tied" if within_two_standard_errors(best, winner) else "flips"


def summary_text(rungs: list[Rung]) -> str:
    """One sentence over the whole ladder."""
    done = [r for r in rungs if r.state != "pending"]
    if not done:
        return "No rung has two scored configurations yet."
    top = done[-1].multiple
    flips = [r for r in done if r.state == "flips"]
    if flips and flips[0].multiple == 1:
        return (
            f"At the study's own budget, fresh seeds reorder the configurations ({flips[0].text}): the study's ranking "
            "was seed noise. Rank by this ladder's means, or confirm with more seeds."
        )
    if flips:
        return (
            f"The order flips at {flips[0].multiple}× the budget ({flips[0].text}) — the study's budget is too short "
            "to rank these configurations on this data: raise train.kimg (or rank by this ladder's longest rung)."
        )
    if all(r.state == "holds" for r in done):
        return f"The winner holds to {top}× the budget."
    first_tie = next(r for r in done if r.state == "tied")
    return f"From {first_tie.multiple}× the budget on, the winner is tied with another configuration: {done[-1].text}"


def ladder_verdict(source: optuna.Study, companion: optuna.Study, *, noise: float | None = None) -> Ladder:
    ladder = StudyRecord.of(companion).plan(LADDER)
    base, budgets = float(ladder["base_kimg"]), [int(b) for b in ladder["budgets"]]
    spec = require_spec(companion)
    rungs = []
    for multiple in budgets:
        configs = confirmed_results(source, companion, RungValue(multiple))
        scored = [c for c in configs if c.values]
        rho = None
        if len(scored) >= 3:
            rho = float(spearmanr([c.study_value for c in scored], [c.mean for c in scored]).statistic)
        rungs.append(Rung(multiple, base * multiple, configs, rho, rung_state(scored), reading(scored, multiple)))
    trials = companion.get_trials(deepcopy=False)
    curves = seed_mean_curves(trials)
    floor = StudyRecord.of(companion).floor
    copy_floor = copy_floor_of(floor)
    noise = noise if noise is not None else StudyRecord.of(source).noise_sd
    stops, forecasts = {}, {}
    target = require_spec(source).study.target_kimg
    for number, curve in curves.items():
        copies = copy_points(trials, number)
        points = [Point(c.kimg, c.mean, *copies.get(round(c.kimg, 6), (None, None))) for c in curve]
        seeds = min(c.seeds for c in curve)  # a mean over n seeds: its sampling noise is sd / √n
        stops[number] = stop_verdict(points, noise=noise / math.sqrt(seeds) if noise else None, copy_floor=copy_floor)
        if target is not None:
            forecasts[number] = forecast(points, target)
    finished = sum(1 for t in trials if t.state.is_finished())
    return Ladder(rungs, summary_text(rungs), curves, stops, forecasts, floor, finished, spec.study.n_trials)


def seed_mean_curves(trials: list[FrozenTrial]) -> dict[int, list[CurvePoint]]:
    """Per configuration, at every evaluation point some seed scored: the mean over those seeds
    (read from the companion's trials in one pass)."""
    scored: dict[int, dict[int, list[tuple[float, float]]]] = {}
    for t in trials:
        record = TrialRecord.of(t)
        number = record.source_trial
        if number is None:
            continue
        for index, entry in record.curve.items():
            score = entry.get("score")
            if score is not None and math.isfinite(score):
                scored.setdefault(number, {}).setdefault(int(index), []).append((entry["kimg"], score))
    return {number: [_curve_point(points[i]) for i in sorted(points)] for number, points in scored.items()}


def _curve_point(seeds: list[tuple[float, float]]) -> CurvePoint:
    scores = [score for _, score in seeds]
    spread = statistics.stdev(scores) if len(scores) > 1 else 0.0
    return CurvePoint(statistics.fmean(k for k, _ in seeds), statistics.fmean(scores), spread, len(scores))


def copy_points(trials: list[FrozenTrial], number: int) -> dict[float, tuple[float, float]]:
    """Per kimg, the copy interval's lower end and the share, worst over seeds and spaces."""
    out: dict[float, tuple[float, float]] = {}
    for t in trials:
        record = TrialRecord.of(t)
        if record.source_trial != number:
            continue
        for entry in record.curve.values():
            if "copy_pixels_low" not in entry:
                continue
            low = max(entry["copy_pixels_low"], entry.get("copy_features_low", 0.0))
            share = max(entry["copy_pixels"], entry.get("copy_features", 0.0))
            key = round(float(entry["kimg"]), 6)
            old = out.get(key, (0.0, 0.0))
            out[key] = (max(old[0], low), max(old[1], share))
    return out
