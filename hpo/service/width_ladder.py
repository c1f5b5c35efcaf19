"""The width ladder: does what the study found on its network carry over to a wider (or narrower) one?

``hpo confirm STUDY --widths 0.5,1,2`` retrains the study's top configurations at each multiple of
their base channels, each over a small learning-rate grid around its own lr (factors of 2) and with
fresh seeds, as the trials of a companion study that the same workers serve. This module creates it
and reads it back: per configuration, :func:`hpo.analysis.transfer.transfer` places the lr optimum
per width and says whether it holds or drifts (lr ∝ width^α); per width, whether the study's
ranking (each configuration at its best lr there) still holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from hpo.analysis.record import CONFIRM_OF, WIDTHS, WIDTHS_BY, StudyRecord, TrialRecord, companion_attrs
from hpo.analysis.transfer import Transfer, TransferRun, transfer
from hpo.errors import HpoError
from hpo.service.confirm import (
    Confirmed,
    companion_raw,
    pick_configurations,
    seed_choices,
    seed_mean_text,
)
from hpo.service.ladder import rung_state
from hpo.service.study import create_or_resume, require_spec
from hpo.spec.params import candidates
from hpo.spec.spec import spec_from_dict

MAX_WIDTH_FACTOR = 16.0
LR_STEP = 2.0  # neighbouring learning rates of the grid differ by this factor
MIN_LRS = 3  # a parabola needs three points; fewer cannot place an optimum


def parse_widths(text: str) -> list[float]:
    """``--widths 0.5,1,2`` → [0.5, 1.0, 2.0]: multiples of each configuration's base channels."""
    try:
        factors = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        factors = []
    if len(factors) < 2 or factors[0] <= 0 or factors[-1] > MAX_WIDTH_FACTOR:
        raise HpoError(
            f"--widths {text!r}: expected two or more multiples of the study's base channels in (0, "
            f"{MAX_WIDTH_FACTOR:g}], e.g. 0.5,1,2"
        )
    return factors


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


def create_width_companion(
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
    name = f"{study.study_name[:92]}-widths"
    n_trials = len(configs) * len(factors) * lrs * seeds
    search: dict[str, list[Any]] = {"seed": seed_values, "base_channels": all_widths, "lr": all_lrs}
    raw = companion_raw(study, name, n_trials=n_trials, train={}, search=search)
    companion, created = create_or_resume(spec_from_dict(raw, file=f"width ladder of {study.study_name}"), storage)
    if created:
        companion.set_user_attr(CONFIRM_OF, study.study_name)
        companion.set_user_attr(WIDTHS, {"factors": factors, "lrs": lrs})
        for trial, widths, grid in plans:
            params = {k: v for k, v in trial.params.items() if k not in ("kimg", "lr", "base_channels")}
            attrs = companion_attrs(trial, watch=False)
            for width in widths:
                for lr in grid:
                    for seed in seed_values:
                        companion.enqueue_trial(
                            {**params, "base_channels": width, "lr": lr, "seed": seed}, user_attrs=attrs
                        )
    study.set_user_attr(WIDTHS_BY, name)
    return companion


def run_score(t: FrozenTrial) -> float | None:
    """A finished run's score; infinite for one stopped as diverged (the companion prunes nothing else)."""
    if t.state == TrialState.COMPLETE and t.value is not None:
        return float(t.value)
    return math.inf if t.state == TrialState.PRUNED else None


@dataclass(frozen=True)
class ConfigTransfer:
    trial: int  # the configuration's trial in the source study
    study_value: float
    baseline: bool
    runs: list[TransferRun]  # the finished ones
    result: Transfer | None  # None until every width has MIN_LRS learning rates with every seed finished
    text: str


@dataclass(frozen=True)
class WidthRung:
    factor: float
    configs: list[Confirmed]  # each configuration's seeds at its best lr at this width, in the study's order
    state: str  # holds | tied | flips | pending
    text: str


@dataclass(frozen=True)
class WidthLadder:
    transfers: list[ConfigTransfer]  # in the study's order
    rungs: list[WidthRung]
    summary: str
    parameterization: str
    finished: int
    expected: int


def runs_by_config(trials: list[FrozenTrial]) -> dict[int, list[TransferRun]]:
    out: dict[int, list[TransferRun]] = {}
    for t in trials:
        number, score = TrialRecord.of(t).source_trial, run_score(t)
        if number is None or score is None:
            continue
        run = TransferRun(int(t.params["base_channels"]), float(t.params["lr"]), int(t.params["seed"]), score)
        out.setdefault(number, []).append(run)
    return out


def config_transfer(trial: FrozenTrial, runs: list[TransferRun], widths: int, lrs: int, seeds: int) -> ConfigTransfer:
    """The transfer verdict once every (width, lr) point has all its seeds, else how far it is."""
    counts: dict[tuple[int, float], int] = {}
    for r in runs:
        counts[r.width, r.lr] = counts.get((r.width, r.lr), 0) + 1
    value, baseline = float(trial.value or math.nan), TrialRecord.of(trial).baseline
    if len(counts) < widths * lrs or min(counts.values()) < seeds:
        text = f"{len(runs)} of {widths * lrs * seeds} runs finished"
        return ConfigTransfer(trial.number, value, baseline, runs, None, text)
    try:
        result = transfer(runs)
    except ValueError as err:  # every lr diverged at some width
        return ConfigTransfer(trial.number, value, baseline, runs, None, str(err))
    return ConfigTransfer(trial.number, value, baseline, runs, result, result.text)


def rung_at(width_index: int, factor: float, transfers: list[ConfigTransfer]) -> WidthRung:
    configs = []
    for c in transfers:
        if c.result is None:
            continue
        best = c.result.optima[width_index]
        values = [r.score for r in c.runs if r.width == best.width and r.lr == best.grid_lr]
        configs.append(Confirmed(c.trial, c.study_value, c.baseline, values))
    state = rung_state(configs)
    return WidthRung(factor, configs, state, rung_text(factor, configs, state))


def rung_text(factor: float, configs: list[Confirmed], state: str) -> str:
    at = f"at {factor:g}× the width"
    if state == "pending":
        return f"{at}: fewer than two configurations have finished every run"
    winner, best = configs[0], min(configs, key=lambda c: c.mean)
    if state == "holds":
        return f"{at}, the study's winner (trial {winner.trial}, {seed_mean_text(winner)}) stays best"
    if state == "tied":
        return f"{at}, the study's winner (trial {winner.trial}) is tied with another configuration"
    return f"{at}, trial {best.trial} ({seed_mean_text(best)}) beats the study's winner ({seed_mean_text(winner)})"


def width_verdict(source: optuna.Study, companion: optuna.Study) -> WidthLadder:
    plan = StudyRecord.of(companion).plan(WIDTHS)
    factors, lrs = [float(f) for f in plan["factors"]], int(plan["lrs"])
    spec = require_spec(companion)
    seeds = len(candidates(spec.search["seed"]))
    trials = companion.get_trials(deepcopy=False)
    by_source = {t.number: t for t in source.get_trials(deepcopy=False)}
    runs = runs_by_config(trials)
    ordered = sorted((by_source[n] for n in runs if n in by_source), key=lambda t: float(t.value or math.inf))
    transfers = [config_transfer(t, runs[t.number], len(factors), lrs, seeds) for t in ordered]
    rungs = [rung_at(i, f, transfers) for i, f in enumerate(factors)]
    finished = sum(1 for t in trials if t.state.is_finished())
    summary = summary_text(transfers, rungs)
    return WidthLadder(transfers, rungs, summary, spec.train.parameterization, finished, spec.study.n_trials)


def summary_text(transfers: list[ConfigTransfer], rungs: list[WidthRung]) -> str:
    """One sentence: the winner's lr across widths, then whether its rank holds."""
    if not transfers or transfers[0].result is None:
        return "The width ladder is not finished: " + (transfers[0].text if transfers else "no run has finished yet")
    head = f"Trial {transfers[0].trial}: {transfers[0].text}."
    flips = [r for r in rungs if r.state == "flips"]
    if flips:
        return f"{head} But the ranking does not carry over: {flips[0].text}."
    return head
