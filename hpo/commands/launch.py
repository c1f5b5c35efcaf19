"""``hpo launch``: create or resume the study, start local workers, follow progress, report."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import optuna

from hpo.commands.report import default_report_path
from hpo.commands.status import progress_line, trials_table
from hpo.errors import HpoError
from hpo.report import write_report
from hpo.scoring.score import preflight
from hpo.spec import Spec, load_spec
from hpo.storage import STORAGE_ENV, is_sqlite, open_storage, redact, resolve_url
from hpo.study import create_or_resume, progress


def worker_command(study: str, index: int, *, artifacts: Path, poll: float, threads: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "hpo",
        "worker",
        "--study",
        study,
        "--exit-when-idle",
        "--worker-index",
        str(index),
        "--artifacts",
        str(artifacts),
        "--poll",
        str(poll),
        "--threads",
        str(threads),
    ]


def start_workers(
    url: str, study: str, n: int, *, artifacts: Path, detach: bool, poll: float = 2.0
) -> list[subprocess.Popen[bytes]]:
    """Local worker processes; the storage URL travels in the environment, not on the command line."""
    env = {**os.environ, STORAGE_ENV: url}
    threads = max(1, (os.cpu_count() or 1) // max(n, 1))  # local workers share the CPU cores
    return [
        subprocess.Popen(
            worker_command(study, i, artifacts=artifacts, poll=poll, threads=threads), env=env, start_new_session=detach
        )
        for i in range(n)
    ]


def preflight_doctor(spec: Spec) -> None:
    """`hpo doctor --fast`: refuse to start a study whose data or model is broken."""
    from hpo.doctor.run import run_doctor

    checks = run_doctor(spec, fast=True, out_dir=Path("runs") / "doctor")
    failed = [c for c in checks if c.status == "fail"]
    for check in failed:
        print(check.line(), file=sys.stderr)
    if failed:
        raise HpoError(
            f"`hpo doctor --fast` failed {len(failed)} check(s) above; fix them, or launch with --skip-doctor"
        )
    print(f"hpo doctor --fast: {len(checks)} checks passed")


def format_seconds(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def follow(study: optuna.Study, n_trials: int, metric: str, workers: list[subprocess.Popen[bytes]]) -> None:
    started, last, last_state, last_print = time.monotonic(), "", "", 0.0
    tty = sys.stdout.isatty()
    while True:
        p = progress(study, n_trials)
        elapsed = time.monotonic() - started
        eta = (
            f" | ~{format_seconds(elapsed / p.finished * (n_trials - p.finished))} left"
            if 0 < p.finished < n_trials
            else ""
        )
        state = progress_line(p, metric)
        line = f"{state} | {format_seconds(elapsed)} elapsed{eta}"
        if tty:  # one live line, rewritten every second
            print("\r" + line.ljust(len(last)), end="", flush=True)
            last = line
        elif state != last_state or elapsed - last_print >= 60:  # logs: a line per change, or per minute
            print(line, flush=True)
            last_state, last_print = state, elapsed
        if p.done:
            break
        if workers and all(w.poll() is not None for w in workers) and p.running == 0:
            print(
                f"\nall local workers exited with the study unfinished ({p.finished}/{n_trials}); "
                "start more with `hpo worker`, or relaunch to resume",
                file=sys.stderr,
            )
            break
        time.sleep(1.0)
    if tty:
        print()


def run_launch(
    spec_path: Path,
    *,
    storage: str | None,
    workers: int | None,
    detach: bool,
    new_name: str | None,
    artifacts: Path,
    doctor: bool = True,
) -> None:
    spec = load_spec(spec_path)
    url = resolve_url(storage)
    preflight(spec.score)
    if doctor:
        preflight_doctor(spec)
    study, created = create_or_resume(spec, open_storage(url), name=new_name)
    name = study.study_name
    print(f"{'created' if created else 'resuming'} study {name!r} in {redact(url)}")
    n_workers = workers if workers is not None else (1 if is_sqlite(url) else 0)
    procs = start_workers(url, name, n_workers, artifacts=artifacts, detach=detach)
    if detach:
        print(f"{n_workers} worker(s) started in the background; follow with `hpo status {name}`")
        return
    metric = "classifier-FID" if spec.score.features == "classifier" else "FID"
    try:
        follow(study, spec.study.n_trials, metric, procs)
    except KeyboardInterrupt:
        for proc in procs:
            proc.terminate()  # SIGTERM: running trials are queued for retry
        for proc in procs:
            proc.wait()
        print(f"\nstopped; relaunch `hpo launch {spec_path}` to resume", file=sys.stderr)
        raise SystemExit(130) from None
    for proc in procs:
        proc.wait()
    print(trials_table(study))
    print(f"report: {write_report(study, default_report_path(name), artifact_dir=artifacts)}")
