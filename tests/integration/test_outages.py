"""Database outages cost nothing: live trials on a real PostgreSQL ride out a fast restart, an
immediate restart and a 45 s stop with zero retries and zero duplicate training; a dead worker's
trial is failed within the grace period even while every other worker is busy; and a worker whose
trial was failed as stale stops training it at once and writes no checkpoint after."""

from __future__ import annotations

import functools
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError

from hpo.service.optuna_internals import trial_id
from hpo.service.urls import resolve_url
from tests.pg import PASSWORD, PgServer
from tests.service_helpers import hpo, start_worker, storage_of, write_spec

LONG = {"kimg": 4.8, "num_evals": 6, "batch_size": 16}  # ~300 steps: long enough to be mid-trial
ONE = {"lr": {"type": "float", "low": 1e-3, "high": 2e-3}}


def launch(
    tmp_path: Path, url: str, name: str, n_trials: int, train: dict[str, Any] | None = None, **study: object
) -> optuna.Study:
    spec = write_spec(
        tmp_path,
        study={"name": name, "n_trials": n_trials, "heartbeat_interval": 1, "grace_period": 4, **study},
        train=train or LONG,
        search=ONE,
        sampling={"guidance_scale": 1.0, "steps": 4},
    )
    done = hpo("launch", str(spec), "--workers", "0", "--detach", "--skip-doctor", url=url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    from hpo.service.storage import open_storage
    from hpo.service.urls import resolve_url

    return optuna.load_study(study_name=name, storage=open_storage(resolve_url(url)))


def wait_for(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def running_with_reports(study: optuna.Study, n: int) -> bool:
    trials = study.get_trials()
    return sum(1 for t in trials if t.state == TrialState.RUNNING and t.intermediate_values) >= n


def finish(workers: list[subprocess.Popen[str]], timeout: float = 400) -> str:
    logs = ""
    for w in workers:
        _out, err = w.communicate(timeout=timeout)
        assert w.returncode == 0, err[-3000:]
        logs += err
    assert PASSWORD not in logs
    return logs


@pytest.mark.parametrize("outage", ["restart -m fast", "restart -m immediate", "stop 45 s"])
def test_live_trials_survive_a_database_outage_with_no_retry_and_no_duplicate_training(
    pg_server: PgServer | None, pg_url: str, tmp_path: Path, outage: str
) -> None:
    if pg_server is None:
        pytest.skip("needs the throwaway server to restart it")
    study = launch(tmp_path, pg_url, "outage", 2)
    workers = [start_worker(pg_url, tmp_path) for _ in range(2)]
    wait_for(lambda: running_with_reports(study, 2), 240, "two live trials")
    if outage == "stop 45 s":
        pg_server.pg_ctl("stop", "-m", "fast")
        time.sleep(45)
        pg_server.pg_ctl("start")
    else:
        pg_server.pg_ctl("restart", "-m", outage.split()[-1])
    logs = finish(workers)
    trials = study.get_trials()
    states = [(t.state.name, t.user_attrs.get("fail_reason"), t.user_attrs.get("error")) for t in trials]
    assert len(trials) == 2 and {t.state for t in trials} == {TrialState.COMPLETE}, f"{states}\n{logs[-8000:]}"
    assert not any("failed_trial" in t.system_attrs for t in trials)  # zero retries spent
    assert "resumed from" not in logs and "failed as stale" not in logs  # zero duplicate training
    assert "database connection lost" in logs  # the fault is in the log, in words, even when nothing failed
    assert "Traceback" not in logs


def test_a_dead_workers_trial_is_failed_within_the_grace_period_while_the_others_are_busy(
    pg_url: str, tmp_path: Path
) -> None:
    # ~1 000 steps: the other worker must still be training when the dead trial is failed (with
    # ~300 steps an idle machine finished it inside the 8 s window and the check had nothing to see)
    study = launch(tmp_path, pg_url, "reaped", 2, train={**LONG, "kimg": 16.0})
    workers = [start_worker(pg_url, tmp_path) for _ in range(2)]
    wait_for(lambda: running_with_reports(study, 2), 240, "two live trials")
    workers[0].send_signal(signal.SIGKILL)
    workers[0].communicate()
    killed_at = time.monotonic()
    wait_for(lambda: any(t.state == TrialState.FAIL for t in study.get_trials()), 60, "the dead trial to be failed")
    failed_after = time.monotonic() - killed_at
    busy = [t for t in study.get_trials() if t.state == TrialState.RUNNING]
    assert failed_after <= 4 + 1 + 3, failed_after  # grace + one heartbeat interval + polling slack
    assert busy, "the other worker was still busy with its own trial: no one asked for a new trial"
    finish(workers[1:])
    states = [t.state for t in study.get_trials()]
    assert states.count(TrialState.FAIL) == 1 and states.count(TrialState.COMPLETE) == 2  # the retry ran too


def test_a_worker_whose_trial_was_failed_as_stale_stops_at_once_and_writes_no_checkpoint(
    pg_url: str, tmp_path: Path
) -> None:
    study = launch(tmp_path, pg_url, "stolen", 1, max_retries=0)  # no retry to run (service/test_orphaned_retries.py)
    worker = start_worker(pg_url, tmp_path)
    wait_for(lambda: running_with_reports(study, 1), 240, "a live trial")
    (trial,) = study.get_trials()
    checkpoint = tmp_path / "artifacts" / "checkpoints" / "stolen" / "trial-0.pt"
    storage_of(study).set_trial_state_values(trial_id(trial), TrialState.FAIL)  # as another worker failing it stale
    failed_at = time.time()
    logs = finish([worker])
    assert "is FAIL while this worker runs it; stopping it" in logs and "its retry takes over" in logs
    assert checkpoint.stat().st_mtime <= failed_at + 0.5  # nothing written after it was failed
    assert len(study.get_trials()) == 1  # no retry: none is left (with one left, the next worker queues it)


@pytest.mark.parametrize("when", ["just before an evaluation report", "just after an evaluation report"])
def test_a_trial_failed_between_two_heartbeats_stops_with_no_later_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """The races the subprocess test above cannot pin down, with heartbeats too rare to help:
    before a report, Optuna refuses the report; after one, the next checkpoint save asks the
    database first. Either way the worker stops the same way and writes nothing after."""
    from hpo.service.objective import PointHooks, run_objective
    from hpo.service.storage import open_storage
    from hpo.service.study import create_or_resume
    from hpo.service.worker import Worker, WorkerOptions
    from hpo.spec.loading import load_spec

    spec = write_spec(
        tmp_path,
        study={"name": "raced", "n_trials": 1, "heartbeat_interval": 60, "grace_period": 120, "max_retries": 0},
        train={"kimg": 0.8, "num_evals": 4, "batch_size": 16},
        search=ONE,
        sampling={"guidance_scale": 1.0, "steps": 4},
    )
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    study, _ = create_or_resume(load_spec(spec), open_storage(url))
    failed_at = [float("inf")]

    def fail_it(trial, point, stage: str) -> None:  # type: ignore[no-untyped-def]  # as another worker failing it stale
        if point.index == 1 and stage in when:
            storage_of(study).set_trial_state_values(trial_id(trial), TrialState.FAIL)
            failed_at[0] = time.time()

    hooks = PointHooks(before=lambda t, p: fail_it(t, p, "before"), after=lambda t, p: fail_it(t, p, "after"))
    opts = WorkerOptions(url=url, study="raced", exit_when_idle=True, artifact_dir=tmp_path / "art", poll_seconds=0.1)
    with caplog.at_level(logging.INFO):
        assert Worker(opts, objective=functools.partial(run_objective, hooks=hooks)).serve() == 0
    assert "is FAIL while this worker runs it; stopping it" in caplog.text and "its retry takes over" in caplog.text
    ours = [r for r in caplog.records if r.name.startswith("hpo")]
    assert not any(r.exc_info for r in ours) and "trial 0 failed" not in caplog.text  # not logged as an error
    (trial,) = study.get_trials()
    assert trial.state == TrialState.FAIL and "fail_reason" not in trial.user_attrs
    assert sorted(trial.intermediate_values) == ([] if "before" in when else [1])  # points count from 1
    checkpoint = tmp_path / "art" / "checkpoints" / "raced" / "trial-0.pt"
    assert checkpoint.stat().st_mtime <= failed_at[0]  # kept for the retry, and nothing written after the fail


class DropNextStatements:
    """The next ``left`` statements fail as on a connection the server just closed."""

    def __init__(self, engine: Any) -> None:
        self.left = 0
        event.listen(engine, "before_cursor_execute", self.maybe_drop)

    def maybe_drop(self, _conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if self.left > 0:
            self.left -= 1
            raise OperationalError(statement, params, Exception("server closed the connection unexpectedly"))


def next_step(trial: optuna.Trial) -> int:
    return len(trial.storage.get_trial(trial_id(trial)).intermediate_values)


STUDY_CALLS: dict[str, Callable[[optuna.Study, optuna.Trial], object]] = {
    "get_trials": lambda study, _: len(study.get_trials()),
    "best_trial": lambda study, _: study.best_trial.number,
    "user_attrs": lambda study, _: study.user_attrs["k"],
    "report": lambda _, trial: trial.report(1.0, step=next_step(trial)),
    "should_prune": lambda _, trial: trial.should_prune(),
    "set_user_attr": lambda _, trial: trial.set_user_attr("k", 1),
    "suggest": lambda _, trial: trial.suggest_categorical(f"c{len(trial.params)}", ["a"]),  # a new name each call
    "stale check": lambda study, _: optuna.storages.fail_stale_trials(study),  # after the fault: none judged
}


@pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")  # ask/tell outside optimize, on purpose
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize("call", list(STUDY_CALLS))
def test_every_call_a_running_trial_makes_rides_out_a_dropped_connection(tmp_path: Path, call: str) -> None:
    """Optuna's cached study reads through private storage methods; a pruning check that met a
    restart failed its trial (found by looping the restart test above)."""
    from hpo.service.storage import Heartbeat, open_storage

    storage = open_storage(f"sqlite:///{tmp_path / 'hpo.db'}", Heartbeat(30, 60, 1), outage_seconds=30)
    study = optuna.create_study(study_name="s", storage=storage, pruner=optuna.pruners.MedianPruner(0, 0))
    study.set_user_attr("k", "v")
    for value in (1.0, 2.0):
        done = study.ask()
        done.report(value, step=3)
        study.tell(done, value)
    trial = study.ask()
    expected = STUDY_CALLS[call](study, trial)
    drop = DropNextStatements(storage.engine)
    drop.left = 2
    assert STUDY_CALLS[call](study, trial) == expected
    assert drop.left < 2  # the fault was met, and ridden out


def test_a_worker_process_holds_a_few_named_connections_while_it_trains(pg_url: str, tmp_path: Path) -> None:
    """What docs/operations.md's sizing of max_connections rests on: the connections one worker process holds
    on PostgreSQL through a trial (pg_stat_activity, sampled every 0.2 s, by application name)."""
    study = launch(tmp_path, pg_url, "connections", 1)
    worker = start_worker(pg_url, tmp_path)
    from hpo.service.storage import open_storage
    from hpo.service.urls import resolve_url

    admin = open_storage(resolve_url(pg_url)).engine
    seen: list[int] = []
    while worker.poll() is None:
        with admin.connect() as conn:
            count = conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"),
                {"name": f"hpo-{worker.pid}"},
            ).scalar()
        seen.append(int(count or 0))
        time.sleep(0.2)
    finish([worker])
    assert study.get_trials()[0].state == TrialState.COMPLETE
    print(f"connections held by one worker process: max {max(seen)}, samples {len(seen)}")
    assert 1 <= max(seen) <= 5, seen  # docs/operations.md measured at most 4 per worker process


OPEN_AT = """
import sys, time
from hpo.service.storage import open_storage
from hpo.service.urls import resolve_url
url = resolve_url(sys.argv[1])
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # every process opens at the same instant
open_storage(url)
"""


def test_processes_opening_a_new_database_at_once_all_get_its_schema(pg_url: str) -> None:
    """A worker, the dashboard and `hpo launch` started together on an empty database (compose's
    first `up`): each creates Optuna's tables, and the slower CREATE TABLE meets the other's."""
    at = time.time() + 8  # after every child's imports
    children = [subprocess.Popen([sys.executable, "-c", OPEN_AT, pg_url, str(at)], stderr=subprocess.PIPE, text=True)
                for _ in range(6)]  # fmt: skip
    errors = [child.communicate(timeout=120)[1] for child in children]
    assert [child.returncode for child in children] == [0] * 6, "\n".join(e[-3000:] for e in errors if e)
    assert optuna.get_all_study_summaries(resolve_url(pg_url)) == []  # one working schema, nothing in it
