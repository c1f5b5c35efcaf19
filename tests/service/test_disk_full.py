"""A full disk is the host's fault, not the trial's: the trial that met it goes back to the queue without
spending a retry, its worker stops with one line naming the disk, and the same worker started again
(space freed) finishes the study. Faults are injected where the writes happen (torch.save, SQLite);
tests/integration/test_full_disk.py makes a real small filesystem."""

from __future__ import annotations

import errno
import logging
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy.exc import OperationalError

from hpo.errors import HOST_FAULT_EXIT, DiskFull, HostFault, HpoError, disk_full_at, is_disk_full
from hpo.service import objective as objective_module
from hpo.service.db_errors import is_connection_error
from hpo.service.local import LocalWorker, check_some_complete, check_workers_finished
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume, progress
from hpo.service.trials import DISK_FULL, fail_reason, failed_attempts, retry_history
from hpo.service.worker import Worker, WorkerOptions
from hpo.spec.loading import load_spec
from hpo.training import trainer as trainer_module
from tests.service_helpers import write_spec

TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 6286912 vs 6286804"


def sqlite_full() -> OperationalError:
    return OperationalError("UPDATE trials", {}, sqlite3.OperationalError("database or disk is full"))


@pytest.mark.parametrize(
    "err",
    [
        OSError(errno.ENOSPC, "No space left on device"),  # PIL, TensorBoard, shutil
        OSError(errno.EDQUOT, "Disk quota exceeded"),
        RuntimeError(TORCH_FULL),  # torch.save's stream writer
        RuntimeError("PytorchStreamWriter failed writing file data/3: file write failed"),
        sqlite_full(),  # SQLAlchemy wrapping SQLite
        Exception('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "..." })'),
    ],
    ids=["enospc", "quota", "torch-pos", "torch-write", "sqlite", "safetensors"],
)
def test_every_library_s_way_of_saying_the_disk_is_full_is_recognised(err: Exception) -> None:
    assert is_disk_full(err)
    try:
        try:
            raise err
        except Exception as inner:
            raise ValueError("while saving the checkpoint") from inner
    except ValueError as outer:
        assert is_disk_full(outer)  # through the chain of causes


def test_other_errors_are_not_a_full_disk_and_a_full_sqlite_is_not_an_outage_to_wait_for() -> None:
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(RuntimeError("CUDA error: device-side assert triggered"))
    assert not is_disk_full(None)
    assert not is_connection_error(sqlite_full())  # retried for 600 s before: waiting does not mend it
    assert is_connection_error(OperationalError("SELECT 1", {}, Exception("server closed the connection")))


def test_the_line_names_the_disk_what_is_free_what_is_needed_and_the_fix(tmp_path: Path) -> None:
    err = disk_full_at(OSError(errno.ENOSPC, "No space", str(tmp_path / "ckpt.pt")), [], need=5 << 20)
    assert err.path == tmp_path
    text = str(err)
    assert f"the disk at {tmp_path} is full (" in text and "MB free" in text
    assert "the next write needs 5 MB" in text and text.endswith("free space there and run the same command")
    assert "\n" not in text
    fullest = disk_full_at(RuntimeError(TORCH_FULL), [tmp_path / "not-yet" / "made"])
    assert fullest.path == tmp_path / "not-yet" / "made"  # the only place given; its free space is its parent's


def serve(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> tuple[Worker, optuna.Study]:
    spec = load_spec(write_spec(tmp_path, study={"name": "full", "n_trials": 3, "max_retries": 0}))
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    study, _ = create_or_resume(spec, open_storage(url))
    opts = WorkerOptions(url=url, study="full", exit_when_idle=True, artifact_dir=tmp_path / "art", poll_seconds=0.1)
    worker = Worker(opts)
    with caplog.at_level(logging.INFO):
        worker.serve()
    return worker, study


def test_a_checkpoint_write_on_a_full_disk_sends_the_trial_back_unspent_and_stops_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def full(obj: object, path: Path) -> None:
        raise RuntimeError(TORCH_FULL)

    monkeypatch.setattr(trainer_module, "atomic_save", full)
    worker, study = serve(tmp_path, caplog)
    assert isinstance(worker.fault, DiskFull) and "needs" in str(worker.fault)
    first, retry = study.get_trials()  # the worker took no second trial
    assert first.state == TrialState.FAIL and fail_reason(first) == DISK_FULL
    assert retry.state == TrialState.WAITING and retry_history(retry) == [0]
    assert failed_attempts(retry) == 0  # with max_retries 0 it is still queued: a full disk spends no retry
    assert not [r for r in caplog.records if r.exc_info and r.name.startswith("hpo")]  # no traceback of ours
    assert "trial 0 went back to the queue: the disk at" in caplog.text

    monkeypatch.undo()  # space freed: the same worker, started again, finishes the study
    worker, study = serve(tmp_path, caplog)
    assert worker.fault is None
    p = progress(study, 3, max_retries=0)
    assert p.done and p.finished == 3 and p.failed == 0 and p.complete >= 1


def test_a_disk_too_small_for_the_checkpoints_is_said_before_any_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(objective_module, "trial_disk_bytes", lambda cfg, data: 1 << 60)
    trained: list[Any] = []
    monkeypatch.setattr(objective_module, "train_and_score", lambda *a, **k: trained.append(a))
    worker, study = serve(tmp_path, caplog)
    assert not trained
    assert worker.fault is not None and str(worker.fault).startswith(f"the disk at {tmp_path / 'art'} is full (")
    assert "this trial's checkpoints needs 1099511627776 MB" in str(worker.fault)
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL, TrialState.WAITING]


def test_hpo_worker_exits_75_with_the_disk_s_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.cli import hpo_in_process

    monkeypatch.setattr(objective_module, "trial_disk_bytes", lambda cfg, data: 1 << 60)
    spec = load_spec(write_spec(tmp_path, study={"name": "full", "n_trials": 2}))
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    create_or_resume(spec, open_storage(url))
    art = tmp_path / "art"
    result = hpo_in_process("worker", "--study", "full", "--exit-when-idle", "--gpus", "cpu", "--artifacts", str(art),
                            url=url, cwd=tmp_path)  # fmt: skip
    assert result.returncode == HOST_FAULT_EXIT
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: the disk at {art} is full (")
    assert "Traceback" not in result.stderr


def exited(code: int) -> LocalWorker:
    proc = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    proc.wait()
    return LocalWorker(proc, ["error: the disk at /art is full (0 MB free): free space there and run the same command"])


def test_launch_ends_non_zero_when_a_worker_stopped_on_the_disk_or_nothing_completed(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, study={"name": "ends", "n_trials": 2}))
    study, _ = create_or_resume(spec, open_storage(f"sqlite:///{tmp_path / 'hpo.db'}"))
    with pytest.raises(HostFault, match=r"^1 of 2 local worker\(s\) stopped \(0/2 trials finished\): the disk at /art"):
        check_workers_finished(study, spec.study, [exited(HOST_FAULT_EXIT), exited(0)])
    for _ in range(2):
        trial = study.ask()
        trial.set_user_attr("fail_reason", "nan_loss")
        study.tell(trial, state=TrialState.PRUNED)
    check_workers_finished(study, spec.study, [exited(0)])  # done: nothing to say
    with pytest.raises(HpoError, match=r"ended with no complete trial \(2 nan_loss\); `hpo status ends`"):
        check_some_complete(study, spec.study)


def test_a_study_launched_with_name_resumes_under_the_same_command(tmp_path: Path) -> None:
    from tests.cli import hpo_in_process

    spec = write_spec(tmp_path)
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    args = ["launch", str(spec), "--name", "renamed", "--detach", "--workers", "0", "--skip-doctor"]
    first = hpo_in_process(*args, url=url, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "created study 'renamed'" in first.stdout
    again = hpo_in_process(*args, url=url, cwd=tmp_path)
    assert again.returncode == 0, again.stderr  # was: "exists with a different spec (changed: study.name)"
    assert "resuming study 'renamed'" in again.stdout
    changed = write_spec(tmp_path, "changed.yaml", train={"kimg": 1.2})
    other = hpo_in_process("launch", str(changed), *args[2:], url=url, cwd=tmp_path)
    assert other.returncode == 2 and "changed: train.kimg" in other.stderr  # a real change is still refused


def test_hpo_train_on_a_disk_that_fills_mid_run_stops_in_one_line_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.cli import hpo_in_process

    spec = write_spec(tmp_path, train={"kimg": 0.8, "num_evals": 2})
    real_save, saves = trainer_module.atomic_save, []

    def fills_after_one(obj: object, path: Path) -> None:
        saves.append(path)
        if len(saves) > 1:
            raise RuntimeError(TORCH_FULL)
        real_save(obj, path)

    monkeypatch.setattr(trainer_module, "atomic_save", fills_after_one)
    out = tmp_path / "run"
    full = hpo_in_process("train", str(spec), "-o", str(out), "--threads", "1", cwd=tmp_path)
    assert full.returncode == HOST_FAULT_EXIT
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: the disk at {out} is full (") and "this run's checkpoints needs" in last
    assert (out / "checkpoint.pt").is_file()  # the first evaluation point's, kept
    monkeypatch.undo()
    again = hpo_in_process("train", str(spec), "-o", str(out), "--threads", "1", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "resumed from" in again.stderr


def test_a_tensorboard_file_that_cannot_be_written_is_closed_without_an_exit_hook_traceback(tmp_path: Path) -> None:
    from hpo.tracking.base import RunInfo
    from hpo.tracking.tensorboard import TensorBoardRun

    run = TensorBoardRun(tmp_path / "tb", RunInfo("s", 0, {}))
    (file_writer,) = run.writer.all_writers.values()
    events = file_writer.event_writer

    def full() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    events._ev_writer.flush = full
    with pytest.raises(OSError):
        run.close()
    assert events._closed  # tensorboardX's atexit cleanup finds it closed and writes nothing
