"""``hpo worker``: ``--per-gpu`` processes per GPU (or on the CPU when none), each serving studies;
the worker that finishes a study writes its report. A child's command line is built where the local
workers' is (``hpo.service.local.worker_argv``)."""

from __future__ import annotations

import logging
import signal
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

import optuna

from hpo.errors import HpoError
from hpo.service.local import parse_gpus, worker_argv, worker_env
from hpo.service.worker import OnStudyDone, WorkerOptions, run_worker
from hpo.training.runtime import threads_per_worker

log = logging.getLogger("hpo.worker")


@dataclass(frozen=True)
class Slot:
    """One worker process of ``hpo worker``: the host GPU it is pinned to (None: the CPU), its worker
    index (it offsets the sampler seed) and its torch threads (None: torch's default)."""

    gpu: int | None
    worker_index: int
    threads: int | None


def worker_slots(gpus: list[int], per_gpu: int, *, index: int, threads: int | None) -> list[Slot]:
    """``per_gpu`` processes on each of ``gpus`` (on the CPU when the list is empty). ``index`` is
    this ``hpo worker``'s own (a Slurm task's, a pod's): its n processes take worker indices
    ``index·n … index·n + n−1``, so no two processes of an array share a sampler seed. Processes
    that share the CPU split its cores unless ``threads`` says otherwise."""
    if per_gpu < 1:
        raise HpoError(f"--per-gpu {per_gpu}: expected at least 1 worker process per GPU")
    devices: list[int | None] = [g for g in gpus for _ in range(per_gpu)] if gpus else [None] * per_gpu
    if threads is None and not gpus and per_gpu > 1:
        threads = threads_per_worker(per_gpu)
    return [Slot(gpu, index * len(devices) + i, threads) for i, gpu in enumerate(devices)]


def report_writer(report_dir: Path, artifact_dir: Path) -> OnStudyDone:
    """The callback that writes a finished study's report (the worker knows nothing of reports). Its
    import (scipy's compiled modules among it) runs with SIGTERM held back: a start-up stop raised
    inside a compiled module's import left it half-registered, and the next import of it failed with
    a traceback; held back, the stop arrives once the import is whole."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        from hpo.report.render import report_path, write_report
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def write(study: optuna.Study, storage: optuna.storages.BaseStorage) -> None:
        path = write_report(study, storage, report_path(study.study_name, report_dir), artifact_dir=artifact_dir)
        log.info("study %s is done; report: %s", study.study_name, path)

    return write


def run_workers(opts: WorkerOptions, gpus: str, report_dir: Path | None, per_gpu: int = 1) -> None:
    """One worker in this process when one slot is wanted; else one child process per slot, each
    seeing only its GPU (as cuda:0) and told how many processes share that GPU."""
    slots = worker_slots(parse_gpus(gpus), per_gpu, index=opts.worker_index, threads=opts.threads)
    if len(slots) == 1:
        (slot,) = slots
        device = f"cuda:{slot.gpu}" if slot.gpu is not None else "cpu"
        from hpo.training.runtime import set_threads

        set_threads(slot.threads)
        done = report_writer(report_dir, opts.artifact_dir) if report_dir is not None else None
        run_worker(replace(opts, device=device), on_study_done=done)
        return
    children = []
    for slot in slots:
        child = replace(opts, worker_index=slot.worker_index, threads=slot.threads, sharing=per_gpu)
        if slot.gpu is None:
            argv, env = worker_argv(child, gpus="cpu", report_dir=report_dir), worker_env(opts.url)
        else:  # each child sees its GPU as device 0
            argv = worker_argv(child, gpus="0", report_dir=report_dir)
            env = worker_env(opts.url, CUDA_VISIBLE_DEVICES=str(slot.gpu))
        children.append(subprocess.Popen(argv, env=env))
    log.info("started %d worker processes: %s", len(slots), ", ".join(slot_text(s) for s in slots))

    def forward(signum: int, frame: FrameType | None) -> None:
        for child_proc in children:
            child_proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        codes = [c.wait() for c in children]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if any(codes):
        raise SystemExit(max(codes))


def slot_text(slot: Slot) -> str:
    where = "cpu" if slot.gpu is None else f"gpu {slot.gpu}"
    threads = "" if slot.threads is None else f", {slot.threads} threads"
    return f"w{slot.worker_index} {where}{threads}"
