"""The worker processes that ``hpo launch``, ``hpo confirm`` and ``hpo run`` start on this machine:
each GPU a worker takes, a worker's command line and environment (the one builder of them, which
``hpo worker`` uses for its own children too), starting and stopping them, and following a study
while they serve it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import optuna

from hpo.analysis.tables import duration
from hpo.errors import HOST_FAULT_EXIT, HostFault, HpoError
from hpo.service.status_view import best_text, progress_line
from hpo.service.study import progress
from hpo.service.trials import fail_reason, own_trials
from hpo.service.urls import STORAGE_ENV, is_sqlite
from hpo.service.worker import WorkerOptions
from hpo.spec.spec import StudySettings
from hpo.training.runtime import threads_per_worker


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
    if opts.sharing > 1:
        cmd += ["--sharing", str(opts.sharing)]
    if report_dir is not None:
        cmd += ["--reports", str(report_dir)]
    return cmd


def worker_env(url: str, **extra: str) -> dict[str, str]:
    return {**os.environ, STORAGE_ENV: url, **extra}


@dataclass
class LocalWorker:
    """A local worker process whose stderr is passed through, its last line kept to say why it died."""

    proc: subprocess.Popen[bytes]
    last_line: list[str] = field(default_factory=lambda: [""])

    def relay(self, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            sys.stderr.write(line)
            if line.strip():
                self.last_line[0] = line.strip()

    @property
    def failed(self) -> bool:
        return self.proc.poll() not in (None, 0)


@dataclass(frozen=True)
class LocalWorkers:
    """The worker processes ``hpo launch`` and ``hpo confirm`` start on this machine."""

    count: int | None  # None: one per GPU ``gpus`` names, else 1 on the embedded database, else 0
    threads: int | None = None  # torch threads per worker; None: this process's cores split between them
    gpus: str = "all"  # as ``hpo worker --gpus``: the workers take these GPUs in turn

    def plan(self, url: str) -> list[str]:
        """Each worker's ``--gpus`` (checked before anything is created); one entry per worker."""
        named = len(parse_gpus(self.gpus)) if self.gpus not in ("all", "cpu") else None
        default = named if named is not None else (1 if is_sqlite(url) else 0)
        return local_gpus(self.count if self.count is not None else default, self.gpus)


def start_workers(
    url: str, study: str, plan: list[str], *, threads: int | None, artifacts: Path, detach: bool
) -> list[LocalWorker]:
    """Local worker processes, one per entry of ``plan`` (``LocalWorkers.plan``); the storage URL
    travels in the environment, not on the command line."""
    out = []
    for i, gpus in enumerate(plan):
        opts = WorkerOptions(
            url=url, study=study, exit_when_idle=True, worker_index=i, artifact_dir=artifacts,
            poll_seconds=2.0, threads=threads or threads_per_worker(len(plan)),
        )  # fmt: skip
        argv = worker_argv(opts, gpus=gpus)
        if detach:
            out.append(LocalWorker(subprocess.Popen(argv, env=worker_env(url), start_new_session=True)))
            continue
        worker = LocalWorker(subprocess.Popen(argv, env=worker_env(url), stderr=subprocess.PIPE))
        assert worker.proc.stderr is not None
        threading.Thread(target=worker.relay, args=(worker.proc.stderr,), daemon=True).start()
        out.append(worker)
    return out


def stop_workers(workers: list[LocalWorker]) -> None:
    """SIGTERM to every worker still running (its running trial is queued for retry), then wait for all."""
    for w in workers:
        if w.proc.poll() is None:
            w.proc.terminate()
    for w in workers:
        w.proc.wait()


def follow(
    study: optuna.Study,
    limits: StudySettings,
    metric: str,
    workers: list[LocalWorker],
    *,
    until: float | None = None,
    prefix: str = "",
) -> None:
    """Print progress until the study is done, every local worker has exited, or ``time.monotonic()``
    passes ``until``; each line starts with ``prefix`` (``hpo run``'s phase)."""
    n_trials = limits.n_trials
    started, last, last_state, last_print = time.monotonic(), "", "", 0.0
    tty = sys.stdout.isatty()
    while True:
        p = progress(study, n_trials, max_retries=limits.max_retries)
        elapsed = time.monotonic() - started
        eta = (
            f" | ~{duration(elapsed / p.finished * (n_trials - p.finished))} left" if 0 < p.finished < n_trials else ""
        )
        state = prefix + progress_line(p, metric, best_text(study, p))
        line = f"{state} | {duration(elapsed)} elapsed{eta}"
        if tty:  # one live line, rewritten every second
            print("\r" + line.ljust(len(last)), end="", flush=True)
            last = line
        elif state != last_state or elapsed - last_print >= 60:  # logs: a line per change, or per minute
            print(line, flush=True)
            last_state, last_print = state, elapsed
        if p.done or (
            workers and all(w.proc.poll() is not None for w in workers) and (p.running == 0 or faulted(workers))
        ):
            break
        if until is not None and time.monotonic() >= until:
            break
        time.sleep(1.0)
    if tty:
        print()


def check_some_complete(study: optuna.Study, limits: StudySettings) -> None:
    """A study that ended with no complete trial has no answer: say how its trials ended."""
    p = progress(study, limits.n_trials, max_retries=limits.max_retries)
    if p.done and p.complete == 0:
        endings = Counter(fail_reason(t) for t in own_trials(study) if fail_reason(t) is not None)
        said = ", ".join(f"{n} {reason}" for reason, n in endings.most_common())
        raise HpoError(
            f"study {study.study_name!r} ended with no complete trial ({said or 'none finished'}); "
            f"`hpo status {study.study_name}` says why each ended"
        )


def host_fault(workers: list[LocalWorker], where: str) -> HostFault | None:
    """The fault of the host (a full disk) that stopped local workers, in the last one's words; ``where``
    says how far the work got."""
    stopped = [w for w in workers if w.proc.returncode == HOST_FAULT_EXIT]
    if not stopped:
        return None
    said = stopped[-1].last_line[0].removeprefix("error: ")
    return HostFault(f"{len(stopped)} of {len(workers)} local worker(s) stopped ({where}): {said}")


def faulted(workers: list[LocalWorker]) -> bool:
    """A worker stopped on a full disk: a trial it left RUNNING (its database full too) is no reason to wait."""
    return any(w.proc.returncode == HOST_FAULT_EXIT for w in workers)


def check_workers_finished(study: optuna.Study, limits: StudySettings, workers: list[LocalWorker]) -> None:
    """Raise when the local workers ended without finishing the study: :class:`HostFault` when one
    stopped on a fault of the host (a full disk: its line says where), HpoError when all failed."""
    n_trials = limits.n_trials
    p = progress(study, n_trials, max_retries=limits.max_retries)
    fault = host_fault(workers, f"{p.finished}/{n_trials} trials finished")
    if fault is not None and not p.done:
        raise fault
    if p.done:
        return
    failed = [w for w in workers if w.failed]
    if workers and len(failed) == len(workers):
        codes = ", ".join(str(w.proc.returncode) for w in failed)
        raise HpoError(
            f"all {len(workers)} local worker(s) failed (exit {codes}) with the study unfinished "
            f"({p.finished}/{n_trials}); the last said: {failed[-1].last_line[0] or 'nothing'}"
        )
    print(
        f"local workers exited with the study unfinished ({p.finished}/{n_trials}); start more with "
        "`hpo worker`, or relaunch to resume",
        file=sys.stderr,
    )
