"""SIGTERM stops a worker wherever it lands. Raised in Optuna's bookkeeping after the objective
returned (``tell``), the stop left ``_run_trial`` with ``UnboundLocalError``, the trial RUNNING
until the reaper failed it, and a traceback in the worker's log (found by the Slurm test's
``scancel``). The stop is now raised only inside the objective: one that lands before it is
raised when the objective starts, one that lands after it ends the worker once the trial is told."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.study import _optimize
from optuna.trial import TrialState

from hpo.service.context import StudyContext
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume
from hpo.service.trials import fail_reason, retry_history
from hpo.service.worker import Worker, WorkerOptions
from hpo.spec.loading import load_spec
from tests.service_helpers import write_spec


def sigterm_self() -> None:
    """Python runs the handler at the next bytecode of this (the main) thread."""
    os.kill(os.getpid(), signal.SIGTERM)


def serve_one(
    tmp_path: Path, objective: Callable[..., float], caplog: pytest.LogCaptureFixture, *, completed: int
) -> optuna.Study:
    spec = write_spec(tmp_path, study={"name": "stop", "n_trials": 2, "max_retries": 2})
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    study, _ = create_or_resume(load_spec(spec), open_storage(url))
    opts = WorkerOptions(url=url, study="stop", exit_when_idle=True, artifact_dir=tmp_path / "art", poll_seconds=0.1)
    with caplog.at_level(logging.INFO, logger="hpo.worker"):
        assert Worker(opts, objective=objective).serve() == completed
    return study


def finished_at_once(trial: optuna.Trial, ctx: StudyContext, release: Any) -> float:
    release()
    return 1.0


def test_a_stop_that_lands_in_optunas_tell_lets_the_trial_complete_and_exits_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_tell = _optimize._tell_with_warning

    def tell_under_sigterm(**kwargs: Any) -> Any:
        sigterm_self()
        return real_tell(**kwargs)

    monkeypatch.setattr(_optimize, "_tell_with_warning", tell_under_sigterm)
    study = serve_one(tmp_path, finished_at_once, caplog, completed=1)
    assert [t.state for t in study.get_trials()] == [TrialState.COMPLETE]  # told in full, no retry needed
    assert "stopped by SIGTERM between trials" in caplog.text
    assert not [r for r in caplog.records if r.exc_info]  # no traceback: Optuna logged no error


def test_a_stop_that_lands_before_the_objective_fails_the_trial_and_queues_its_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_ask = optuna.Study.ask
    ran: list[int] = []

    def ask_under_sigterm(self: optuna.Study, *args: Any, **kwargs: Any) -> optuna.Trial:
        trial = real_ask(self, *args, **kwargs)
        sigterm_self()  # the trial is RUNNING in storage; the objective has not started
        return trial

    def objective(trial: optuna.Trial, ctx: StudyContext, release: Any) -> float:
        ran.append(trial.number)
        return finished_at_once(trial, ctx, release)

    monkeypatch.setattr(optuna.Study, "ask", ask_under_sigterm)
    study = serve_one(tmp_path, objective, caplog, completed=0)
    first, retry = study.get_trials()
    assert not ran  # the objective raised the stop before the user's code ran
    assert first.state == TrialState.FAIL and fail_reason(first) == "worker_stopped"
    assert retry.state == TrialState.WAITING and retry_history(retry) == [0]
    assert "trial 0 ended: fail, worker_stopped after 0 s; stopped by SIGTERM, queued for retry" in caplog.text


def test_a_stop_inside_the_objective_fails_the_trial_and_queues_its_retry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def objective(trial: optuna.Trial, ctx: StudyContext, release: Any) -> float:
        release()
        sigterm_self()
        raise AssertionError("the stop was not raised inside the objective")

    study = serve_one(tmp_path, objective, caplog, completed=0)
    first, retry = study.get_trials()
    assert first.state == TrialState.FAIL and fail_reason(first) == "worker_stopped"
    assert retry.state == TrialState.WAITING and retry_history(retry) == [0]
