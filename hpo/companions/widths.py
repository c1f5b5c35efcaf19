"""The width ladder: does what the study found on its network carry over to a wider (or narrower) one?

``hpo confirm STUDY --widths 0.5,1,2`` retrains the study's top configurations at each multiple of
their base channels, each over a small learning-rate grid around its own lr (factors of 2) and with
fresh seeds, as the trials of a companion study that the same workers serve. This module creates it
and reads its runs into the rows :mod:`hpo.analysis.width_ladder` judges: per configuration, where
the lr optimum sits per width (lr ∝ width^α); per width, whether the study's ranking holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import optuna
import plotly.graph_objects as go
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from hpo.analysis.transfer import TransferRun
from hpo.analysis.width_ladder import ConfigTransfer, WidthLadder, width_ladder
from hpo.companions.base import (
    Request,
    companion_name,
    create_companion,
    finished_count,
    head_row,
    pick_configurations,
    seed_choices,
)
from hpo.companions.blocks import Block, Chart, Items, NextStep, Paragraph, Table
from hpo.errors import HpoError
from hpo.files import JsonObject
from hpo.records import WIDTHS, WIDTHS_BY, StudyRecord, TrialRecord, WidthPlan, companion_attrs
from hpo.service.study import require_spec
from hpo.spec.params import Params, ParamValue, candidates

LR_STEP = 2.0  # neighbouring learning rates of the grid differ by this factor
MIN_LRS = 3  # a parabola needs three points; fewer cannot place an optimum


def lr_grid(lr: float, count: int) -> list[float]:
    """``count`` learning rates a factor of 2 apart, centred on ``lr`` in log scale."""
    return [float(f"{lr * LR_STEP ** (i - (count - 1) / 2):.6g}") for i in range(count)]


def widths_of(base_channels: int, factors: list[float]) -> list[int]:
    """Base channels at each multiple (:func:`~hpo.diffusion.unet.scaled_channels`), each once."""
    from hpo.diffusion.unet import scaled_channels  # torch: only creating a ladder needs it, not reading one

    widths = [scaled_channels(base_channels, f) for f in factors]
    if len(set(widths)) != len(widths):
        raise HpoError(
            f"--widths {','.join(f'{f:g}' for f in factors)}: at base channels {base_channels} these give "
            f"{widths} channels, some twice; choose multiples further apart"
        )
    return widths


def base_channels_of(study: optuna.Study, trial: FrozenTrial) -> int:
    return int(trial.params.get("base_channels", require_spec(study).train.base_channels))


def create(
    study: optuna.Study, storage: RDBStorage, *, top: int, seeds: int, factors: list[float], lrs: int
) -> optuna.Study:
    """The companion with one trial per (configuration, width, lr, seed), or the existing one."""
    spec = require_spec(study)
    if spec.train.network.factory != "builtin":
        raise HpoError(
            f"--widths scales the builtin UNet's base_channels; study {study.study_name!r} trains "
            f"network.factory {spec.train.network.factory!r}: compare its widths with its own kwargs instead"
        )
    if lrs < MIN_LRS:
        raise HpoError(f"--lrs {lrs}: needs at least {MIN_LRS} learning rates per width to place an optimum")
    configs = pick_configurations(study, top)
    plans = [(t, widths_of(base_channels_of(study, t), factors), lr_grid(float(t.params.get("lr", spec.train.lr)), lrs))
             for t in configs]  # fmt: skip
    all_widths = sorted({w for _, widths, _ in plans for w in widths})
    all_lrs = sorted({lr for _, _, grid in plans for lr in grid})
    seed_values = seed_choices(seeds)
    name = companion_name(study.study_name, WIDTHS_KIND.name)
    n_trials = len(configs) * len(factors) * lrs * seeds
    search: dict[str, Sequence[ParamValue]] = {"seed": seed_values, "base_channels": all_widths, "lr": all_lrs}
    runs = (
        ({**kept(trial), "base_channels": width, "lr": lr, "seed": seed}, companion_attrs(trial, watch=False))
        for trial, widths, grid in plans
        for width in widths
        for lr in grid
        for seed in seed_values
    )
    return create_companion(
        study, storage, name=name, what="width ladder", n_trials=n_trials, train={}, search=search,
        attrs={WIDTHS: WidthPlan(tuple(factors), lrs).as_dict()}, runs=runs, pointer=WIDTHS_BY,
    )  # fmt: skip


def kept(trial: FrozenTrial) -> Params:
    """A configuration's parameters that every run of its width ladder keeps (not its budget, lr, width)."""
    return {k: v for k, v in trial.params.items() if k not in ("kimg", "lr", "base_channels")}


def run_score(t: FrozenTrial) -> float | None:
    """A finished run's score; infinite for one stopped as diverged (the companion prunes nothing else)."""
    if t.state == TrialState.COMPLETE and t.value is not None:
        return float(t.value)
    return math.inf if t.state == TrialState.PRUNED else None


def runs_by_config(trials: list[FrozenTrial]) -> dict[int, list[TransferRun]]:
    out: dict[int, list[TransferRun]] = {}
    for t in trials:
        number, score = TrialRecord.of(t).source_trial, run_score(t)
        if number is None or score is None:
            continue
        run = TransferRun(int(t.params["base_channels"]), float(t.params["lr"]), int(t.params["seed"]), score)
        out.setdefault(number, []).append(run)
    return out


def width_verdict(source: optuna.Study, companion: optuna.Study) -> WidthLadder:
    plan = StudyRecord.of(companion).width_plan
    spec = require_spec(companion)
    by_source = {t.number: t for t in source.get_trials(deepcopy=False)}
    runs = runs_by_config(companion.get_trials(deepcopy=False))
    heads = [(head_row(by_source[n]), r) for n, r in runs.items() if n in by_source]
    return width_ladder(
        heads, list(plan.factors), lrs=plan.lrs, seeds=len(candidates(spec.search["seed"])),
        parameterization=spec.train.parameterization, finished=finished_count(companion), expected=spec.study.n_trials,
    )  # fmt: skip


def transfer_figure(c: ConfigTransfer, metric: str) -> go.Figure:
    """Seed-mean score against lr (log), one line per width."""
    if c.result is None:
        raise ValueError(f"trial {c.trial}'s width ladder is not finished: nothing to draw")
    fig = go.Figure()
    for o in c.result.optima:
        finite = [m for m in o.means if math.isfinite(m.mean)]
        fig.add_trace(
            go.Scatter(
                x=[m.lr for m in finite],
                y=[m.mean for m in finite],
                error_y={"type": "data", "array": [2 * m.standard_error for m in finite], "visible": True},
                mode="lines+markers",
                name=f"width {o.width}",
            )
        )
    fig.update_layout(xaxis_title="learning rate (log)", yaxis_title=metric, xaxis_type="log")
    return fig


def optima_rows(c: ConfigTransfer) -> list[list[str]]:
    """Per width: the lr optimum, the tied interval, its score (mean ± sd over seeds) and how far the
    fitted rule lr ∝ width^α misses it."""
    if c.result is None:
        return []
    rows = []
    for o, residual in zip(c.result.optima, c.result.residuals, strict=True):
        edge = f" ({o.edge} edge)" if o.edge else ""
        score = f"{o.best.mean:.4g} ± {o.best.spread:.2g}"
        rows.append([str(o.width), f"{o.lr:.3g}{edge}", f"{o.low:.3g}..{o.high:.3g}", score, f"×{residual:.2g}"])
    return rows


@dataclass(frozen=True)
class WidthReading:
    ladder: WidthLadder
    metric: str

    def json(self) -> JsonObject:
        ladder = self.ladder
        configs: list[JsonObject] = [
            {"trial": c.trial, "baseline": c.baseline, "study_value": c.study_value, "verdict": c.text,
             "state": c.result.state if c.result else "pending", "alpha": c.result.alpha if c.result else None,
             "regret": c.result.regret if c.result else None,
             "optima": [{"width": o.width, "lr": o.lr, "grid_lr": o.grid_lr, "low": o.low, "high": o.high,
                         "edge": o.edge} for o in (c.result.optima if c.result else ())]}
            for c in ladder.transfers
        ]  # fmt: skip
        per_width: list[JsonObject] = [{"factor": r.factor, "state": r.state, "verdict": r.text} for r in ladder.widths]
        return {
            "parameterization": ladder.parameterization, "finished": ladder.finished, "expected": ladder.expected,
            "configurations": configs, "rungs": per_width, "verdict": ladder.summary,
        }  # fmt: skip

    def blocks(self) -> list[Block]:
        ladder, metric = self.ladder, self.metric
        blocks: list[Block] = [
            Paragraph(ladder.summary, "lead"),
            Paragraph(
                f"Parameterisation: {ladder.parameterization}; {ladder.finished} of {ladder.expected} runs finished; "
                "each point is the mean over fresh seeds (error bars 2 SE).",
                "note",
            ),
        ]
        for c in ladder.transfers:
            blocks += config_blocks(c, metric)
        return [*blocks, Items([r.text for r in ladder.widths])]


def config_blocks(c: ConfigTransfer, metric: str) -> list[Block]:
    label = f"Trial {c.trial}" + (" (baseline)" if c.baseline else "") + f", study {metric} {c.study_value:.4g}:"
    head = Paragraph(c.text, label=label)
    if c.result is None:
        return [head]
    header = ["width (base channels)", "lr optimum", "lrs the seeds cannot separate", "score at the best lr",
              "off the fit"]  # fmt: skip
    return [
        head,
        Table(header, optima_rows(c)),
        Paragraph(f"Fitted: lr ∝ width^{c.result.alpha:+.2f}.", "note"),
        Chart(transfer_figure(c, metric), f"{metric} against lr per width, mean ± 2 SE over seeds"),
    ]


@dataclass(frozen=True)
class WidthsKind:
    name: str = "widths"
    pointer: str = WIDTHS_BY
    heading: str = "Does the learning rate hold on a wider network?"

    def create(self, source: optuna.Study, storage: RDBStorage, request: Request) -> optuna.Study:
        if request.widths is None:
            raise ValueError("a width ladder needs widths")
        return create(source, storage, top=request.top, seeds=request.seeds, factors=request.widths, lrs=request.lrs)

    def plan_text(self, request: Request) -> str:
        return f", at {', '.join(f'{w:g}×' for w in request.widths or [])} the width, {request.lrs} learning rates each"

    def flags(self, request: Request) -> str:
        return f" --widths {','.join(f'{w:g}' for w in request.widths or [])}"

    def read(self, source: optuna.Study, companion: optuna.Study, metric: str) -> WidthReading:
        return WidthReading(width_verdict(source, companion), metric)

    def absent(self, study_name: str) -> list[Block]:
        return [
            Paragraph("No width ladder yet: nothing says whether this study's learning rate holds on a wider network."),
            NextStep(
                f"hpo confirm {study_name} --widths 0.5,1,2",
                "the top configurations over an lr grid at each width; docs/transfer.md",
            ),
        ]


WIDTHS_KIND = WidthsKind()
