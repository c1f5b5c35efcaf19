"""The budget ladder: how a ranking made at the study's budget carries over to 2×, 4×, 16× of it.

``hpo confirm --budgets 1,4,16`` trains each chosen configuration and seed once, to the largest budget,
scoring it at every multiple of the study's budget on the way (the companion study's trials store
``score`` and the copy share in their curve). This module reads those curves into the rows that
:mod:`hpo.analysis.budget_ladder` judges: per budget, each configuration's seeds; per configuration,
its seed-mean curve, its stop verdict and a forecast at ``study.target_kimg``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import optuna
import plotly.graph_objects as go
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial

from hpo.analysis.budget_ladder import (
    Ladder,
    SeedMeanPoint,
    copy_floor_text,
    ladder_budget,
    ladder_rows,
    ladder_summary,
    seed_mean_point,
)
from hpo.analysis.confirmation import NOT_RANKED
from hpo.analysis.progress import copy_floor_of
from hpo.analysis.stopping import Point, forecast, stop_verdict
from hpo.companions import confirm
from hpo.companions.base import Request, companion_name, confirmed_results, finished_count
from hpo.companions.blocks import Block, Chart, Items, NextStep, Paragraph, Table
from hpo.companions.confirm import configuration_json
from hpo.files import JsonObject
from hpo.records import LADDER, LADDER_BY, FloorRecord, LadderPlan, StudyRecord, TrialRecord
from hpo.service.study import require_spec


@dataclass(frozen=True)
class BudgetValue:
    """Reads one evaluation point's score from a companion trial's curve."""

    index: int

    def __call__(self, t: FrozenTrial) -> float | None:
        point = TrialRecord.of(t).point(self.index)
        return point.score if point is not None else None


def ladder_verdict(source: optuna.Study, companion: optuna.Study, *, noise: float | None = None) -> Ladder:
    plan = StudyRecord.of(companion).ladder_plan
    base, budgets = plan.base_kimg, list(plan.budgets)
    scored = [ladder_budget(m, base, confirmed_results(source, companion, BudgetValue(m))) for m in budgets]
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
    expected = require_spec(companion).study.n_trials
    return Ladder(scored, ladder_summary(scored), curves, stops, forecasts, floor, finished_count(companion), expected)


def seed_mean_curves(trials: list[FrozenTrial]) -> dict[int, list[SeedMeanPoint]]:
    """Per configuration, at every evaluation point some seed scored: the mean over those seeds
    (read from the companion's trials in one pass)."""
    scored: dict[int, dict[int, list[tuple[float, float]]]] = {}
    for t in trials:
        record = TrialRecord.of(t)
        number = record.source_trial
        if number is None:
            continue
        for point in record.points:
            if point.score is not None:
                scored.setdefault(number, {}).setdefault(point.index, []).append((point.kimg, point.score))
    return {number: [seed_mean_point(points[i]) for i in sorted(points)] for number, points in scored.items()}


def copy_points(trials: list[FrozenTrial], number: int) -> dict[float, tuple[float, float]]:
    """Per kimg, the copy interval's lower end and the share, worst over seeds and spaces."""
    out: dict[float, tuple[float, float]] = {}
    for t in trials:
        record = TrialRecord.of(t)
        if record.source_trial != number:
            continue
        for point in record.points:
            low, share = point.worst_copy("_low"), point.worst_copy()
            if low is None or share is None:
                continue
            key = round(point.kimg, 6)
            old = out.get(key, (0.0, 0.0))
            out[key] = (max(old[0], low), max(old[1], share))
    return out


def ladder_figure(ladder: Ladder, metric: str) -> go.Figure:
    """Score against kimg per configuration (mean ± sd over seeds), the budgets dotted, the floor dashed."""
    fig = go.Figure()
    baseline = {c.trial for c in ladder.budgets[0].configs if c.baseline}
    for number, curve in ladder.curves.items():
        name = f"#{number}" + (" (baseline)" if number in baseline else "")
        fig.add_trace(
            go.Scatter(
                x=[c.kimg for c in curve],
                y=[c.mean for c in curve],
                error_y={"type": "data", "array": [c.sd for c in curve], "visible": True},
                mode="lines+markers",
                name=name,
            )
        )
    for r in ladder.budgets:
        fig.add_vline(x=r.kimg, line_dash="dot", line_color="#bbb")
    if ladder.floor:
        fig.add_hline(y=ladder.floor.score, line_dash="dash", line_color="#2a2", annotation_text="real images")
    fig.update_layout(xaxis_title="kimg (log)", yaxis_title=metric, xaxis_type="log")
    return fig


def rho_text(rho: float | None, fewer: str) -> str:
    return f"{rho:+.2f}" if rho is not None else fewer


@dataclass(frozen=True)
class LadderReading:
    ladder: Ladder
    metric: str

    def json(self) -> JsonObject:
        ladder = self.ladder
        budgets = [
            {"multiple": r.multiple, "kimg": r.kimg, "state": r.state, "rank_correlation": r.rank_correlation,
             "verdict": r.text, "configurations": [configuration_json(c) for c in r.configs]}
            for r in ladder.budgets
        ]  # fmt: skip
        return {
            "finished": ladder.finished, "expected": ladder.expected, "rungs": budgets, "verdict": ladder.summary,
            "stops": {str(n): s.as_dict() for n, s in ladder.stops.items()},  # JSON keys are strings
            "forecasts": {str(n): {"target_kimg": f.target_kimg, "value": f.value, "low": f.low, "high": f.high,
                              "text": f.text} for n, f in ladder.forecasts.items()},
            "floor": ladder.floor.as_dict() if ladder.floor is not None else None,
        }  # fmt: skip

    def blocks(self) -> list[Block]:
        ladder, metric = self.ladder, self.metric
        header = [
            "configuration", f"study {metric}", *(f"{r.multiple}× ({r.kimg:g} kimg)" for r in ladder.budgets)
        ]  # fmt: skip
        rows = [[label, f"{value:.4g}", *cells] for label, value, cells in ladder_rows(ladder)]
        per_budget = [
            f"{r.multiple}×: rank correlation {rho_text(r.rank_correlation, NOT_RANKED)}; {r.text}"
            for r in ladder.budgets
        ]
        stops = [
            f"#{n}: {v.text}" + (f" {ladder.forecasts[n].text}" if n in ladder.forecasts else "")
            for n, v in ladder.stops.items()
        ]
        blocks: list[Block] = [
            Paragraph(ladder.summary, "lead"),
            Table(header, rows),
            Paragraph(f"Mean ± sd over seeds; {ladder.finished} of {ladder.expected} runs finished.", "note"),
            Items(per_budget),
            Chart(ladder_figure(ladder, metric), f"{metric} against kimg, mean ± sd over seeds"),
        ]
        if ladder.floor:
            blocks.append(Paragraph(floor_note(ladder.floor), "note"))
        return [*blocks, Paragraph("(seed-mean curve of each configuration):", label="When to stop"), Items(stops)]


def floor_note(floor: FloorRecord) -> str:
    return (
        f"Real held-out images score {floor.score:.4g} against the same training reference "
        f"({floor.num_images:g} images; fewer images score higher). A model well below that matches the "
        "training images more closely than new real images do: read its copy share. Up to "
        f"{copy_floor_text(floor)} of the held-out images look like copies of a training image, so only copy shares "
        "above that count."
    )


@dataclass(frozen=True)
class LadderKind:
    name: str = "ladder"
    pointer: str = LADDER_BY
    heading: str = "Is it still learning at longer budgets?"

    def create(self, source: optuna.Study, storage: RDBStorage, request: Request) -> optuna.Study:
        """Each trial trains once to the largest multiple of the study's budget and is scored at every
        multiple on the way: one evaluation point per multiple of the budget."""
        if request.budgets is None:
            raise ValueError("a budget ladder needs budgets")
        base = require_spec(source).train.kimg
        top = request.budgets[-1]
        return confirm.create(
            source, storage, request, train={"kimg": base * top, "num_evals": top, "eval_spacing": "even"},
            name=companion_name(source.study_name, self.name), pointer=self.pointer,
            attrs={LADDER: LadderPlan(base, tuple(request.budgets)).as_dict()},
        )  # fmt: skip

    def plan_text(self, request: Request) -> str:
        return f", scored at {', '.join(f'{b}×' for b in request.budgets or [])} the budget"

    def flags(self, request: Request) -> str:
        return f" --budgets {','.join(map(str, request.budgets or []))}"

    def read(self, source: optuna.Study, companion: optuna.Study, metric: str) -> LadderReading:
        return LadderReading(ladder_verdict(source, companion), metric)

    def absent(self, study_name: str) -> list[Block]:
        return [
            Paragraph("No budget ladder yet: nothing says how this ranking carries over to longer runs."),
            NextStep(
                f"hpo confirm {study_name} --budgets 1,4,16", "one run per configuration and seed gives every budget"
            ),
        ]


LADDER_KIND = LadderKind()
