from __future__ import annotations

from pathlib import Path

import pytest

from hpo.commands.worker import local_gpus, parse_gpus, worker_argv
from hpo.errors import HpoError
from hpo.service.worker import WorkerOptions


def test_gpu_children_get_their_own_index_and_never_the_storage_url() -> None:
    opts = WorkerOptions(
        url="postgresql://hpo:secret@db/hpo",
        study="s",
        exit_when_idle=True,
        artifact_dir=Path("/a"),
        cache_dir=Path("/c"),
        worker_index=2,
    )
    cmd = worker_argv(opts, gpus="0")
    assert cmd[3:8] == ["worker", "--gpus", "0", "--worker-index", "2"]
    assert {"--study", "s", "--exit-when-idle", "--cache-dir", "/c"} <= set(cmd)
    assert not any("secret" in part for part in cmd)


def test_unknown_gpu_is_a_one_line_error() -> None:
    with pytest.raises(HpoError, match="no GPU 7 on this machine"):
        parse_gpus("7")
    with pytest.raises(HpoError, match="expected 'all', 'cpu' or comma-separated indices"):
        parse_gpus("first")


def test_local_workers_run_on_the_cpu_when_there_is_no_gpu() -> None:
    import torch

    if torch.cuda.device_count():
        assert local_gpus(3) == [str(i % torch.cuda.device_count()) for i in range(3)]
    else:
        assert local_gpus(2) == ["cpu", "cpu"]
    assert parse_gpus("cpu") == []
