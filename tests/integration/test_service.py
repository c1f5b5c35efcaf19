"""The service end to end: real PostgreSQL, real worker processes, real training on digits."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume, progress
from hpo.service.urls import resolve_url
from hpo.spec.loading import load_spec
from tests.pg import PASSWORD
from tests.service_helpers import hpo, start_worker, write_spec


def launch(spec: Path, url: str, folder: Path) -> optuna.Study:
    result = hpo("launch", str(spec), "--workers", "0", "--detach", "--skip-doctor", url=url, cwd=folder)
    assert result.returncode == 0, result.stderr
    assert PASSWORD not in result.stdout + result.stderr
    return optuna.load_study(study_name=load_spec(spec).study.name, storage=open_storage(resolve_url(url)))


def finish(procs: list[subprocess.Popen[str]], timeout: float = 600) -> list[str]:
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-3000:]
        assert PASSWORD not in out + err
        outputs.append(err)
    return outputs


def test_four_workers_on_one_study_finish_exactly_n_trials(pg_url: str, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, study={"name": "four", "n_trials": 7})
    study = launch(spec, pg_url, tmp_path)
    finish([start_worker(pg_url, tmp_path) for _ in range(4)])
    trials = study.get_trials()
    assert len(trials) == 7
    assert {t.state for t in trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    assert progress(study, 7).done


def test_killed_worker_trial_is_failed_by_heartbeat_and_resumed_from_its_checkpoint(
    pg_url: str, tmp_path: Path
) -> None:
    spec = write_spec(
        tmp_path,
        study={"name": "killed", "n_trials": 1},
        train={"kimg": 6, "num_evals": 6},
        search={"lr": {"type": "float", "low": 1e-3, "high": 2e-3}},
    )
    study = launch(spec, pg_url, tmp_path)
    first = start_worker(pg_url, tmp_path)
    checkpoints = tmp_path / "artifacts" / "checkpoints" / "killed"
    deadline = time.monotonic() + 240
    while not (checkpoints / "trial-0.pt").exists() or not study.get_trials()[0].intermediate_values:
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.2)
    time.sleep(1.0)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    (log,) = finish([start_worker(pg_url, tmp_path)])
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert trials[1].system_attrs["failed_trial"] == 0 and trials[1].params == trials[0].params
    assert "resumed from" in log and "at step 0" not in log
    assert sorted(trials[1].intermediate_values) == [1, 2, 3, 4, 5, 6]  # replayed ones reported again


def test_sigterm_fails_the_running_trial_for_retry_and_exits_cleanly(pg_url: str, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, study={"name": "term", "n_trials": 1}, train={"kimg": 6, "num_evals": 6})
    study = launch(spec, pg_url, tmp_path)
    worker = start_worker(pg_url, tmp_path)
    deadline = time.monotonic() + 240
    while not study.get_trials() or not study.get_trials()[0].intermediate_values:
        assert time.monotonic() < deadline and worker.poll() is None
        time.sleep(0.2)
    worker.send_signal(signal.SIGTERM)
    worker.send_signal(signal.SIGTERM)  # a --per-gpu child under Slurm gets one from Slurm, one from its parent
    finish([worker], timeout=120)
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[0].user_attrs["fail_reason"] == "worker_stopped"
    finish([start_worker(pg_url, tmp_path)])
    assert study.get_trials()[1].state == TrialState.COMPLETE


def test_a_learning_rate_too_small_to_learn_is_pruned_by_the_median(pg_url: str, tmp_path: Path) -> None:
    """lr 1e-7 learns nothing in 1.6 kimg and finite: its validation lags the three baselines' median at
    an evaluation point, and the median pruner (not the NaN or divergence guards) stops it there."""
    good = {"batch_size": 16, "timesteps": 50, "schedule": "linear", "guidance_scale": 1.0, "steps": 4}
    spec = write_spec(
        tmp_path,
        study={"name": "badlr", "n_trials": 4},
        train={"kimg": 1.6, "num_evals": 4, "grad_clip": 0.0},
        search={
            **{k: v for k, v in load_spec(write_spec(tmp_path, "base.yaml")).to_dict()["search"].items()},
            "lr": {"type": "float", "low": 1e-7, "high": 1e-2, "log": True},
        },
        baselines=[{**good, "lr": 1e-3}, {**good, "lr": 2e-3}, {**good, "lr": 1.5e-3}, {**good, "lr": 1e-7}],
        pruner={"name": "median", "startup_trials": 3, "warmup_evals": 0},
    )
    study = launch(spec, pg_url, tmp_path)
    finish([start_worker(pg_url, tmp_path)])
    trials = study.get_trials()
    assert [t.state for t in trials[:3]] == [TrialState.COMPLETE] * 3
    assert trials[3].state == TrialState.PRUNED
    assert trials[3].user_attrs["fail_reason"] == "pruned_by_median", trials[3].user_attrs
    assert trials[3].user_attrs["stopped_at_kimg"] < 1.6
    checkpoints = tmp_path / "artifacts" / "checkpoints" / "badlr"
    assert not list(checkpoints.glob("*.pt"))  # finished and pruned trials keep only their artifacts


def test_two_local_workers_share_the_embedded_database_without_locking(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    spec = write_spec(tmp_path, study={"name": "local", "n_trials": 6})
    study = launch(spec, url, tmp_path)
    logs = finish([start_worker(url, tmp_path) for _ in range(2)])
    assert not any("database is locked" in log for log in logs)
    assert len(study.get_trials()) == 6 and progress(study, 6).done


def test_relaunch_resumes_and_a_changed_spec_is_refused(pg_url: str, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, study={"name": "again", "n_trials": 2})
    launch(spec, pg_url, tmp_path)
    again = hpo("launch", str(spec), "--workers", "0", "--detach", "--skip-doctor", url=pg_url, cwd=tmp_path)
    assert again.returncode == 0 and "resuming study 'again'" in again.stdout
    changed = write_spec(tmp_path, "changed.yaml", study={"name": "again", "n_trials": 2}, train={"kimg": 1.2})
    refused = hpo("launch", str(changed), "--workers", "0", "--detach", "--skip-doctor", url=pg_url, cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "changed: train.kimg" in refused.stderr
    assert "--name NAME" in refused.stderr and PASSWORD not in refused.stderr
    renamed = hpo(
        "launch",
        str(changed),
        "--workers",
        "0",
        "--detach",
        "--name",
        "again2",
        "--skip-doctor",
        url=pg_url,
        cwd=tmp_path,
    )
    assert renamed.returncode == 0 and "created study 'again2'" in renamed.stdout


def test_status_lists_trials_and_never_shows_the_password(pg_url: str, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, study={"name": "shown", "n_trials": 1})
    launch(spec, pg_url, tmp_path)
    finish([start_worker(pg_url, tmp_path)])
    status = hpo("status", "shown", url=pg_url)
    assert status.returncode == 0 and "1/1 finished" in status.stdout and PASSWORD not in status.stdout
    wrong = hpo("status", url=pg_url.replace(PASSWORD, PASSWORD + "-wrong"))
    assert wrong.returncode == 2 and "cannot open storage" in wrong.stderr
    assert PASSWORD not in wrong.stderr and "***" in wrong.stderr


def test_create_or_resume_enqueues_baselines_once(pg_url: str, tmp_path: Path) -> None:
    base = {"lr": 1e-3, "batch_size": 16, "timesteps": 50, "schedule": "linear", "guidance_scale": 1.0, "steps": 4}
    spec = load_spec(write_spec(tmp_path, baselines=[base]))
    storage = open_storage(resolve_url(pg_url))
    _study, created = create_or_resume(spec, storage)
    again, created_again = create_or_resume(spec, storage)
    assert created and not created_again
    waiting = again.get_trials(states=(TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].system_attrs["fixed_params"] == base
    assert waiting[0].user_attrs["baseline"] is True
