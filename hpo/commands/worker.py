"""``hpo worker``: one process per GPU (CPU when none), each serving studies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace
from types import FrameType

from hpo.errors import HpoError
from hpo.storage import STORAGE_ENV
from hpo.worker import WorkerOptions, run_worker


def parse_gpus(gpus: str) -> list[int]:
    """``all`` → every visible GPU (none on a CPU machine); ``0,1`` → those indices."""
    import torch

    count = torch.cuda.device_count()
    if gpus == "all":
        return list(range(count))
    try:
        wanted = [int(g) for g in gpus.split(",") if g.strip()]
    except ValueError:
        raise HpoError(f"--gpus {gpus!r}: expected 'all' or comma-separated indices like 0,1") from None
    missing = [g for g in wanted if not 0 <= g < count]
    if missing:
        raise HpoError(f"--gpus {gpus!r}: no GPU {missing[0]} on this machine ({count} visible)")
    return wanted


def child_command(opts: WorkerOptions, index: int) -> list[str]:
    """The command of the worker process for one GPU; it sees only that GPU, as device 0."""
    cmd = [
        sys.executable,
        "-m",
        "hpo",
        "worker",
        "--gpus",
        "0",
        "--worker-index",
        str(index),
        "--artifacts",
        str(opts.artifact_dir),
        "--poll",
        str(opts.poll_seconds),
    ]
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
    return cmd


def run_workers(opts: WorkerOptions, gpus: str) -> None:
    """One worker in this process for zero or one GPU; one child process per GPU otherwise."""
    indices = parse_gpus(gpus)
    if len(indices) <= 1:
        device = f"cuda:{indices[0]}" if indices else "cpu"
        run_worker(replace(opts, device=device))
        return
    children = []
    for i, gpu in enumerate(indices):
        # the storage URL travels in the environment, never on a command line that `ps` shows
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu), STORAGE_ENV: opts.url}
        children.append(subprocess.Popen(child_command(opts, opts.worker_index + i), env=env))

    def forward(signum: int, frame: FrameType | None) -> None:
        for child in children:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [c.wait() for c in children]
    if any(codes):
        raise SystemExit(max(codes))
