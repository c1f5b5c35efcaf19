"""``hpo worker``: one process per GPU (CPU when none), each serving studies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

from hpo.errors import HpoError
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


def run_workers(opts: WorkerOptions, gpus: str) -> None:
    indices = parse_gpus(gpus)
    if len(indices) <= 1:
        device = f"cuda:{indices[0]}" if indices else ("cpu" if gpus == "all" else opts.device)
        run_worker(WorkerOptions(**{**opts.__dict__, "device": device}))
        return
    children = []
    for i, gpu in enumerate(indices):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}
        args = [a for a in sys.argv[1:] if not a.startswith("--gpus")]
        args = _drop_value(args, "--gpus")
        cmd = [sys.executable, "-m", "hpo", *args, "--gpus", "0", "--worker-index", str(opts.worker_index + i)]
        children.append(subprocess.Popen(cmd, env=env))

    def forward(signum: int, frame: FrameType | None) -> None:
        for child in children:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [c.wait() for c in children]
    if any(codes):
        raise SystemExit(max(codes))


def _drop_value(args: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = True
            continue
        if a.startswith("--worker-index"):
            continue
        out.append(a)
    return out
