"""A trial whose worker died between creating it and its first heartbeat (a SIGKILL in that window,
seen in the crowd test) has no heartbeat for Optuna's stale check to find: it is failed once it has
been seen without one for the grace period, and retried like any stale trial."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hpo.service.storage import Heartbeat, open_storage


def fail_stale(study: optuna.Study) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")  # ask() here
def test_a_running_trial_that_never_beat_is_failed_after_the_grace_period_and_retried(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'hpo.db'}", Heartbeat(interval=1, grace_period=1, max_retries=2))
    study = optuna.create_study(study_name="s", storage=storage)
    orphan = study.ask()  # RUNNING, and no heartbeat: its worker died right here
    beating = study.ask()
    storage.record_heartbeat(beating._trial_id)

    fail_stale(study)  # first seen without a heartbeat: not yet stale
    assert [t.state for t in study.get_trials()] == [TrialState.RUNNING, TrialState.RUNNING]

    time.sleep(1.3)
    storage.record_heartbeat(beating._trial_id)  # the live one keeps beating
    fail_stale(study)
    trials = study.get_trials()
    assert trials[orphan.number].state == TrialState.FAIL
    assert trials[beating.number].state == TrialState.RUNNING
    (retry,) = [t for t in trials if t.state == TrialState.WAITING]
    assert retry.system_attrs["failed_trial"] == orphan.number


@pytest.mark.parametrize("stored", ["pruned_by_median", "nan_loss", "diverged", "invalid_schedule"])
def test_a_trial_killed_between_its_pruning_decision_and_the_tell_reads_as_worker_lost(stored: str) -> None:
    """The objective writes a pruned ending, then raises TrialPruned; a SIGKILL in between leaves the
    trial RUNNING with that reason until the heartbeat check fails it (seen once in the crowd's chaos)."""
    from hpo.service.trials import fail_reason

    def trial(state: TrialState) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(state=state, user_attrs={"fail_reason": stored})

    assert fail_reason(trial(TrialState.FAIL)) == "worker_lost"  # and so it counts as awaiting its retry
    assert fail_reason(trial(TrialState.PRUNED)) == stored
    oom = optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={"fail_reason": "oom"})
    assert fail_reason(oom) == "oom"  # a failure's own reason stays
