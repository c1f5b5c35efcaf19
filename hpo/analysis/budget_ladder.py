"""The budget ladder's arithmetic: per budget (a multiple of the study's budget) the configurations'
seed means, their rank correlation with the study's order and a verdict; over the ladder, one
sentence (the winner holds, from when it is tied, or where the order flips); per configuration its
seed-mean curve. Pure functions of typed rows; :mod:`hpo.companions.ladder` reads the rows."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import NamedTuple

from hpo.analysis.confirmation import Confirmed, agreement_state, rank_correlation, reading
from hpo.analysis.progress import copy_floor_of
from hpo.analysis.seeds import SeedStats
from hpo.analysis.stopping import Forecast
from hpo.records import FloorRecord, StopVerdict


class SeedMeanPoint(NamedTuple):
    kimg: float
    mean: float  # over the seeds that reached this point
    sd: float
    seeds: int


@dataclass(frozen=True)
class LadderBudget:
    multiple: int
    kimg: float
    configs: list[Confirmed]  # in the study's order
    rank_correlation: float | None
    state: str  # holds | tied | flips | pending
    text: str


@dataclass(frozen=True)
class Ladder:
    budgets: list[LadderBudget]
    summary: str
    curves: dict[int, list[SeedMeanPoint]]  # source trial → its seed-mean curve
    stops: dict[int, StopVerdict]
    forecasts: dict[int, Forecast]
    floor: FloorRecord | None
    finished: int
    expected: int


def ladder_budget(multiple: int, base_kimg: float, configs: list[Confirmed]) -> LadderBudget:
    """The ladder's budget at ``multiple`` × the study's budget, from each configuration's seeds there."""
    scored = [c for c in configs if c.values]
    state, text = agreement_state(scored), reading(scored, multiple)
    return LadderBudget(multiple, base_kimg * multiple, configs, rank_correlation(scored), state, text)


def ladder_rows(ladder: Ladder) -> list[tuple[str, float, list[str]]]:
    """Per configuration (the study's order): its label, study value and "mean ± sd" at each budget
    ("—" where no seed has reached it): the table that ``hpo confirm`` prints and the report shows."""
    rows = []
    for c in ladder.budgets[0].configs:
        cells = []
        for r in ladder.budgets:
            at = next((x for x in r.configs if x.trial == c.trial), None)
            cells.append(f"{at.mean:.4g} ± {at.spread:.2g}" if at is not None and at.values else "—")
        rows.append((c.label, c.study_value, cells))
    return rows


def copy_floor_text(floor: FloorRecord) -> str:
    return f"{100 * (copy_floor_of(floor) or 0.0):.1f} %"


def ladder_summary(budgets: list[LadderBudget]) -> str:
    """One sentence over the whole ladder."""
    done = [r for r in budgets if r.state != "pending"]
    if not done:
        return "No budget has two scored configurations yet."
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
            "to rank these configurations on this data: raise train.kimg (or rank by this ladder's longest budget)."
        )
    if all(r.state == "holds" for r in done):
        return f"The winner holds to {top}× the budget."
    first_tie = next(r for r in done if r.state == "tied")
    return f"From {first_tie.multiple}× the budget on, the winner is tied with another configuration: {done[-1].text}"


def seed_mean_point(seeds: list[tuple[float, float]]) -> SeedMeanPoint:
    """(kimg, score) of each seed at one evaluation point → their mean point."""
    stats = SeedStats.of([score for _, score in seeds])
    return SeedMeanPoint(statistics.fmean(k for k, _ in seeds), stats.mean, stats.sd, stats.seeds)
