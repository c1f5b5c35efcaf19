"""The pruner a study runs: Optuna's own, built from the spec, and a guard: while fewer than
``pruner.spare_until_complete`` trials are complete, a trial whose validation metric beats every
baseline's at the same evaluation point is not stopped (a configuration already better than what a
person would try by hand is worth finishing while the study has too few complete trials to rank
anything; measured in ``benchmarks/pruning_replay.py``, docs/benchmarks.md "Pruners").

``rung`` is no Optuna pruner: every trial pauses at one evaluation point (its checkpoint kept), and
once all ``n_trials`` have reached it the best ``keep`` there are continued from their checkpoints
(``service/rung.py``). It is the rule the replay's bound describes: it compares a trial with all
the others at that point before deciding, which no rule that decides trial by trial can."""

from __future__ import annotations

from collections.abc import Callable

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from hpo.records import TrialRecord
from hpo.spec.rules import eval_fractions, rung_continued
from hpo.spec.spec import PRUNER_NAMES, PrunerName, PrunerSettings, Spec


def baseline_value(study: optuna.Study, step: int) -> float | None:
    """The best validation metric any baseline of ``study`` reported at ``step`` (running ones too:
    with parallel workers the baseline may still be training)."""
    values = [
        t.intermediate_values[step]
        for t in study.get_trials(deepcopy=False)
        if TrialRecord.of(t).baseline and step in t.intermediate_values
    ]
    return min(values, default=None)


class SpareAheadOfBaseline(BasePruner):
    """``inner``'s decision, except that a trial ahead of the baseline at its last point is kept
    while the study has fewer than ``until`` complete trials."""

    def __init__(self, inner: BasePruner, until: int) -> None:
        self.inner, self.until = inner, until

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if not self.inner.prune(study, trial):
            return False
        step = trial.last_step
        if step is None or TrialRecord.of(trial).baseline:
            return True
        if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) >= self.until:
            return True
        mine, theirs = trial.intermediate_values[step], baseline_value(study, step)
        return theirs is None or not mine < theirs


class PauseAtRung(BasePruner):
    """Stops every trial at evaluation point ``step`` (the worker pauses it there, its checkpoint
    kept), except a continuation: a trial the rung's decision resumed, which trains to the end."""

    def __init__(self, step: int) -> None:
        self.step = step

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        return trial.last_step == self.step and TrialRecord.of(trial).continues is None


def rung_share(spec: Spec) -> float:
    """The share of a trial's budget trained when it reaches the rung."""
    return eval_fractions(spec.train.num_evals, spec.train.eval_spacing)[spec.pruner.min_resource - 1]


def rung_keep(spec: Spec) -> int:
    """Trials the rung continues (``rules.rung_continued``)."""
    return rung_continued(spec.study.n_trials, rung_share(spec), spec.pruner.keep)


def _percentile(p: PrunerSettings, percentile: float) -> BasePruner:
    # Optuna's earliest prune is at step == n_warmup_steps: warmup_evals points are never pruned.
    return optuna.pruners.PercentilePruner(
        percentile, n_startup_trials=p.startup_trials, n_warmup_steps=p.warmup_evals + 1, interval_steps=1
    )


# Every pruner a spec may name → how it is built from its settings and the evaluation points (K).
PRUNERS: dict[PrunerName, Callable[[PrunerSettings, int], BasePruner]] = {
    "median": lambda p, _: _percentile(p, 50.0),
    "percentile": lambda p, _: _percentile(p, p.percentile),
    "hyperband": lambda p, evals: optuna.pruners.HyperbandPruner(
        min_resource=p.min_resource, max_resource=evals, reduction_factor=p.reduction_factor
    ),
    "successive_halving": lambda p, _: optuna.pruners.SuccessiveHalvingPruner(
        min_resource=p.min_resource, reduction_factor=p.reduction_factor, min_early_stopping_rate=0
    ),
    "rung": lambda p, _: PauseAtRung(p.min_resource),
    "none": lambda p, _: optuna.pruners.NopPruner(),
}
assert set(PRUNERS) == set(PRUNER_NAMES), "every pruner name is built"


def make_pruner(spec: Spec) -> BasePruner:
    """Steps are evaluation indices 1..K (the budget's fixed fractions), shared by every trial. A pruner
    that stops trials spares one ahead of the baseline (``spare_until_complete``)."""
    p = spec.pruner
    pruner = PRUNERS[p.name](p, spec.train.num_evals)
    if p.pauses or not p.prunes or not p.spare_until_complete:
        return pruner
    return SpareAheadOfBaseline(pruner, p.spare_until_complete)
