"""The trial bookkeeping every view shares, in-process on SQLite: why a trial ended (one writer that
knows every reason), what a retry inherits, when a study with a lost trial is done, and the score
noise pooled near the best."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from hpo.records import ENDING_ATTRS
from hpo.service.storage import open_storage
from hpo.service.study import RETRY_GRACE, progress
from hpo.service.trials import RetryStaleTrial, fail_reason, mark_ended, retried_numbers, root_number


def frozen(state: TrialState, value: float = 1.0, **attrs: object) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        state=state,
        params={"lr": 1e-3},
        distributions={"lr": FloatDistribution(1e-4, 1e-2, log=True)},
        value=value if state == TrialState.COMPLETE else None,
        user_attrs=dict(attrs),
    )


def test_every_finished_trial_that_did_not_complete_says_why() -> None:
    assert fail_reason(frozen(TrialState.COMPLETE, fail_reason="oom")) is None
    assert fail_reason(frozen(TrialState.FAIL)) == "worker_lost"  # nobody could write why: its worker died
    assert fail_reason(frozen(TrialState.PRUNED)) == "pruned_by_median"
    assert fail_reason(frozen(TrialState.PRUNED, fail_reason="nan_loss")) == "nan_loss"


def test_how_a_trial_ended_is_written_by_one_helper_that_knows_every_reason(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'x.db'}")
    trial = study.ask()
    mark_ended(trial, "diverged", detail="x" * 900, stopped_at_kimg=1.5)
    attrs = study.trials[0].user_attrs
    assert attrs == {"fail_reason": "diverged", "error": "x" * 500, "stopped_at_kimg": 1.5}
    with pytest.raises(ValueError, match="unknown fail reason 'diverge'"):
        mark_ended(trial, "diverge")


def test_a_retry_keeps_its_predecessors_work_but_not_how_it_ended(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'x.db'}")
    study = optuna.create_study(storage=storage, study_name="r")
    trial = study.ask({"lr": FloatDistribution(1e-4, 1e-2, log=True)})
    trial.set_user_attr("curve", {"1": {"kimg": 0.5, "val_rel": 0.9}})
    mark_ended(trial, "worker_stopped", stopped_at_kimg=0.5)
    study.tell(trial, state=TrialState.FAIL)
    RetryStaleTrial(max_retry=2)(study, study.trials[0])
    first, retry = study.get_trials()
    assert retry.state == TrialState.WAITING and retry.params == first.params
    assert "curve" in retry.user_attrs and not set(ENDING_ATTRS) & set(retry.user_attrs)
    assert root_number(retry) == root_number(first) == first.number
    assert retried_numbers(study.get_trials()) == {first.number: retry.number}


def test_a_trial_lost_moments_ago_keeps_its_study_open_until_its_retry_is_queued(tmp_path: Path) -> None:
    """Failing a stale trial and queueing its retry are two writes: a worker that looks in between
    must not call the study done (a flaky killed-worker test saw exactly that)."""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'x.db'}", study_name="lost")
    trial = study.ask({"lr": FloatDistribution(1e-4, 1e-2, log=True)})
    study.tell(trial, state=TrialState.FAIL)  # no reason written: its worker died, the reaper failed it
    lost = progress(study, 1, max_retries=2)
    assert lost.failed == 1 and lost.retrying == 1 and not lost.done
    assert progress(study, 1, max_retries=0).done  # no retry will come
    RetryStaleTrial(max_retry=2)(study, study.trials[0])
    queued = progress(study, 1, max_retries=2)
    assert queued.retrying == 0 and queued.waiting == 1 and not queued.done
    stopped = optuna.create_study(storage=f"sqlite:///{tmp_path / 'x.db'}", study_name="long-ago")
    old = stopped.ask({"lr": FloatDistribution(1e-4, 1e-2, log=True)})
    mark_ended(old, "worker_stopped")
    stopped.tell(old, state=TrialState.FAIL)
    later = datetime.now() + RETRY_GRACE
    assert progress(stopped, 1).retrying == 1 and progress(stopped, 1, now=later).done  # its retry never came
    failed = optuna.create_study(storage=f"sqlite:///{tmp_path / 'x.db'}", study_name="error")
    broken = failed.ask()
    mark_ended(broken, "error", detail="ValueError: x")
    failed.tell(broken, state=TrialState.FAIL)
    assert progress(failed, 1).done  # an error is not retried


def test_the_noise_near_the_best_ignores_a_baseline_far_above_it() -> None:
    """As on the quickstart: the baseline at 133 re-scored with sd 2.6, the best two (3.6 and 5.2)
    with sd 0.4: ties among the best are judged with 0.4, not with a pool that the baseline widens."""
    from hpo.analysis.noise import noise_of

    trials = [
        frozen(TrialState.COMPLETE, 132.7, fid_noise=2.56, baseline=True),
        frozen(TrialState.COMPLETE, 5.16, fid_noise=0.38),
        frozen(TrialState.COMPLETE, 3.56, fid_noise=0.40),
    ]
    noise = noise_of(trials)
    assert noise.pairs == 2 and noise.sd == pytest.approx(((0.38**2 + 0.40**2) / 2) ** 0.5)
    assert noise_of(trials[:1]).sd == pytest.approx(2.56)  # nothing near the best but itself
