"""What fresh seeds say about a study's ranking: each configuration's mean over seeds, the rank
correlation with the study's order, and one sentence (the winner holds, is tied, or does not hold).

Pure functions of typed rows (:class:`Confirmed`): the companions read the rows from their studies,
this module only does the arithmetic and the words. One rule for the confirmation, each budget of the
budget ladder and each width of the width ladder.
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy.stats import spearmanr

from hpo.analysis.seeds import SeedStats, within_two_standard_errors

MIN_RANKED = 3  # configurations scored before a rank correlation is given
NOT_RANKED = f"n/a (fewer than {MIN_RANKED} configurations scored)"  # what stands in for it below that


@dataclass(frozen=True)
class Confirmed:
    trial: int  # the configuration's trial in the source study
    study_value: float
    baseline: bool
    values: list[float]  # the score of each finished seed

    @property
    def stats(self) -> SeedStats:
        return SeedStats.of(self.values)

    @property
    def mean(self) -> float:
        return self.stats.mean

    @property
    def spread(self) -> float:
        """Standard deviation over seeds (0 with one seed)."""
        return self.stats.sd

    @property
    def standard_error(self) -> float:
        return self.stats.standard_error

    @property
    def label(self) -> str:
        return f"#{self.trial}" + (" (baseline)" if self.baseline else "")


@dataclass(frozen=True)
class Verdict:
    configs: list[Confirmed]  # in the study's order (best study value first)
    budget_ratio: float  # confirmation budget / study budget
    seeds: int
    finished: int
    expected: int
    rank_correlation: float | None  # Spearman, study order vs confirmed order
    text: str


def rank_correlation(scored: list[Confirmed]) -> float | None:
    """Spearman between the study's values and the seed means; None below :data:`MIN_RANKED`."""
    if len(scored) < MIN_RANKED:
        return None
    return float(spearmanr([c.study_value for c in scored], [c.mean for c in scored]).statistic)


def confirmation_verdict(configs: list[Confirmed], *, ratio: float, seeds: int, finished: int) -> Verdict:
    """The verdict over ``configs`` (in the study's order), confirmed at ``ratio`` × the study's budget."""
    scored = [c for c in configs if c.values]
    return Verdict(
        configs, ratio, seeds, finished, len(configs) * seeds, rank_correlation(scored), reading(scored, ratio)
    )


def reading(scored: list[Confirmed], ratio: float) -> str:
    """One plain sentence: does the winner hold, or what is tied with it."""
    if not scored:
        return "No confirmation run has finished yet."
    budget = f"{ratio:g}× the budget"
    winner = scored[0]
    best = min(scored, key=lambda c: c.mean)
    if len(scored) == 1:
        return f"Only trial {winner.trial} has confirmation runs so far: {seed_mean_text(winner)} at {budget}."
    ties = [c for c in scored if c is not winner and within_two_standard_errors(c, winner)]
    if best is winner and not ties:
        text = f"The winner holds at {budget}: trial {winner.trial} ({seed_mean_text(winner)}) beats every other one."
    elif best is winner or within_two_standard_errors(best, winner):
        names = " and ".join(f"trial {c.trial}" for c in [winner, *ties])
        values = "; ".join(seed_mean_text(c) for c in [winner, *ties])
        text = f"At {budget}, {names} are tied ({values}): the seeds cannot order them."
    else:
        text = (
            f"The winner does not hold at {budget}: trial {best.trial} ({seed_mean_text(best)}) beats trial "
            f"{winner.trial} "
            f"({seed_mean_text(winner)})."
        )
    return text + baseline_text(scored, best)


def baseline_text(scored: list[Confirmed], best: Confirmed) -> str:
    baseline = next((c for c in scored if c.baseline), None)
    if baseline is None or baseline is best:
        return ""
    if within_two_standard_errors(baseline, best):
        return f" The baseline (trial {baseline.trial}, {seed_mean_text(baseline)}) is tied with the best."
    gain = baseline.mean - best.mean
    return f" The best beats the baseline (trial {baseline.trial}, {seed_mean_text(baseline)}) by {gain:.3g}."


def agreement_state(scored: list[Confirmed]) -> str:
    """holds | tied | flips | pending: the study's winner (first) against the best seed mean."""
    if len(scored) < 2:
        return "pending"
    winner, best = scored[0], min(scored, key=lambda c: c.mean)
    if best is winner:
        return "tied" if any(within_two_standard_errors(c, winner) for c in scored[1:]) else "holds"
    return "tied" if within_two_standard_errors(best, winner) else "flips"


def seed_mean_text(c: Confirmed) -> str:
    return f"{c.mean:.3g} ± {c.spread:.2g} over {len(c.values)} seed{'s' if len(c.values) != 1 else ''}"
