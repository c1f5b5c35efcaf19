"""Failing a lost trial and queueing its retry are two writes. A worker SIGKILLed, or a database
restarted, between them left a failure with no retry, and the crowd's chaos test ended at 99 of 100
trials. Workers now write both under the start lock, and a worker that finds such an orphan under
that lock queues its retry; a worker started while the server restarts waits for it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import BaseDistribution, FloatDistribution
from optuna.trial import TrialState
from sqlalchemy.exc import OperationalError

from hpo.errors import HpoError
from hpo.service import storage as storage_module
from hpo.service.context import StudyContext
from hpo.service.optuna_internals import frozen
from hpo.service.storage import Heartbeat, open_storage
from hpo.service.study import create_or_resume, orphaned_failures, requeue_orphans
from hpo.service.trials import mark_ended, retry_history
from hpo.service.worker import Worker, WorkerOptions
from hpo.spec.loading import load_spec
from tests.service_helpers import write_spec

LR: dict[str, BaseDistribution] = {"lr": FloatDistribution(1e-4, 1e-2, log=True)}


def lost_trial(study: optuna.Study, reason: str | None = None) -> None:
    """A trial failed with no retry queued: its worker died between the two writes."""
    trial = study.ask(LR)
    if reason is not None:
        mark_ended(trial, reason)
    study.tell(trial, state=TrialState.FAIL)


def retries_of(study: optuna.Study, number: int) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials() if retry_history(t)[-1:] == [number]]


def test_a_lost_trial_whose_retry_was_never_queued_is_retried_by_the_next_worker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = write_spec(tmp_path, study={"name": "orphan", "n_trials": 2, "max_retries": 2})
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    study, _ = create_or_resume(load_spec(spec), open_storage(url))
    lost_trial(study)
    ran: list[tuple[int, dict[str, Any]]] = []

    def objective(trial: optuna.Trial, ctx: StudyContext, release: Any) -> float:
        release()
        ran.append((trial.number, dict(trial.params)))
        return 1.0

    opts = WorkerOptions(url=url, study="orphan", exit_when_idle=True, artifact_dir=tmp_path / "art", poll_seconds=0.1)
    with caplog.at_level(logging.WARNING):
        assert Worker(opts, objective=objective).serve() == 2
    assert "lost trial 0 has no retry queued" in caplog.text
    (retry,) = retries_of(study, 0)
    assert retry.state == TrialState.COMPLETE and retry.params == study.trials[0].params
    assert [n for n, _ in ran] == [retry.number, 2]  # the retry first, then the study's second trial
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")
def test_an_orphan_is_queued_once_and_only_lost_or_stopped_trials_with_retries_left_are(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'hpo.db'}", Heartbeat(interval=30, grace_period=60, max_retries=1))
    study = optuna.create_study(study_name="s", storage=storage)
    lost_trial(study)  # 0: lost, no reason written
    lost_trial(study, "worker_stopped")  # 1: SIGTERM, then killed before its retry was queued
    lost_trial(study, "error")  # 2: its own error: never retried
    assert [t.number for t in orphaned_failures(study.get_trials(), max_retries=1)] == [0, 1]
    requeue_orphans(study, storage, max_retries=1)
    requeue_orphans(study, storage, max_retries=1)  # the next worker under the lock finds nothing to do
    assert len(retries_of(study, 0)) == len(retries_of(study, 1)) == 1 and not retries_of(study, 2)
    again = study.ask(LR)  # takes the queued retry of trial 0
    assert retry_history(frozen(again)) == [0]
    study.tell(again, state=TrialState.FAIL)  # lost as well: trial 0's one retry is spent
    assert again.number not in [t.number for t in orphaned_failures(study.get_trials(), max_retries=1)]


def flaky_open(fails: list[str]) -> Any:
    real = storage_module.ResilientStorage

    def construct(*args: Any, **kwargs: Any) -> Any:
        if fails:
            raise OperationalError("SELECT 1", {}, Exception(fails.pop(0)))
        return real(*args, **kwargs)

    return construct


def test_a_worker_started_while_the_server_restarts_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    restarting = ["server closed the connection unexpectedly", "FATAL:  the database system is starting up"]
    monkeypatch.setattr(storage_module, "ResilientStorage", flaky_open(restarting))
    with caplog.at_level(logging.WARNING):
        assert open_storage(url, wait_for_restart=True) is not None
    assert not restarting and caplog.text.count("database restarting (server closed the connection") == 1

    monkeypatch.setattr(storage_module, "ResilientStorage", flaky_open(["server closed the connection unexpectedly"]))
    with pytest.raises(HpoError, match=r"cannot open storage .*server closed the connection unexpectedly"):
        open_storage(url)  # a command a person typed says at once what the server said

    wrong = ['password authentication failed for user "hpo"']
    monkeypatch.setattr(storage_module, "ResilientStorage", flaky_open(wrong))
    with pytest.raises(HpoError, match="password authentication failed"):
        open_storage(url, wait_for_restart=True)  # waiting does not mend a wrong password
