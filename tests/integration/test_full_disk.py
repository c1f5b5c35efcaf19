"""A real full disk (a tmpfs this test mounts, as root): the writes that fill it are recognised as a full
disk, `hpo launch` on a full artifact store ends in one line naming the disk with no trial burnt, and the
same command finishes the study once the disk has grown."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import torch
from optuna.trial import TrialState
from sqlalchemy import create_engine, text

from hpo.errors import HOST_FAULT_EXIT, is_disk_full
from hpo.service.db_errors import is_connection_error
from hpo.service.study import progress
from hpo.service.trials import DISK_FULL, fail_reason
from tests.service_helpers import hpo, write_spec


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (grown by :func:`grow`), unmounted afterwards."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the full-disk tests mount a tmpfs and need root, which CI has")
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def grow(disk: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", "tmpfs", str(disk)], check=True)


def test_torch_and_sqlite_on_a_full_disk_read_as_a_full_disk_not_an_outage(small_disk: Path) -> None:
    with pytest.raises(Exception) as saved:
        torch.save(torch.zeros(1 << 16), small_disk / "big.pt")  # 256 KiB into 64 KiB
    assert is_disk_full(saved.value), repr(saved.value)
    (small_disk / "big.pt").unlink(missing_ok=True)
    engine = create_engine(f"sqlite:///{small_disk / 'hpo.db'}")
    with pytest.raises(Exception) as written, engine.begin() as db:
        db.execute(text("CREATE TABLE t (x BLOB)"))
        for _ in range(64):
            db.execute(text("INSERT INTO t VALUES (:x)"), {"x": os.urandom(4096)})
    assert is_disk_full(written.value), repr(written.value)
    assert not is_connection_error(written.value)
    assert any(isinstance(e, sqlite3.OperationalError) for e in (written.value.__cause__, written.value.orig))  # type: ignore[attr-defined]


def test_launch_on_a_full_artifact_store_stops_in_one_line_and_the_same_command_finishes(
    tmp_path: Path, small_disk: Path
) -> None:
    spec = write_spec(tmp_path, study={"name": "quick", "n_trials": 3})
    url = f"sqlite:///{tmp_path / 'study.db'}"
    refused = hpo("launch", str(spec), "--storage", url, "--artifacts", str(small_disk), "--name", "fulldisk",
                  "--threads", "1", cwd=tmp_path)  # fmt: skip
    assert refused.returncode == 2  # the preflight doctor says it before the study exists
    assert "[FAIL] disk: free space:" in refused.stderr and str(small_disk) in refused.stderr
    command = ["launch", str(spec), "--storage", url, "--artifacts", str(small_disk), "--name", "fulldisk",
               "--threads", "1", "--skip-doctor"]  # fmt: skip
    full = hpo(*command, cwd=tmp_path)
    assert full.returncode == HOST_FAULT_EXIT, full.stderr
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 of 1 local worker(s) stopped (0/3 trials finished): the disk at ")
    assert last.endswith("free space there and run the same command")
    assert "Traceback" not in full.stderr + full.stdout
    study = optuna.load_study(study_name="fulldisk", storage=url)
    first, retry = study.get_trials()
    assert fail_reason(first) == DISK_FULL and retry.state == TrialState.WAITING  # none burnt

    grow(small_disk, "64m")
    again = hpo(*command, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "resuming study 'fulldisk'" in again.stdout  # --name resumes
    p = progress(optuna.load_study(study_name="fulldisk", storage=url), 3)
    assert p.done and p.finished == 3 and p.failed == 0 and p.complete >= 1
