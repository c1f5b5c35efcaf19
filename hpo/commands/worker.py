"""``hpo worker``: one process per GPU (CPU when none), each serving studies; the worker that
finishes a study writes its report. Also the one builder of a worker's command line."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import FrameType

import optuna

from hpo.errors import HpoError
from hpo.service.urls import STORAGE_ENV
from hpo.service.worker import OnStudyDone, WorkerOptions, run_worker

log = logging.getLogger("hpo.worker")


def parse_gpus(gpus: str) -> list[int]:
    """``all`` → every visible GPU (none on a CPU machine); ``cpu`` → none; ``0,1`` → those indices."""
    import torch

    count = torch.cuda.device_count()
    if gpus == "all":
        return list(range(count))
    if gpus == "cpu":
        return []
    try:
        wanted = [int(g) for g in gpus.split(",") if g.strip()]
    except ValueError:
        raise HpoError(f"--gpus {gpus!r}: expected 'all', 'cpu' or comma-separated indices like 0,1") from None
    missing = [g for g in wanted if not 0 <= g < count]
    if missing:
        raise HpoError(f"--gpus {gpus!r}: no GPU {missing[0]} on this machine ({count} visible)")
    return wanted


def local_gpus(n: int, gpus: str = "all") -> list[str]:
    """The ``--gpus`` of each of ``n`` local workers: the GPUs ``gpus`` names (``parse_gpus``) in
    turn, or the CPU when it names none."""
    indices = parse_gpus(gpus)
    return [str(indices[i % len(indices)]) if indices else "cpu" for i in range(n)]


def worker_argv(opts: WorkerOptions, *, gpus: str, report_dir: Path | None = None) -> list[str]:
    """The command line of a worker process with ``opts`` (the storage URL travels in the
    environment, never on a command line that ``ps`` shows)."""
    cmd = [sys.executable, "-m", "hpo", "worker", "--gpus", gpus, "--worker-index", str(opts.worker_index)]
    cmd += ["--artifacts", str(opts.artifact_dir), "--poll", str(opts.poll_seconds)]
    if opts.study is not None:
        cmd += ["--study", opts.study]
    if opts.max_trials is not None:
        cmd += ["--max-trials", str(opts.max_trials)]
    if opts.exit_when_idle:
        cmd.append("--exit-when-idle")
    if opts.cache_dir is not None:
        cmd += ["--cache-dir", str(opts.cache_dir)]
    if opts.threads:
        cmd += ["--threads", str(opts.threads)]
    if report_dir is not None:
        cmd += ["--reports", str(report_dir)]
    return cmd


def worker_env(url: str, **extra: str) -> dict[str, str]:
    return {**os.environ, STORAGE_ENV: url, **extra}


def report_writer(report_dir: Path, artifact_dir: Path) -> OnStudyDone:
    """The callback that writes a finished study's report (the worker knows nothing of reports)."""
    from hpo.report.render import report_path, write_report

    def write(study: optuna.Study, storage: optuna.storages.BaseStorage) -> None:
        path = write_report(study, storage, report_path(study.study_name, report_dir), artifact_dir=artifact_dir)
        log.info("study %s is done; report: %s", study.study_name, path)

    return write


def run_workers(opts: WorkerOptions, gpus: str, report_dir: Path | None) -> None:
    """One worker in this process for zero or one GPU; one child process per GPU otherwise."""
    indices = parse_gpus(gpus)
    if len(indices) <= 1:
        device = f"cuda:{indices[0]}" if indices else "cpu"
        from hpo.training.runtime import set_threads

        set_threads(opts.threads)
        done = report_writer(report_dir, opts.artifact_dir) if report_dir is not None else None
        run_worker(replace(opts, device=device), on_study_done=done)
        return
    children = []
    for i, gpu in enumerate(indices):
        child = replace(opts, worker_index=opts.worker_index + i)
        env = worker_env(opts.url, CUDA_VISIBLE_DEVICES=str(gpu))  # each child sees its GPU as device 0
        children.append(subprocess.Popen(worker_argv(child, gpus="0", report_dir=report_dir), env=env))

    def forward(signum: int, frame: FrameType | None) -> None:
        for child_proc in children:
            child_proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [c.wait() for c in children]
    if any(codes):
        raise SystemExit(max(codes))
