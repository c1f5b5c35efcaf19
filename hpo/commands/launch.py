"""``hpo launch``: create or resume the study, start local workers, follow progress, report."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import optuna
from optuna.storages import RDBStorage

from hpo.commands.status import best_text, progress_line, terminal_width, trials_table
from hpo.commands.worker import local_gpus, parse_gpus, worker_argv, worker_env
from hpo.errors import HOST_FAULT_EXIT, HostFault, HpoError, writable_folder
from hpo.report.render import report_path, write_report
from hpo.run.budget import duration
from hpo.scoring.score import preflight
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume, existing_study, load, progress, require_spec, sampler_warning
from hpo.service.trials import fail_reason, own_trials
from hpo.service.urls import is_sqlite, redact, resolve_url, sqlite_path
from hpo.service.warm_start import check_scored_alike, warm_start
from hpo.service.worker import WorkerOptions
from hpo.spec.loading import load_spec
from hpo.spec.rules import check_study_name
from hpo.spec.spec import Spec, StudySettings, sample_count_problems
from hpo.tracking.external import check_trackers
from hpo.training.runtime import threads_per_worker


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


def preflight_doctor(spec: Spec, artifacts: Path, workers: int) -> None:
    """`hpo doctor --fast`: refuse to start a study whose data or model is broken."""
    from hpo.doctor.checklist import Checklist
    from hpo.doctor.result import Check
    from hpo.doctor.run import run_doctor

    def show(check: Check) -> None:
        if check.status in ("fail", "warn"):
            print(check.line(), file=sys.stderr)

    checklist = Checklist(show, lambda text: print(text, file=sys.stderr))
    out_dir = writable_folder(Path("runs") / "doctor", "the preflight doctor's files")
    checks = run_doctor(spec, fast=True, out_dir=out_dir, artifacts=artifacts, workers=max(workers, 1),
                        checklist=checklist)  # fmt: skip
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        raise HpoError(
            f"`hpo doctor --fast` failed {len(failed)} check(s) above; fix them, or launch with --skip-doctor"
        )
    print(f"hpo doctor --fast: {len(checks) - len(failed)} of {len(checks)} checks passed")


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
        if p.done or (workers and all(w.proc.poll() is not None for w in workers) and p.running == 0):
            break
        if until is not None and time.monotonic() >= until:
            break
        time.sleep(1.0)
    if tty:
        print()


def check_workers_finished(study: optuna.Study, limits: StudySettings, workers: list[LocalWorker]) -> None:
    """Raise when the local workers ended without finishing the study: :class:`HostFault` when one
    stopped on a fault of the host (a full disk: its line says where), HpoError when all failed."""
    n_trials = limits.n_trials
    p = progress(study, n_trials, max_retries=limits.max_retries)
    faulted = [w for w in workers if w.proc.returncode == HOST_FAULT_EXIT]
    if faulted and not p.done:
        said = faulted[-1].last_line[0].removeprefix("error: ")
        raise HostFault(f"{len(faulted)} of {len(workers)} local worker(s) stopped ({p.finished}/{n_trials} "
                        f"trials finished): {said}")  # fmt: skip
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


def scoring_preflight(spec: Spec, *, local_workers: int) -> None:
    """Scoring must be possible where trials are scored. With local workers that is here: missing
    Inception weights refuse the launch. With none (remote GPU workers) it is only a warning: each
    worker checks its own copy before any training."""
    try:
        preflight(spec.score)
    except HpoError as err:
        if local_workers > 0:
            raise
        print(f"warning: {err} — no local worker scores here; each worker checks its own copy first", file=sys.stderr)


def prior_study(store: RDBStorage | None, url: str, name: str, spec: Spec) -> tuple[optuna.Study, Spec]:
    """The study to warm-start from, checked before anything is created."""
    if store is None:
        raise HpoError(f"--warm-start: no study named {name[:200]!r} in {redact(url)} (no database there yet)")
    source = load(store, name, redact(url))
    source_spec = require_spec(source)
    check_scored_alike(source_spec, spec)
    return source, source_spec


def run_launch(
    spec_path: Path,
    *,
    storage: str | None,
    local: LocalWorkers,
    detach: bool,
    name: str | None,
    artifacts: Path,
    doctor: bool = True,
    warm_from: str | None = None,
) -> None:
    spec = load_spec(spec_path)
    if name is not None:
        check_study_name(name, key="--name")
    url = resolve_url(storage)
    plan = local.plan(url)
    scoring_preflight(spec, local_workers=len(plan))
    if (warning := sampler_warning(spec)) is not None:
        print(f"warning: {warning}", file=sys.stderr)
    check_trackers(spec.tracking)
    path = sqlite_path(url)
    fresh = path is not None and not path.exists()  # no database yet: nothing to resume, nothing to create early
    store = None if fresh else open_storage(url)
    resuming = store is not None and existing_study(spec, store, name or spec.study.name) is not None
    source = prior_study(store, url, warm_from, spec) if warm_from is not None and not resuming else None
    if warm_from is not None and resuming:
        print(f"--warm-start ignored: study {name or spec.study.name!r} exists and is resumed (trials are "
              "carried once, when a study is created)", file=sys.stderr)  # fmt: skip
    if not detach:  # checked before the study is created, not after its last trial
        writable_folder(report_path(name or spec.study.name).parent, "the report")
    if doctor and not resuming:  # a study being resumed passed the doctor when it was created
        preflight_doctor(spec, artifacts, len(plan))
    database = store or open_storage(url)
    study, created = create_or_resume(spec, database, name=name, baselines=source is None)
    name = study.study_name
    print(f"{'created' if created else 'resuming'} study {name!r} in {redact(url)}")
    for problem in sample_count_problems(spec):  # after any refusal, which stays one line
        print(f"warning: {problem.key}: {problem.message}", file=sys.stderr)
    if created and source is not None:
        print(warm_start(study, spec, *source).line())
    procs = start_workers(url, name, plan, threads=local.threads, artifacts=artifacts, detach=detach)
    if detach:
        print(f"{len(plan)} worker(s) started in the background; follow with `hpo status {name}`")
        return
    try:
        follow(study, spec.study, spec.score.metric_name, procs)
    except KeyboardInterrupt:
        for w in procs:
            w.proc.terminate()  # SIGTERM: running trials are queued for retry
        for w in procs:
            w.proc.wait()
        print(f"\nstopped; relaunch `hpo launch {spec_path}` to resume", file=sys.stderr)
        raise SystemExit(130) from None
    for w in procs:
        w.proc.wait()
    check_workers_finished(study, spec.study, procs)
    print(trials_table(study, spec.score.metric_name, terminal_width()))
    print(f"report: {write_report(study, database, report_path(name), artifact_dir=artifacts)}")
    check_some_complete(study, spec.study)
