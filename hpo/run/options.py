"""What ``hpo run`` was asked: its options, and the folder, storage, worker count and command line they
give; every one a pure function of the options (a resumed run must plan the same)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from hpo.analysis.tables import duration
from hpo.errors import HpoError
from hpo.run.split import Split
from hpo.service.local import parse_gpus
from hpo.service.urls import resolve_url


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    images: Path
    budget: str  # as typed: 8h, 90m, 1h30m
    out: Path | None  # default runs/FOLDER
    image_size: int | None
    storage: str | None  # default SQLite in the run's folder
    workers: int | None  # local search workers (default: per_gpu on each GPU, else 1)
    threads: int | None
    gpus: str = "all"
    plan_only: bool = False
    doctor: bool = True  # False: --skip-doctor, the preflight is skipped
    per_gpu: int = 1  # search workers sharing each GPU, when workers is not given
    seed: int = 0  # the study sampler's and the trainer's seed
    split: Split = field(default_factory=Split)  # shares of search and decision; a new run's plan only
    lr_schedule: RunSchedule = "cosine"  # wsd: trials keep their stable state, the final run continues the winner's


RunSchedule = Literal["cosine", "wsd"]
RUN_SCHEDULES: tuple[RunSchedule, ...] = ("cosine", "wsd")


def parse_schedule(text: str) -> RunSchedule:
    """``--lr-schedule``: cosine (the default: measured better at equal kimg, docs/benchmarks.md) or wsd."""
    for name in RUN_SCHEDULES:
        if text == name:
            return name
    raise HpoError(f"--lr-schedule {text!r}: not one of {', '.join(RUN_SCHEDULES)}; give --lr-schedule cosine or wsd")


def run_folder(opts: RunOptions) -> Path:
    return opts.out or Path("runs") / (opts.images.resolve().name or "images")


def storage_url(opts: RunOptions, out: Path) -> str:
    """``--storage``, else SQLite in the run's folder (never $HPO_STORAGE: a run owns its study)."""
    return resolve_url(opts.storage or f"sqlite:///{out / 'hpo.db'}")


def command_line(opts: RunOptions, budget_s: float, out: Path) -> str:
    """The ``hpo run`` command that runs (or continues) this run: every option that shapes the plan."""
    given = {
        "--image-size": opts.image_size, "--storage": opts.storage, "--workers": opts.workers,
        "--per-gpu": None if opts.per_gpu == 1 else opts.per_gpu,
        "--threads": opts.threads, "--gpus": None if opts.gpus == "all" else opts.gpus,
        "--seed": opts.seed or None, "--split": None if opts.split == Split() else opts.split.words(),
        "--lr-schedule": None if opts.lr_schedule == "cosine" else opts.lr_schedule,
    }  # fmt: skip
    options = "".join(f" {k} {v}" for k, v in given.items() if v is not None)
    skip = "" if opts.doctor else " --skip-doctor"
    return f"hpo run {opts.images} --budget {duration(budget_s)} -o {out}{options}{skip}"


def worker_count(opts: RunOptions) -> int:
    """``--workers``, else ``--per-gpu`` on each GPU ``--gpus`` names, else 1 (the CPU), whatever the
    storage: a run serves its own study, other hosts' ``hpo worker`` may join it."""
    if opts.workers is not None:
        return opts.workers
    return opts.per_gpu * max(1, len(parse_gpus(opts.gpus)))
