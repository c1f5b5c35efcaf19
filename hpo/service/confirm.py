"""Confirmation: does the winner of short runs still win at full length?

The top K configurations of a study and its baseline are retrained with S fresh seeds each, as the
trials of a companion study on the same storage (so the same workers serve them and a crash is
retried like any trial). The verdict compares each configuration's mean over seeds, with its spread,
and says whether the winner holds, or which configurations are tied.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState
from scipy.stats import spearmanr

from hpo.analysis.ranking import best_first
from hpo.analysis.record import CONFIRM_OF, CONFIRMED_BY, LADDER, LADDER_BY, TrialRecord, companion_attrs
from hpo.analysis.seeds import within_two_standard_errors
from hpo.errors import HpoError
from hpo.service.study import create_or_resume, require_spec
from hpo.service.trials import own_trials
from hpo.spec.params import candidates
from hpo.spec.spec import spec_from_dict

MAX_RUNG = 64
SEED_BASE = 1000  # confirmation seeds 1001, 1002, ...: never the study's own seed


def companion_name(study_name: str, *, ladder: bool = False) -> str:
    return f"{study_name[:92]}-{'ladder' if ladder else 'confirm'}"


def parse_budgets(text: str) -> list[int]:
    """``--budgets 1,4,16`` → [1, 4, 16]: whole multiples of the study's budget, increasing."""
    try:
        budgets = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        budgets = []
    if not budgets or budgets[0] < 1 or budgets[-1] > MAX_RUNG:
        raise HpoError(
            f"--budgets {text!r}: expected whole multiples of the study's budget from 1 to {MAX_RUNG}, e.g. 1,4,16"
        )
    return budgets


def pick_configurations(study: optuna.Study, top: int) -> list[FrozenTrial]:
    """The ``top`` best complete trials with distinct parameters, then the best complete baseline
    (if it is not among them)."""
    complete = best_first(own_trials(study))
    chosen: list[FrozenTrial] = []
    for t in complete:
        if len(chosen) < top and all(t.params != c.params for c in chosen):
            chosen.append(t)
    baseline = next((t for t in complete if TrialRecord.of(t).baseline), None)
    if baseline is not None and all(baseline.params != c.params for c in chosen):
        chosen.append(baseline)
    if not chosen:
        raise HpoError(f"study {study.study_name!r} has no complete trial to confirm yet")
    return chosen


def create_companion(
    study: optuna.Study,
    storage: RDBStorage,
    *,
    top: int,
    seeds: int,
    kimg: float | None,
    budgets: list[int] | None = None,
) -> optuna.Study:
    """The companion study with one trial per (configuration, seed), or the existing one. With
    ``budgets`` (a ladder) each trial trains once to the largest multiple of the study's budget and
    is scored at every multiple on the way: one evaluation point per multiple of the budget."""
    spec = require_spec(study)
    configs = pick_configurations(study, top)
    name = companion_name(study.study_name, ladder=budgets is not None)
    train: dict[str, object] = {"kimg": kimg if kimg is not None else spec.train.kimg}
    if budgets is not None:
        train.update(kimg=spec.train.kimg * budgets[-1], num_evals=budgets[-1])
    seed_values = seed_choices(seeds)
    raw = companion_raw(study, name, n_trials=len(configs) * seeds, train=train, search={"seed": seed_values})
    companion, created = create_or_resume(spec_from_dict(raw, file=f"confirmation of {study.study_name}"), storage)
    if created:
        companion.set_user_attr(CONFIRM_OF, study.study_name)
        if budgets is not None:
            companion.set_user_attr(LADDER, {"base_kimg": spec.train.kimg, "budgets": budgets})
        for trial in configs:
            params = {k: v for k, v in trial.params.items() if k != "kimg"}
            for seed in seed_values:
                companion.enqueue_trial({**params, "seed": seed}, user_attrs=companion_attrs(trial, watch=True))
    study.set_user_attr(LADDER_BY if budgets is not None else CONFIRMED_BY, name)
    return companion


def seed_choices(seeds: int) -> list[int]:
    return [SEED_BASE + i for i in range(1, seeds + 1)]


def companion_raw(
    study: optuna.Study, name: str, *, n_trials: int, train: dict[str, object], search: dict[str, list[Any]]
) -> dict[str, Any]:
    """The study's spec as a companion's: its own name and trial count, ``train`` settings replaced,
    the parameters in ``search`` (and kimg) taken out of the search space and offered as exactly those
    choices, no pruning, no baselines: every trial is enqueued by the companion's creator."""
    raw = require_spec(study).to_dict()
    raw["study"] = {**raw["study"], "name": name, "n_trials": n_trials}
    raw["train"] = {**raw["train"], **train}
    raw["search"] = {k: v for k, v in raw["search"].items() if k != "kimg" and k not in search}
    raw["search"].update({k: {"type": "categorical", "choices": v} for k, v in search.items()})
    raw.update(pruner={"name": "none"}, sampler={"name": "random", "seed": 0}, baselines=[])
    return raw


@dataclass(frozen=True)
class Confirmed:
    trial: int  # the configuration's trial in the source study
    study_value: float
    baseline: bool
    values: list[float]  # the score of each finished seed

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else math.nan

    @property
    def spread(self) -> float:
        """Standard deviation over seeds (0 with one seed)."""
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    @property
    def standard_error(self) -> float:
        return self.spread / math.sqrt(len(self.values)) if self.values else math.inf


@dataclass(frozen=True)
class Verdict:
    configs: list[Confirmed]  # in the study's order (best study value first)
    budget_ratio: float  # confirmation budget / study budget
    seeds: int
    finished: int
    expected: int
    rank_correlation: float | None  # Spearman, study order vs confirmed order
    text: str


def final_value(t: FrozenTrial) -> float | None:
    return float(t.value) if t.state == TrialState.COMPLETE and t.value is not None else None


def confirmed_results(
    source: optuna.Study, companion: optuna.Study, value_of: Callable[[FrozenTrial], float | None] = final_value
) -> list[Confirmed]:
    """Each configuration's values over its seeds; ``value_of`` reads one companion trial (its final
    value by default, a rung's score for a ladder)."""
    by_source = {t.number: t for t in source.get_trials(deepcopy=False)}
    values: dict[int, list[float]] = {}
    for t in companion.get_trials(deepcopy=False):
        number = TrialRecord.of(t).source_trial
        if number is None:
            continue
        values.setdefault(number, [])
        value = value_of(t)
        if value is not None and math.isfinite(value):
            values[number].append(value)
    out = [
        Confirmed(n, float(by_source[n].value or math.nan), TrialRecord.of(by_source[n]).baseline, v)
        for n, v in values.items()
        if n in by_source
    ]
    return sorted(out, key=lambda c: c.study_value)


def verdict(source: optuna.Study, companion: optuna.Study) -> Verdict:
    configs = confirmed_results(source, companion)
    spec, own = require_spec(companion), require_spec(source)
    ratio = spec.train.kimg / own.train.kimg
    trials = companion.get_trials(deepcopy=False)
    finished = sum(1 for t in trials if t.state.is_finished())
    seeds = len(candidates(spec.search["seed"])) if "seed" in spec.search else 1
    scored = [c for c in configs if c.values]
    rho = None
    if len(scored) >= 3:
        rho = float(spearmanr([c.study_value for c in scored], [c.mean for c in scored]).statistic)
    return Verdict(configs, ratio, seeds, finished, len(configs) * seeds, rho, reading(scored, ratio))


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
    baseline = next((c for c in scored if c.baseline), None)
    if baseline is not None and baseline is not best:
        if within_two_standard_errors(baseline, best):
            text += f" The baseline (trial {baseline.trial}, {seed_mean_text(baseline)}) is tied with the best."
        else:
            gain = baseline.mean - best.mean
            text += f" The best beats the baseline (trial {baseline.trial}, {seed_mean_text(baseline)}) by {gain:.3g}."
    return text


def seed_mean_text(c: Confirmed) -> str:
    return f"{c.mean:.3g} ± {c.spread:.2g} over {len(c.values)} seed{'s' if len(c.values) != 1 else ''}"
