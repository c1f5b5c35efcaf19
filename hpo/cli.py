"""The ``hpo`` command: parse, call one function. Errors a user can fix print as one line
(``error: ...``) with exit code 2, never a traceback."""

from __future__ import annotations

import functools
import inspect
import os
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from hpo import __version__
from hpo.errors import HOST_FAULT_EXIT, HostFault, HpoError, disk_full_at, is_disk_full
from hpo.service.names import DEFAULT_ARTIFACTS

# Renamed long options, old name → new: old scripts keep working, help shows only the new name.
RENAMED_FLAGS = {"out": "output", "new-name": "name"}


def renamed_flag(name: str) -> str:
    """click's token normaliser: an option's name without its dashes, as declared or as typed."""
    return RENAMED_FLAGS.get(name, name)


def without_flag_types(params: list[Any]) -> list[Any]:
    """typer's rich help prints a flag's value type (``--detach <bool>``, ``--help <bool>``) though a
    flag takes no value, where its plain help prints none; an empty metavar leaves that cell blank."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


WATCH_SECONDS = 5.0
OPTIONAL_VALUES = {"--watch": str(WATCH_SECONDS)}  # options whose value may be left out: what it then is


def with_optional_values(args: list[str]) -> list[str]:
    """``--watch`` alone (last, or before anything but a number) reads as ``--watch 5``: typer has no
    option whose value may be left out."""
    out = []
    for i, arg in enumerate(args):
        out.append(arg)
        if arg in OPTIONAL_VALUES and (i + 1 == len(args) or not is_number(args[i + 1])):
            out.append(OPTIONAL_VALUES[arg])
    return out


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return without_flag_types(super().get_params(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, with_optional_values(args))


class Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return without_flag_types(super().get_params(ctx))


app = typer.Typer(
    cls=Group,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"token_normalize_func": renamed_flag},
    help="Hyperparameter optimisation for image diffusion models.",
)
F = TypeVar("F", bound=Callable[..., Any])
STATE = {"verbose": False}


def summary_line(doc: str | None) -> str | None:
    """A docstring's first paragraph on one line: typer's command list would keep its line breaks."""
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split()) if doc else None


def command(name: str) -> Callable[[F], F]:
    """A CLI command whose user errors become one line and exit code 2 (75 when the host stopped it: a
    full disk, which the same command continues once mended)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except HpoError as err:
                typer.echo(f"error: {err}", err=True)
                raise typer.Exit(HOST_FAULT_EXIT if isinstance(err, HostFault) else 2) from None
            except Exception as err:  # a write no layer below said in words: still one line, if the disk is full
                if not is_disk_full(err):
                    raise
                typer.echo(f"error: {disk_full_at(err, [Path.cwd(), Path(tempfile.gettempdir())])}", err=True)
                raise typer.Exit(HOST_FAULT_EXIT) from None
            except KeyboardInterrupt:
                typer.echo("interrupted", err=True)
                raise typer.Exit(130) from None

        app.command(name, cls=Command, short_help=summary_line(fn.__doc__))(run)
        return fn

    return wrap


def logs() -> None:
    from hpo.commands.logs import setup_logging

    setup_logging(STATE["verbose"])


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"hpo {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="debug logging")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=show_version, is_eager=True, help="print the version")
    ] = False,
) -> None:
    """Hyperparameter optimisation for image diffusion models."""
    STATE["verbose"] = verbose
    if os.environ.get("HPO_CPU_BF16") is not None:  # checked before any work; torch is imported only then
        from hpo.training.runtime import cpu_bf16

        try:
            cpu_bf16()
        except HpoError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(2) from None


SpecArg = Annotated[Path, typer.Argument(help="search-space spec (YAML)", show_default=False)]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="override a setting: train.lr=1e-3 (section defaults to train)")
]
StorageOpt = Annotated[
    str | None, typer.Option("--storage", help="database URL (else $HPO_STORAGE, else ./hpo.db)", show_default=False)
]
ArtifactsOpt = Annotated[Path, typer.Option("--artifacts", help="shared artifact store: grids, checkpoints, logs")]
MaxNfeOpt = Annotated[
    int | None,
    typer.Option(
        "--max-nfe",
        help="the best trial and sampling combination within this many network evaluations per image "
        "(steps, twice under guidance)",
        min=1,
    ),
]
ThreadsOpt = Annotated[int | None, typer.Option(help="CPU threads for torch (default: all cores)", min=1)]
WorkerThreadsOpt = Annotated[
    int | None,
    typer.Option("--threads", help="CPU threads for torch per local worker (default: the cores split between them)",
                 min=1),
]  # fmt: skip
LocalWorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers", help="local workers (default: one per GPU --gpus names, else 1 on the embedded database, else 0)",
        min=0,
    ),
]  # fmt: skip
WORKER_INDEX_HELP = "this worker's index (a task's, a pod's): its n processes offset the sampler seed by index·n+0…n−1"
PerGpuOpt = Annotated[
    int, typer.Option("--per-gpu", help="worker processes sharing each GPU (short trials of small networks)", min=1)
]
LocalGpusOpt = Annotated[
    str, typer.Option("--gpus", help="'all', 'cpu' or indices like 0,1: the GPUs local workers take in turn")
]


ImagesArg = Annotated[Path, typer.Argument(help="a folder of images; subfolders are classes", show_default=False)]
ImageSizeOpt = Annotated[
    int | None, typer.Option(help="train at this size (default: the largest of 32/64/128/256 the images have)")
]


@command("init")
def init_cmd(
    images: ImagesArg,
    out: Annotated[Path, typer.Option("--output", "-o", help="a spec file to write (YAML)", show_default=False)],
    image_size: ImageSizeOpt = None,
    gpu_memory: Annotated[
        float | None, typer.Option("--gpu-memory", help="plan for a GPU with this many GB (default: this machine)")
    ] = None,
    name: Annotated[str | None, typer.Option(help="the study's name (default FOLDER-SIZE)")] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing spec")] = False,
) -> None:
    """Write a commented spec for a folder of images: size, network, budgets, batch sizes, scoring, search."""
    from hpo.commands.init import run_init

    logs()
    for text in run_init(images, out, image_size=image_size, gpu_memory_gb=gpu_memory, name=name, force=force):
        typer.echo(text)


@command("train")
def train_cmd(
    spec: Annotated[Path | None, typer.Argument(help="search-space spec (YAML)", show_default=False)] = None,
    set_: SetOpt = None,
    out: Annotated[Path, typer.Option("--output", "-o", help="a run folder: grids, checkpoint, logs")] = Path(
        "runs/train"
    ),
    from_: Annotated[
        str | None, typer.Option("--from", help="reproduce a trial: STUDY:TRIAL (its spec and parameters)")
    ] = None,
    storage: StorageOpt = None,
    threads: ThreadsOpt = None,
) -> None:
    """Train one configuration by hand: the spec's fixed settings, its first baseline, then --set."""
    from hpo.commands.train import run_train
    from hpo.training.runtime import set_threads

    logs()
    set_threads(threads)
    run_train(spec, set_ or [], out, source=from_, storage=storage)


@command("launch")
def launch_cmd(
    spec: SpecArg,
    storage: StorageOpt = None,
    workers: LocalWorkersOpt = None,
    detach: Annotated[bool, typer.Option("--detach", help="start and return at once")] = False,
    name: Annotated[
        str | None, typer.Option("--name", help="the study to create (default: the spec's study.name)")
    ] = None,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
    skip_doctor: Annotated[
        bool, typer.Option("--skip-doctor", help="start without the `hpo doctor --fast` checks")
    ] = False,
    warm_start: Annotated[
        str | None,
        typer.Option(help="a study in the same storage: its trials inform the sampler, its best run first"),
    ] = None,
    threads: WorkerThreadsOpt = None,
    gpus: LocalGpusOpt = "all",
) -> None:
    """Create (or resume) the study for SPEC, run local workers, follow progress, then report."""
    from hpo.commands.launch import run_launch
    from hpo.service.local import LocalWorkers
    from hpo.training.runtime import set_threads

    logs()
    set_threads(threads)  # the preflight doctor runs here
    run_launch(
        spec, storage=storage, local=LocalWorkers(workers, threads=threads, gpus=gpus), detach=detach, name=name,
        artifacts=artifacts, doctor=not skip_doctor, warm_from=warm_start,
    )  # fmt: skip


class StoppedDuringStartup(KeyboardInterrupt):
    pass


def _stop_during_startup(signum: int, frame: FrameType | None) -> None:
    raise StoppedDuringStartup


@command("run")
def run_cmd(
    images: ImagesArg,
    budget: Annotated[
        str, typer.Option("--budget", help="wall-clock time to spend, e.g. 8h, 90m, 1h30m", show_default=False)
    ],
    out: Annotated[
        Path | None, typer.Option("--output", "-o", help="the run's folder (default runs/FOLDER): re-run to continue")
    ] = None,
    image_size: ImageSizeOpt = None,
    storage: Annotated[
        str | None, typer.Option("--storage", help="database URL (default: SQLite in the run's folder)")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", help="local search workers (default: --per-gpu on each GPU, else 1)", min=1),
    ] = None,
    per_gpu: PerGpuOpt = 1,
    threads: WorkerThreadsOpt = None,
    gpus: LocalGpusOpt = "all",
    plan_only: Annotated[
        bool, typer.Option("--plan-only", help="print the plan and the ledger it starts with; run nothing")
    ] = False,
    skip_doctor: Annotated[
        bool, typer.Option("--skip-doctor", help="start the search without the `hpo doctor --fast` checks")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="the study sampler's and every trial's training seed")] = 0,
    split: Annotated[
        str,
        typer.Option("--split", help="percent of the budget for the search / the decision; the final run the rest"),
    ] = "50/10",
    lr_schedule: Annotated[
        str,
        typer.Option(
            "--lr-schedule",
            help="cosine: every run decays to its end, the final run starts from scratch; wsd: flat, then a "
            "cooldown, and the final run continues the winner's state (docs/spec.md)",
        ),
    ] = "cosine",
) -> None:
    """From a folder of images to a trained, exported model within a time budget.

    Plan (hpo init's, timed here), preflight (hpo doctor --fast), search (the study), decide (the best
    configurations on fresh seeds, when the budget affords it), the final run (the winner trained with what is
    left), its sampling sweep, and the export, with a ledger of planned and spent time per phase. Ctrl-C stops
    it; the same command continues it."""
    from hpo.commands.run import run_budgeted
    from hpo.run.options import RunOptions, parse_schedule
    from hpo.run.split import parse_split
    from hpo.training.runtime import set_threads

    logs()
    set_threads(threads)
    opts = RunOptions(
        images=images, budget=budget, out=out, image_size=image_size, storage=storage, workers=workers,
        threads=threads, gpus=gpus, plan_only=plan_only, doctor=not skip_doctor, seed=seed,
        split=parse_split(split), per_gpu=per_gpu, lr_schedule=parse_schedule(lr_schedule),
    )  # fmt: skip
    run_budgeted(opts)


@command("worker")
def worker_cmd(
    study: Annotated[str | None, typer.Option(help="serve this study only (default: every unfinished one)")] = None,
    storage: StorageOpt = None,
    gpus: Annotated[
        str, typer.Option(help="'all', 'cpu' or indices like 0,1: --per-gpu processes on each GPU")
    ] = "all",
    max_trials: Annotated[int | None, typer.Option(help="exit after this many trials", min=1)] = None,
    exit_when_idle: Annotated[bool, typer.Option("--exit-when-idle", help="exit when no study has work left")] = False,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
    cache_dir: Annotated[Path | None, typer.Option(help="data and reference-statistics cache")] = None,
    worker_index: Annotated[int, typer.Option(help=WORKER_INDEX_HELP, min=0)] = 0,
    poll: Annotated[float, typer.Option(help="seconds between looks for work", min=0.01)] = 5.0,
    threads: ThreadsOpt = None,
    per_gpu: PerGpuOpt = 1,
    sharing: Annotated[int, typer.Option(hidden=True, min=1)] = 1,  # set by a parent for its children
    reports: Annotated[Path, typer.Option(help="where the worker that finishes a study writes its report")] = Path(
        "reports"
    ),
) -> None:
    """Pull trials from the storage's studies and run them."""
    signal.signal(signal.SIGTERM, _stop_during_startup)  # serve() installs the real handler
    logs()
    try:
        from hpo.commands.worker import run_workers
        from hpo.service.urls import resolve_url
        from hpo.service.worker import WorkerOptions

        opts = WorkerOptions(
            url=resolve_url(storage), study=study, max_trials=max_trials, exit_when_idle=exit_when_idle,
            artifact_dir=artifacts, cache_dir=cache_dir, worker_index=worker_index, poll_seconds=poll, threads=threads,
            sharing=sharing,
        )  # fmt: skip
        run_workers(opts, gpus, reports, per_gpu=per_gpu)
    except StoppedDuringStartup:
        typer.echo("stopped by SIGTERM during start-up; no trial was running", err=True)


@command("slurm")
def slurm_cmd(
    study: Annotated[str, typer.Argument(help="the study the workers serve (create it with hpo launch)")],
    array: Annotated[int, typer.Option("--array", help="tasks in the job array: one hpo worker each", min=1)],
    storage: StorageOpt = None,
    gpus_per_task: Annotated[int, typer.Option(help="GPUs per task (0: workers on the CPU)", min=0)] = 1,
    per_gpu: PerGpuOpt = 1,
    cpus_per_task: Annotated[int, typer.Option(help="CPUs per task, split between its processes", min=1)] = 4,
    partition: Annotated[str | None, typer.Option(help="Slurm partition (default: the cluster's)")] = None,
    time: Annotated[str | None, typer.Option("--time", help="Slurm time limit per task, e.g. 04:00:00")] = None,
    sbatch_arg: Annotated[
        list[str] | None, typer.Option("--sbatch-arg", help="one more #SBATCH option: --account=lab, --qos=high")
    ] = None,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
    reports: Annotated[Path, typer.Option(help="where the task that finishes the study writes its report")] = Path(
        "reports"
    ),
    cache_dir: Annotated[Path | None, typer.Option(help="data and reference-statistics cache")] = None,
    folder: Annotated[
        Path | None, typer.Option("--dir", help="script, storage.env and logs (default: .hpo/slurm/STUDY)")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="write and print the job script; submit nothing")] = False,
) -> None:
    """Submit a Slurm job array of workers for STUDY (PostgreSQL); each task exits when the study is done.

    Paths are resolved here and must be on a filesystem the nodes share. The storage URL goes into
    an environment file only you can read, never into the script or a command line.
    """
    from hpo.commands.slurm import SLURM_DIR, SlurmJob, run_slurm_command
    from hpo.service.names import path_component
    from hpo.service.urls import resolve_url

    logs()
    job = SlurmJob(
        study=study, tasks=array, gpus_per_task=gpus_per_task, per_gpu=per_gpu, cpus_per_task=cpus_per_task,
        partition=partition, time=time, sbatch_args=tuple(sbatch_arg or ()), artifact_dir=artifacts,
        report_dir=reports, cache_dir=cache_dir, folder=folder or SLURM_DIR / path_component(study),
    )  # fmt: skip
    run_slurm_command(job, resolve_url(storage), dry_run=dry_run)


@command("status")
def status_cmd(
    study: Annotated[str | None, typer.Argument(help="a study name (default: list studies)")] = None,
    storage: StorageOpt = None,
    json_: Annotated[
        bool, typer.Option("--json", help="the same as JSON: each study's summary, or the study's and one per trial")
    ] = False,
    wide: Annotated[bool, typer.Option("--wide", help="every column of the trials table, however wide")] = False,
    watch: Annotated[
        float | None,
        typer.Option(
            "--watch",
            metavar="[SECONDS]",
            min=0.1,
            help=f"refresh every SECONDS (alone: {WATCH_SECONDS:g}) until the study is finished; Ctrl-C stops",
        ),
    ] = None,
) -> None:
    """Studies, or one study's trials with their state, parameters, scores and failure reasons.

    The trials table has one row per attempt; its columns:
    #: the trial's number.
    state: COMPLETE, PRUNED (stopped early), FAIL, RUNNING or WAITING; "FAIL → #12": retried as trial 12.
    FID or classifier-FID: the study's score (lower is better), for complete trials.
    val_rel@last: the validation metric at the last evaluation point reached (held-out error over a Wiener filter's).
    gap@last: held-out over training error there: 1 while the model generalises, more as it memorises.
    Then one column per searched parameter: the trial's value.
    best sampling: the guidance w, sampler steps and eta that scored best in the trial's sampling sweep.
    prec/recall: precision (samples that look real) and recall (real images the samples cover), 0 to 1.
    stop: where evaluation points were scored (budget ladders): too_early, improving, plateau or copying, since when.
    hardware: the share of step time spent waiting for data; the peak resident memory.
    ran on: host, worker index and device (host/w0 cpu, host/w1 gpu 3).
    reason: why a pruned or failed trial did not complete.

    Columns that do not fit the terminal ($COLUMNS, else its width, else 100) go, least important first:
    ran on, hardware, prec/recall, stop, gap@last, best sampling, reason, then parameters; --wide shows all.
    """
    import sys

    from hpo.commands.status import all_finished, status_json, status_text, watch_status
    from hpo.files import json_text
    from hpo.service.status_view import terminal_width
    from hpo.service.urls import resolve_url

    url, width = resolve_url(storage), None if wide else terminal_width()

    def show() -> str:
        if json_:  # one line per refresh with --watch
            return json_text(status_json(url, study), indent=None if watch is not None else 2)
        return status_text(url, study, width)

    if watch is None:
        typer.echo(show())
        return
    watch_status(show, lambda: all_finished(url, study), every=watch, clear=sys.stdout.isatty() and not json_)


@command("doctor")
def doctor_cmd(
    spec: Annotated[
        Path, typer.Argument(help="search-space spec (YAML), or a study's name: its stored spec", show_default=False)
    ],
    storage: StorageOpt = None,
    fast: Annotated[
        bool, typer.Option("--fast", help="data range, overfit, gradients, conditioning, schedule only")
    ] = False,
    out: Annotated[Path, typer.Option("--output", "-o", help="a folder: the grid of preprocessed images")] = Path(
        "runs/doctor"
    ),
    memory_limit_gb: Annotated[
        float | None, typer.Option(help="memory budget (default: GPU memory or 80% RAM)")
    ] = None,
    workers: Annotated[int, typer.Option(help="workers, for the predicted study time", min=1)] = 1,
    per_gpu: PerGpuOpt = 1,
    threads: ThreadsOpt = None,
) -> None:
    """Check data, model, schedule and training step for the classic mistakes; exit 1 on any failure."""
    from hpo.commands.doctor import run_doctor_command
    from hpo.training.runtime import set_threads

    logs()
    set_threads(threads)
    code = run_doctor_command(
        spec, storage=storage, fast=fast, out=out, memory_limit_gb=memory_limit_gb, workers=workers, per_gpu=per_gpu
    )
    if code:
        raise typer.Exit(code)


@command("report")
def report_cmd(
    study: Annotated[str, typer.Argument(help="study name")],
    storage: StorageOpt = None,
    out: Annotated[
        Path | None, typer.Option("--output", "-o", help="an HTML file (default reports/STUDY.html)")
    ] = None,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
    open_: Annotated[bool, typer.Option("--open", help="then open it in a browser, where there is one")] = False,
) -> None:
    """Write the study's self-contained HTML report (works on running studies too)."""
    from hpo.commands.report import open_in_browser, run_report
    from hpo.service.urls import resolve_url

    logs()
    path = run_report(resolve_url(storage), study, out=out, artifacts=artifacts)
    typer.echo(f"report: {path}")
    if open_:
        typer.echo(open_in_browser(path))


@command("narrow")
def narrow_cmd(
    study: Annotated[str, typer.Argument(help="study name")],
    out: Annotated[Path, typer.Option("--output", "-o", help="a spec file to write (YAML)")],
    name: Annotated[str | None, typer.Option("--name", help="the study to create (default STUDY-next)")] = None,
    storage: StorageOpt = None,
) -> None:
    """Write the next study's spec from this one's evidence.

    The parameters that mattered get ranges narrowed around the best trials, the others are fixed at the best
    value, each change with its evidence as a comment."""
    from hpo.commands.narrow import run_narrow
    from hpo.service.urls import resolve_url

    logs()
    for line in run_narrow(resolve_url(storage), study, out, name):
        typer.echo(line)
    typer.echo(f"spec: {out} (launch it with `hpo launch {out} --warm-start {study}`: this study's trials inform it)")


@command("confirm")
def confirm_cmd(
    study: Annotated[str, typer.Argument(help="the study whose winners to confirm")],
    storage: StorageOpt = None,
    top: Annotated[int, typer.Option(help="configurations to retrain (plus the baseline)", min=1)] = 3,
    seeds: Annotated[int, typer.Option(help="fresh seeds per configuration", min=1)] = 3,
    kimg: Annotated[float | None, typer.Option(help="training budget (default: the study's)", min=0.001)] = None,
    budgets: Annotated[
        str | None,
        typer.Option(help="multiples of the study's budget, e.g. 1,4,16; one run per seed scores every budget"),
    ] = None,
    widths: Annotated[
        str | None,
        typer.Option(help="a width ladder: multiples of the base channels, e.g. 0.5,1,2; an lr grid at each"),
    ] = None,
    lrs: Annotated[int, typer.Option(help="--widths: learning rates per width, a factor 2 apart", min=3)] = 5,
    workers: LocalWorkersOpt = None,
    detach: Annotated[bool, typer.Option("--detach", help="queue the trials and return at once")] = False,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
    threads: WorkerThreadsOpt = None,
    gpus: LocalGpusOpt = "all",
    json_: Annotated[
        bool, typer.Option("--json", help="print the verdict as JSON on stdout (progress on stderr)")
    ] = False,
) -> None:
    """Retrain the top configurations with fresh seeds, through the workers, and give a verdict."""
    from hpo.commands.confirm import request_of, run_confirm
    from hpo.service.local import LocalWorkers

    logs()
    request = request_of(top=top, seeds=seeds, kimg=kimg, budgets=budgets, widths=widths, lrs=lrs)
    run_confirm(study, request, storage=storage, detach=detach, artifacts=artifacts, as_json=json_,
                local=LocalWorkers(workers, threads=threads, gpus=gpus))  # fmt: skip


@command("export")
def export_cmd(
    source: Annotated[str, typer.Argument(help="STUDY:TRIAL, or STUDY: its best complete trial", show_default=False)],
    out: Annotated[Path, typer.Option("--output", "-o", help="a folder, new or empty", show_default=False)],
    storage: StorageOpt = None,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
    max_nfe: MaxNfeOpt = None,
) -> None:
    """Take a trial away: its EMA weights, a spec `hpo train` retrains it from, its best sampling settings."""
    from hpo.commands.export import run_export

    logs()
    paths, budget = run_export(source, out, storage=storage, artifacts=artifacts, max_nfe=max_nfe)
    if budget is not None:
        typer.echo(budget)
    for path in paths:
        typer.echo(f"wrote {path}")
    typer.echo(f"sample it with `hpo sample {out}`")


@command("sample")
def sample_cmd(
    source: Annotated[
        str, typer.Argument(help="an `hpo export` folder, or STUDY[:TRIAL] (the best without one)", show_default=False)
    ],
    n: Annotated[int, typer.Option("-n", help="samples", min=1)] = 64,
    out: Annotated[Path, typer.Option("--output", "-o", help="a PNG file: the grid")] = Path("samples.png"),
    seed: Annotated[int, typer.Option(help="noise seed: the same seed draws the same samples", min=0)] = 0,
    guidance: Annotated[float | None, typer.Option(help="guidance scale (default: the trial's best)")] = None,
    steps: Annotated[int | None, typer.Option(help="sampler steps (default: the trial's best)", min=1)] = None,
    storage: StorageOpt = None,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
    threads: ThreadsOpt = None,
    max_nfe: MaxNfeOpt = None,
) -> None:
    """Draw samples from a trained trial at its best sampling settings and save them as a grid."""
    from hpo.commands.sample import run_sample
    from hpo.training.runtime import set_threads

    logs()
    set_threads(threads)
    path, sampling, budget = run_sample(
        source, out, n=n, seed=seed, guidance=guidance, steps=steps, storage=storage, artifacts=artifacts,
        max_nfe=max_nfe,
    )  # fmt: skip
    if budget is not None:
        typer.echo(budget)
    typer.echo(f"{n} samples ({sampling.words}, seed {seed}): {path}")


@command("dashboard")
def dashboard_cmd(
    storage: StorageOpt = None,
    host: Annotated[str, typer.Option(help="bind address; 0.0.0.0 inside a container")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8080,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
) -> None:
    """Serve optuna-dashboard on the study storage, with sample grids and checkpoints per trial."""
    from hpo.commands.dashboard import run_dashboard
    from hpo.service.urls import resolve_url

    run_dashboard(resolve_url(storage), host=host, port=port, artifacts=artifacts)


@command("tensorboard")
def tensorboard_cmd(
    study: Annotated[str | None, typer.Argument(help="one study (default: every study)")] = None,
    host: Annotated[str, typer.Option(help="bind address; 0.0.0.0 inside a container")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 6006,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
    wait: Annotated[
        bool, typer.Option("--wait", help="serve before any trial has written logs (they appear as trials train)")
    ] = False,
) -> None:
    """Serve TensorBoard on the trials' event logs: curves, sample grids, HParams."""
    from hpo.commands.tensorboard import run_tensorboard

    run_tensorboard(artifacts, study, host=host, port=port, wait=wait)


@command("fetch-weights")
def fetch_weights_cmd(
    dest: Annotated[Path | None, typer.Option(help="where to write (default $HPO_FID_WEIGHTS or ~/.cache/hpo)")] = None,
) -> None:
    """Download clean-fid's Inception weights once: SHA-256 checked, written atomically."""
    from hpo.scoring.weights import fetch_weights, weights_path

    path = fetch_weights(dest or weights_path())
    typer.echo(f"Inception weights verified at {path}")


def main() -> None:
    app()
