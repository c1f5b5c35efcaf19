"""How a budget is divided between the phases, from costs measured on this machine: pure arithmetic.

The search gets ``Split.search`` of what is left after planning and the preflight, the decision
``Split.decide`` and the final run the rest, less its sweep and the export. A trial's budget is the
planner's (``hpo init``'s rule), cut so that ``MIN_COMPLETE`` complete trials fit the search; the
number of trials is what the search's seconds buy at the expected cost of a trial (pruning stops
about half of them at the first evaluation point, as on the quickstart: 6 of 10). The budget is too
small when even the smallest trial budget cannot give ``MIN_COMPLETE`` complete trials and a final
run of ``MIN_FINAL_TRIALS`` trials' training."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpo.analysis.tables import duration
from hpo.errors import HpoError

MIN_COMPLETE = 4  # complete trials the search must afford: the pruner's guard keeps 4 before it prunes hard
MIN_FINAL_TRIALS = 2.0  # the final run trains at least this many trials' budget: else it is one more trial
COMPLETE_SHARE = 0.5  # share of trials expected to complete; the rest pruned at the first evaluation point
MAX_TRIALS = 200
SWEEP_MARGIN = 1.15  # the final sweep is planned at this much of a trial's measured sweep
EXPORT_SECONDS = 15.0  # reading the checkpoint, writing weights, spec and settings, the report


@dataclass(frozen=True)
class Split:
    """Shares of the budget after planning and the preflight; the final run takes what is left. The
    default is the best of 25/10, 35/10 and 50/10 on digits at a 10-minute CPU budget, 2 seeds each
    (classifier-FID 8.01, 9.73, 5.30: docs/benchmarks.md, `benchmarks/run_budget.py`)."""

    search: float = 0.50
    decide: float = 0.10

    @property
    def final(self) -> float:
        return 1.0 - self.search - self.decide

    def words(self) -> str:
        return f"{self.search * 100:g}/{self.decide * 100:g}"


def parse_split(text: str) -> Split:
    """``50/10`` (percent of the budget for the search and the decision; the final run takes the rest)."""
    parts = text.strip().split("/")
    fix = "give the search's and the decision's percent of the budget, e.g. --split 50/10"
    try:
        search, decide = (float(p) / 100 for p in parts)
    except ValueError:
        raise HpoError(f"--split {text!r}: not two percentages; {fix}") from None
    if not (search > 0 and decide >= 0 and search + decide <= 0.8):
        raise HpoError(f"--split {text!r}: the search needs more than 0 % and the final run at least 20 %; {fix}")
    return Split(search, decide)


@dataclass(frozen=True)
class Costs:
    """One trial at ``kimg`` on this machine: its training and its sampling sweep (seconds)."""

    kimg: float
    train_s: float
    sweep_s: float
    first_point: float  # the share of its budget a trial pruned at its first evaluation point trains
    min_kimg: float  # the smallest trial budget: a step of the largest batch for each evaluation point

    def at(self, kimg: float) -> Costs:
        """The same trial at another budget: training scales with images seen, the sweep does not."""
        return Costs(kimg, self.train_s * kimg / self.kimg, self.sweep_s, self.first_point, self.min_kimg)

    @property
    def complete_s(self) -> float:
        return self.train_s + self.sweep_s

    @property
    def expected_s(self) -> float:
        """A trial's expected cost, pruned ones (the training to the first evaluation point) included."""
        pruned = self.train_s * self.first_point
        return COMPLETE_SHARE * self.complete_s + (1 - COMPLETE_SHARE) * pruned


@dataclass(frozen=True)
class Shares:
    search_s: float
    decide_s: float
    final_s: float  # the final run's training
    sweep_s: float  # the final sweep
    export_s: float


@dataclass(frozen=True)
class SearchBudget:
    trial: Costs  # at the trial budget chosen
    n_trials: int
    shares: Shares


def shares(left_s: float, split: Split, sweep_s: float) -> Shares:
    """``left_s`` (after planning and the preflight) divided between the phases."""
    final_sweep = SWEEP_MARGIN * sweep_s
    final = split.final * left_s - final_sweep - EXPORT_SECONDS
    return Shares(split.search * left_s, split.decide * left_s, final, final_sweep, EXPORT_SECONDS)


def minimum_budget(costs: Costs, split: Split, overhead_s: float) -> float:
    """The smallest budget this plan runs in: at the smallest trial budget, ``MIN_COMPLETE`` complete
    trials in the search's share and ``MIN_FINAL_TRIALS`` trials' training in the final run's."""
    small = costs.at(costs.min_kimg)
    search = MIN_COMPLETE * small.complete_s / split.search
    final = (MIN_FINAL_TRIALS * small.train_s + SWEEP_MARGIN * small.sweep_s + EXPORT_SECONDS) / split.final
    return overhead_s + max(search, final)


def plan_search(
    costs: Costs, split: Split, *, left_s: float, budget_s: float, overhead_s: float, workers: int = 1
) -> SearchBudget:
    """The trial budget and trial count for ``left_s`` seconds on ``workers`` side by side; a one-line
    error naming the minimum budget (the one-worker one: a safe bound) when it is too small."""
    need = minimum_budget(costs, split, overhead_s)
    if left_s + overhead_s < need:
        raise HpoError(
            f"--budget {duration(budget_s)} is below this plan's minimum of {duration(math.ceil(need))} on this "
            f"machine ({MIN_COMPLETE} complete trials of {duration(costs.at(costs.min_kimg).complete_s)} at "
            f"{costs.min_kimg:g} kimg in {split.search:.0%} of the budget, and a final run of "
            f"{MIN_FINAL_TRIALS:g} trials' training); give --budget {duration(math.ceil(need / 60) * 60)} or more"
        )
    share = shares(left_s, split, costs.sweep_s)
    kimg = costs.kimg
    most_train = share.search_s / MIN_COMPLETE - costs.sweep_s  # a trial's training that still fits MIN_COMPLETE
    if costs.train_s > most_train:
        kimg = max(costs.min_kimg, costs.kimg * most_train / costs.train_s)
    trial = costs.at(round(kimg, 3))
    n_trials = min(MAX_TRIALS, max(MIN_COMPLETE, math.floor(workers * share.search_s / trial.expected_s)))
    return SearchBudget(trial, n_trials, share)


@dataclass(frozen=True)
class Speed:
    """How fast a configuration trains, measured in one of its runs: training alone, and what one
    evaluation point (probe, checkpoint, its scoring) costs beside it."""

    kimg_per_second: float
    point_seconds: float

    @classmethod
    def measured(cls, *, seconds: float, images_per_second: float, eval_seconds: float, eval_points: int) -> Speed:
        """From a run's record: ``seconds`` in all, ``eval_seconds`` of them at its ``eval_points``
        points. A record without points (written before they were timed) has its points averaged in."""
        kimg = images_per_second * seconds / 1000.0
        if eval_points <= 0 or eval_seconds >= seconds:
            return cls(images_per_second / 1000.0, 0.0)
        return cls(kimg / (seconds - eval_seconds), eval_seconds / eval_points)


def final_kimg(*, seconds: float, speed: Speed, points: int, trial_kimg: float, already: float = 0.0) -> float:
    """The final run's budget: ``already`` (the kimg of the trial's state it continues) and what
    ``seconds`` buy at the winner's measured speed once its ``points`` evaluation points are paid for
    (a trial has 4, the final run up to 20), never less than the trial's own budget."""
    bought = (seconds - points * speed.point_seconds) * speed.kimg_per_second
    return round(max(trial_kimg, already + bought), 3)


def decide_runs(decide_s: float, complete_s: float, complete: int) -> tuple[int, int]:
    """(configurations, seeds) the decision can retrain in ``decide_s``: up to 3 configurations (and
    the baseline the confirmation adds) with as many fresh seeds as fit; (0, 0) when fewer than 2
    configurations and their baseline fit, or fewer than 2 trials completed."""
    runs = math.floor(decide_s / complete_s)
    top = min(3, complete, runs - 1)
    if top < 2:
        return 0, 0
    return top, max(1, runs // (top + 1))


CHECKPOINT_SHARE = 0.05  # the final run saves a checkpoint at least this often, as a share of the budget
POINT_SHARE = 0.1  # ... unless its evaluation points would then take more than this share of its time
MIN_POINTS = 4  # the stop verdict needs 3 scored points, the bigger-budget forecast 4


def final_num_evals(final_s: float, budget_s: float, point_s: float = 0.0) -> int:
    """Evaluation points (each a checkpoint) of the final run: one per ``CHECKPOINT_SHARE`` of the
    budget, so a kill costs at most that share, from 4 to 20; fewer (not under 4) where points of
    ``point_s`` seconds each would take over ``POINT_SHARE`` of its ``final_s``. A point scores
    samples: 13.6 s each on digits on this 2-core CPU, where a 10-minute budget's 11 points took
    over half of its final run."""
    wanted = math.ceil(final_s / (CHECKPOINT_SHARE * budget_s))
    if point_s > 0:
        wanted = min(wanted, math.floor(POINT_SHARE * final_s / point_s))
    return max(MIN_POINTS, min(20, wanted))
