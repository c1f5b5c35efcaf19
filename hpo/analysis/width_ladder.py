"""The width ladder's arithmetic: per configuration, where its lr optimum sits at each width and
whether it holds or drifts (:func:`hpo.analysis.transfer.transfer`); per width, whether the study's
ranking (each configuration at its best lr there) still holds; one sentence over both. Pure
functions of typed rows; :mod:`hpo.companions.widths` reads them from the companion study."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpo.analysis.confirmation import Confirmed, agreement_state, seed_mean_text
from hpo.analysis.transfer import Transfer, TransferRun, transfer


@dataclass(frozen=True)
class ConfigTransfer:
    trial: int  # the configuration's trial in the source study
    study_value: float
    baseline: bool
    runs: list[TransferRun]  # the finished ones
    result: Transfer | None  # None until every width has MIN_LRS learning rates with every seed finished
    text: str

    @property
    def label(self) -> str:
        return f"#{self.trial}" + (" (baseline)" if self.baseline else "")


@dataclass(frozen=True)
class LadderWidth:
    factor: float
    configs: list[Confirmed]  # each configuration's seeds at its best lr at this width, in the study's order
    state: str  # holds | tied | flips | pending
    text: str


@dataclass(frozen=True)
class WidthLadder:
    transfers: list[ConfigTransfer]  # in the study's order
    widths: list[LadderWidth]
    summary: str
    parameterization: str
    finished: int
    expected: int


def config_transfer(head: Confirmed, runs: list[TransferRun], widths: int, lrs: int, seeds: int) -> ConfigTransfer:
    """The transfer verdict of one configuration (``head``: its trial, study value and baseline flag)
    once every (width, lr) point has all its seeds, else how far it is."""
    counts: dict[tuple[int, float], int] = {}
    for r in runs:
        counts[r.width, r.lr] = counts.get((r.width, r.lr), 0) + 1
    if len(counts) < widths * lrs or min(counts.values()) < seeds:
        text = f"{len(runs)} of {widths * lrs * seeds} runs finished"
        return ConfigTransfer(head.trial, head.study_value, head.baseline, runs, None, text)
    try:
        result = transfer(runs)
    except ValueError as err:  # every lr diverged at some width
        return ConfigTransfer(head.trial, head.study_value, head.baseline, runs, None, str(err))
    return ConfigTransfer(head.trial, head.study_value, head.baseline, runs, result, result.text)


def width_at(width_index: int, factor: float, transfers: list[ConfigTransfer]) -> LadderWidth:
    configs = []
    for c in transfers:
        if c.result is None:
            continue
        best = c.result.optima[width_index]
        values = [r.score for r in c.runs if r.width == best.width and r.lr == best.grid_lr]
        configs.append(Confirmed(c.trial, c.study_value, c.baseline, values))
    state = agreement_state(configs)
    return LadderWidth(factor, configs, state, width_text(factor, configs, state))


def width_text(factor: float, configs: list[Confirmed], state: str) -> str:
    at = f"at {factor:g}× the width"
    if state == "pending":
        return f"{at}: fewer than two configurations have finished every run"
    winner, best = configs[0], min(configs, key=lambda c: c.mean)
    if state == "holds":
        return f"{at}, the study's winner (trial {winner.trial}, {seed_mean_text(winner)}) stays best"
    if state == "tied":
        return f"{at}, the study's winner (trial {winner.trial}) is tied with another configuration"
    return f"{at}, trial {best.trial} ({seed_mean_text(best)}) beats the study's winner ({seed_mean_text(winner)})"


def width_summary(transfers: list[ConfigTransfer], per_width: list[LadderWidth]) -> str:
    """One sentence: the winner's lr across widths, then whether its rank holds."""
    if not transfers or transfers[0].result is None:
        return "The width ladder is not finished: " + (transfers[0].text if transfers else "no run has finished yet")
    head = f"Trial {transfers[0].trial}: {transfers[0].text}."
    flips = [r for r in per_width if r.state == "flips"]
    if flips:
        return f"{head} But the ranking does not carry over: {flips[0].text}."
    return head


def width_ladder(
    heads: list[tuple[Confirmed, list[TransferRun]]],
    factors: list[float],
    *,
    lrs: int,
    seeds: int,
    parameterization: str,
    finished: int,
    expected: int,
) -> WidthLadder:
    """The ladder from each configuration's head row and finished runs, in the study's order."""
    ordered = sorted(heads, key=lambda h: h[0].study_value if math.isfinite(h[0].study_value) else math.inf)
    transfers = [config_transfer(head, runs, len(factors), lrs, seeds) for head, runs in ordered]
    per_width = [width_at(i, f, transfers) for i, f in enumerate(factors)]
    return WidthLadder(transfers, per_width, width_summary(transfers, per_width), parameterization, finished, expected)
