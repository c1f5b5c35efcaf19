"""``hpo slurm STUDY``: a Slurm job array whose every task is ``hpo worker --study STUDY
--exit-when-idle`` against the study's PostgreSQL.

The job script holds no secret: the storage URL goes into an environment file beside it that only
its owner may read, and the script sources it. Each task is requeued on preemption (``--requeue``);
Slurm stops a task with SIGTERM (scancel, preemption, the time limit), which fails its running
trial for retry, and the next task to look resumes it from its checkpoint. A task killed outright
(SIGKILL after KillWait, a lost node) stops heartbeating, and its trial is failed as stale and
retried the same way.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from hpo.errors import HpoError
from hpo.files import atomic_write
from hpo.service.names import DEFAULT_ARTIFACTS, path_component
from hpo.service.storage import open_storage
from hpo.service.study import load, progress, require_spec
from hpo.service.urls import STORAGE_ENV, is_sqlite, redact

SLURM_DIR = Path(".hpo/slurm")


@dataclass(frozen=True)
class SlurmJob:
    study: str
    tasks: int
    gpus_per_task: int = 1
    per_gpu: int = 1  # worker processes per GPU (on the CPU when gpus_per_task is 0)
    cpus_per_task: int = 4
    partition: str | None = None
    time: str | None = None  # Slurm's --time, e.g. 04:00:00
    sbatch_args: tuple[str, ...] = ()  # more #SBATCH lines: --account=lab, --qos=high
    artifact_dir: Path = DEFAULT_ARTIFACTS
    report_dir: Path = Path("reports")
    cache_dir: Path | None = None
    folder: Path = SLURM_DIR  # script, environment file and logs (on a filesystem the nodes share)
    workdir: Path = Path(".")
    python: str = sys.executable

    @property
    def slots(self) -> int:
        """Worker processes per task (``hpo worker`` gives task i's the indices i·slots … i·slots+slots−1)."""
        return max(self.gpus_per_task, 1) * self.per_gpu

    @property
    def threads(self) -> int:
        return max(1, self.cpus_per_task // self.slots)

    @property
    def script_path(self) -> Path:
        return self.folder / "job.sbatch"

    @property
    def env_path(self) -> Path:
        return self.folder / "storage.env"

    @property
    def log_dir(self) -> Path:
        return self.folder / "logs"


def job_script(job: SlurmJob) -> str:
    """The sbatch script: directives, then the environment file, then one ``hpo worker`` (exec'd, so
    Slurm's signals reach it)."""
    directives = [
        f"--job-name=hpo-{path_component(job.study)}",
        f"--array=0-{job.tasks - 1}",
        "--requeue",  # preempted or on a failed node: back in the queue, the trial resumes
        "--open-mode=append",  # a requeued task adds to its log
        f"--output={job.log_dir.resolve()}/%A_%a.log",
        f"--chdir={job.workdir.resolve()}",
        f"--cpus-per-task={job.cpus_per_task}",
    ]
    if job.gpus_per_task:
        directives.append(f"--gres=gpu:{job.gpus_per_task}")
    if job.partition:
        directives.append(f"--partition={job.partition}")
    if job.time:
        directives.append(f"--time={job.time}")
    directives += list(job.sbatch_args)
    worker = [job.python, "-m", "hpo", "worker", "--study", job.study, "--exit-when-idle"]
    worker += ["--gpus", "all" if job.gpus_per_task else "cpu", "--per-gpu", str(job.per_gpu)]
    worker += ["--threads", str(job.threads), "--artifacts", str(job.artifact_dir.resolve())]
    worker += ["--reports", str(job.report_dir.resolve())]
    if job.cache_dir is not None:
        worker += ["--cache-dir", str(job.cache_dir.resolve())]
    return "\n".join(
        [
            "#!/bin/bash",
            f"# Written by `hpo slurm {job.study}`: {job.tasks} task(s), each one `hpo worker` with "
            f"{job.gpus_per_task or 'no'} GPU(s) × {job.per_gpu} process(es).",
            f"# The storage URL is read from {job.env_path.resolve()} (mode 600), never written here.",
            *(f"#SBATCH {shlex.quote(d)}" for d in directives),
            "set -euo pipefail",
            f"set -a; source {shlex.quote(str(job.env_path.resolve()))}; set +a",
            'echo "hpo: task ${SLURM_ARRAY_TASK_ID} of job ${SLURM_ARRAY_JOB_ID} on $(hostname),'
            ' restart ${SLURM_RESTART_COUNT:-0}"',
            f'exec {shlex.join(worker)} --worker-index "$SLURM_ARRAY_TASK_ID"',
            "",
        ]
    )


def write_job(job: SlurmJob, url: str) -> None:
    """The script, and the environment file with the storage URL (readable by its owner only)."""
    job.log_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(job.env_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file may have had wider rights
    with os.fdopen(fd, "w") as f:
        f.write(f"{STORAGE_ENV}={shlex.quote(url)}\nPYTHONUNBUFFERED=1\n")
    script = job_script(job)

    def write(tmp: Path) -> None:
        tmp.write_text(script)
        tmp.chmod(0o755)

    atomic_write(job.script_path, write)


def check_study(url: str, name: str) -> tuple[int, int]:
    """Refuse what a job array cannot serve; return the trials left to run and those running."""
    if is_sqlite(url):
        raise HpoError(
            "hpo slurm needs a database every node reaches: --storage postgresql://USER:PASSWORD@HOST:5432/DB "
            "or $HPO_STORAGE (the embedded database is one machine's file)"
        )
    study = load(open_storage(url), name, redact(url))
    n_trials = require_spec(study).study.n_trials
    p = progress(study, n_trials)
    if p.done:
        raise HpoError(f"study {name!r} is finished ({p.finished} of {n_trials} trials): no work for a job array")
    return max(n_trials - p.slots, 0) + p.waiting, p.running


def submit(script: Path) -> str:
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise HpoError(f"sbatch not found: run hpo slurm on a Slurm login node (or `sbatch {script}` there)")
    done = subprocess.run([sbatch, "--parsable", str(script)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or [f"exit code {done.returncode}"]
        raise HpoError(f"sbatch refused the job: {lines[-1]} (script: {script})")
    return done.stdout.strip().split(";")[0]


def run_slurm_command(job: SlurmJob, url: str, *, dry_run: bool) -> None:
    left, running = check_study(url, job.study)
    write_job(job, url)
    if job.tasks * job.slots > max(left, 1):
        typer.echo(
            f"note: {job.tasks * job.slots} worker processes for {left} trial(s) left to start: the rest wait, "
            f"holding their GPUs, until the study ends (taking over retries); --array {max(left // job.slots, 1)} "
            "would not",
            err=True,
        )
    each = f"{job.gpus_per_task} GPU(s), {job.cpus_per_task} CPUs" if job.gpus_per_task else f"{job.cpus_per_task} CPUs"
    if dry_run:
        typer.echo(job_script(job), nl=False)
        typer.echo(f"wrote {job.script_path} and {job.env_path} (mode 600); `sbatch {job.script_path}` submits it")
        return
    job_id = submit(job.script_path)
    head = f"submitted job {job_id}: {job.tasks} task(s) of `hpo worker --study {job.study}` ({each} each)"
    typer.echo(f"{head}; {left} trial(s) to start, {running} running")
    typer.echo(f"  script  {job.script_path}  (storage URL in {job.env_path}, mode 600)")
    typer.echo(f"  logs    {job.log_dir}/{job_id}_<task>.log")
    typer.echo(f"  watch   squeue -j {job_id}   ·   hpo status {job.study} --watch")
    typer.echo(f"  stop    scancel {job_id}   (a stopped task's trial is queued for retry and resumed)")
