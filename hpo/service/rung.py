"""``pruner: rung``'s decision: every trial pauses at one evaluation point (its checkpoint kept);
once all ``n_trials`` have reached it (or ended before it) and none is still running, queued or
awaiting a retry, the best ``keep`` by the pruning metric there are continued. A continuation is a
new trial with the paused one's parameters and attributes that resumes from the shared checkpoint
and trains to the end; the checkpoints of the others are removed. Workers take the decision under
the start lock, and it is idempotent: the same trials rank the same way, so a worker killed halfway
through queueing leaves the rest to the next one."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo.files import JsonObject
from hpo.records import CONTINUES_ATTR, TrialRecord
from hpo.service.pruning import rung_keep
from hpo.service.study import lacks_retry, retried_numbers
from hpo.service.trials import continued_numbers, is_carried, is_paused, is_retry, retry_history
from hpo.spec.spec import Spec

log = logging.getLogger("hpo.rung")


def ranked_at_rung(paused: Sequence[FrozenTrial], step: int) -> list[FrozenTrial]:
    """Best first by the pruning metric at the rung; ties by trial number (every worker agrees)."""
    return sorted(paused, key=lambda t: (t.intermediate_values.get(step, float("inf")), t.number))


def chosen_at_rung(spec: Spec, paused: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The paused trials the rung continues, best first: ``rung_keep`` of them by the metric at the
    rung. A baseline ranks like any trial: kept in one of those places whatever its rank, it cost
    the 10-trial replay 0.215 seed sd of regret against 0.086 (digits, 300 draws; docs/benchmarks.md)."""
    return ranked_at_rung(paused, spec.pruner.min_resource)[: rung_keep(spec)]


def rung_reached(trials: Sequence[FrozenTrial], n_trials: int, max_retries: int) -> bool:
    """Every one of the ``n_trials`` has reached the rung or ended before it: nothing but
    continuations runs or waits, and no lost trial waits for its retry."""
    first = [t for t in trials if TrialRecord.of(t).continues is None]
    if sum(1 for t in first if not is_retry(t)) < n_trials:
        return False
    if any(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in first):
        return False
    retried = retried_numbers(first)
    return not any(lacks_retry(t, retried, max_retries) for t in first)


def split_at_rung(spec: Spec, trials: Sequence[FrozenTrial]) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
    """(the paused trials the rung continues, those it stops); both empty before every trial has
    reached the rung, and under another pruner."""
    own = [t for t in trials if not is_carried(t)]
    if not spec.pruner.pauses or not rung_reached(own, spec.study.n_trials, spec.study.max_retries):
        return [], []
    paused = [t for t in own if is_paused(t)]
    chosen = chosen_at_rung(spec, paused)
    return chosen, [t for t in paused if t not in chosen]


def to_continue(spec: Spec, trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The paused trials the rung continues that have no continuation yet."""
    done = continued_numbers(trials)
    return [t for t in split_at_rung(spec, trials)[0] if t.number not in done]


def not_continued(spec: Spec, trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """Paused trials the decision left where they are (their checkpoints can go)."""
    return split_at_rung(spec, trials)[1]


def continue_trial(study: optuna.Study, paused: FrozenTrial) -> None:
    """Queue ``paused``'s continuation: its parameters and attributes (not how it ended), a retry
    history that ends with it, so it shares its checkpoint (``root_number``)."""
    system: JsonObject = {"failed_trial": paused.number, **paused.system_attrs}
    system["retry_history"] = [*retry_history(paused), paused.number]
    attrs = {**TrialRecord.of(paused).without_ending(), CONTINUES_ATTR: paused.number}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.add_trial(
            optuna.create_trial(
                state=TrialState.WAITING,
                params=paused.params,
                distributions=paused.distributions,
                user_attrs=attrs,
                system_attrs=system,
            )
        )


def decide(study: optuna.Study, spec: Spec, trials: Sequence[FrozenTrial]) -> list[int]:
    """Queue the continuations the rung owes (call with the start lock held); the paused numbers
    continued by this call."""
    chosen = to_continue(spec, trials)
    for t in chosen:
        continue_trial(study, t)
    if chosen:
        step = spec.pruner.min_resource
        log.info(
            "rung at evaluation point %d reached by all %d trials: continuing %s",
            step,
            spec.study.n_trials,
            ", ".join(f"{t.number} ({t.intermediate_values.get(step, float('nan')):.4g})" for t in chosen),
        )
    return [t.number for t in chosen]
