"""A study's frontiers of quality against sampling cost, read from its complete trials' stored
sweeps (:mod:`hpo.analysis.frontier` does the arithmetic)."""

from __future__ import annotations

import optuna

from hpo.analysis.frontier import Frontier, trial_frontier
from hpo.records import StudyRecord, TrialRecord
from hpo.service.study import stored_spec
from hpo.service.trials import own_trials


def guided_twice(study: optuna.Study) -> bool:
    """Whether guidance costs two network passes: a conditional network on data with classes (a study
    not made by ``hpo launch`` stores no spec: taken as conditional, the default)."""
    data = StudyRecord.of(study).data
    spec = stored_spec(study)
    return (spec is None or spec.train.conditional) and (data is None or data.classes > 1)


def study_frontiers(study: optuna.Study) -> dict[int, Frontier]:
    """Trial number → its frontier, for every complete trial that stored a sweep."""
    conditional = guided_twice(study)
    found = ((t.number, frontier_of(t, conditional)) for t in own_trials(study, (optuna.trial.TrialState.COMPLETE,)))
    return {n: f for n, f in found if f is not None}


def frontier_of(trial: optuna.trial.FrozenTrial, conditional: bool) -> Frontier | None:
    """One trial's frontier (None when it stored no sweep); ``conditional``: :func:`guided_twice`."""
    record = TrialRecord.of(trial)
    scores = record.sweep
    metric = record.statistic.metric if record.statistic is not None else "FID"
    return trial_frontier(trial.number, scores, conditional=conditional, metric=metric) if scores else None
