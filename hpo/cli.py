"""The ``hpo`` command: parse, call one function. Errors a user can fix print as one line
(``error: ...``) with exit code 2, never a traceback."""

from __future__ import annotations

import functools
import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, TypeVar

import typer

from hpo import __version__
from hpo.errors import HpoError

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Hyperparameter optimisation for image diffusion models.",
)
F = TypeVar("F", bound=Callable[..., Any])
STATE = {"verbose": False}


def command(name: str) -> Callable[[F], F]:
    """A CLI command whose user errors become one line and exit code 2."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except HpoError as err:
                typer.echo(f"error: {err}", err=True)
                raise typer.Exit(2) from None
            except KeyboardInterrupt:
                typer.echo("interrupted", err=True)
                raise typer.Exit(130) from None

        app.command(name)(run)
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


SpecArg = Annotated[Path, typer.Argument(help="search-space spec (YAML)", show_default=False)]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="override a setting: train.lr=1e-3 (section defaults to train)")
]
StorageOpt = Annotated[
    str | None, typer.Option("--storage", help="database URL (else $HPO_STORAGE, else ./hpo.db)", show_default=False)
]
ArtifactsOpt = Annotated[Path, typer.Option("--artifacts", help="shared artifact store: grids, checkpoints, logs")]
ThreadsOpt = Annotated[int | None, typer.Option(help="CPU threads for torch (default: all cores)", min=1)]


@command("train")
def train_cmd(
    spec: Annotated[Path | None, typer.Argument(help="search-space spec (YAML)", show_default=False)] = None,
    set_: SetOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="folder for grids, checkpoint and logs")] = Path(
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
    workers: Annotated[
        int | None, typer.Option(help="local workers (default 1 on the embedded database, else 0)", min=0)
    ] = None,
    detach: Annotated[bool, typer.Option(help="start and return at once")] = False,
    new_name: Annotated[str | None, typer.Option(help="create the study under this name instead")] = None,
    artifacts: ArtifactsOpt = Path(".hpo/artifacts"),
    skip_doctor: Annotated[bool, typer.Option(help="start without the `hpo doctor --fast` checks")] = False,
    warm_start: Annotated[
        str | None,
        typer.Option(help="a study in the same storage: its trials inform the sampler, its best run first"),
    ] = None,
) -> None:
    """Create (or resume) the study for SPEC, run local workers, follow progress, then report."""
    from hpo.commands.launch import run_launch

    logs()
    run_launch(
        spec, storage=storage, workers=workers, detach=detach, new_name=new_name, artifacts=artifacts,
        doctor=not skip_doctor, warm_from=warm_start,
    )  # fmt: skip


class StoppedDuringStartup(KeyboardInterrupt):
    pass


def _stop_during_startup(signum: int, frame: FrameType | None) -> None:
    raise StoppedDuringStartup


@command("worker")
def worker_cmd(
    study: Annotated[str | None, typer.Option(help="serve this study only (default: every unfinished one)")] = None,
    storage: StorageOpt = None,
    gpus: Annotated[str, typer.Option(help="'all', 'cpu' or indices like 0,1: one process per GPU")] = "all",
    max_trials: Annotated[int | None, typer.Option(help="exit after this many trials", min=1)] = None,
    exit_when_idle: Annotated[bool, typer.Option(help="exit when no study has work left")] = False,
    artifacts: ArtifactsOpt = Path(".hpo/artifacts"),
    cache_dir: Annotated[Path | None, typer.Option(help="data and reference-statistics cache")] = None,
    worker_index: Annotated[int, typer.Option(help="offsets the sampler seed", min=0)] = 0,
    poll: Annotated[float, typer.Option(help="seconds between looks for work", min=0.01)] = 5.0,
    threads: ThreadsOpt = None,
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
        )  # fmt: skip
        run_workers(opts, gpus, reports)
    except StoppedDuringStartup:
        typer.echo("stopped by SIGTERM during start-up; no trial was running", err=True)


@command("status")
def status_cmd(
    study: Annotated[str | None, typer.Argument(help="a study name (default: list studies)")] = None,
    storage: StorageOpt = None,
) -> None:
    """Studies, or one study's trials with their state, parameters, scores and failure reasons."""
    from hpo.commands.status import status_text
    from hpo.service.urls import resolve_url

    typer.echo(status_text(resolve_url(storage), study))


@command("doctor")
def doctor_cmd(
    spec: Annotated[
        Path, typer.Argument(help="search-space spec (YAML), or a study's name: its stored spec", show_default=False)
    ],
    storage: StorageOpt = None,
    fast: Annotated[bool, typer.Option(help="data range, overfit, gradients, conditioning, schedule only")] = False,
    out: Annotated[Path, typer.Option("--out", "-o", help="folder for the grid of preprocessed images")] = Path(
        "runs/doctor"
    ),
    memory_limit_gb: Annotated[
        float | None, typer.Option(help="memory budget (default: GPU memory or 80% RAM)")
    ] = None,
    workers: Annotated[int, typer.Option(help="workers, for the predicted study time", min=1)] = 1,
    threads: ThreadsOpt = None,
) -> None:
    """Check data, model, schedule and training step for the classic mistakes; exit 1 on any failure."""
    from hpo.commands.doctor import run_doctor_command
    from hpo.training.runtime import set_threads

    logs()
    set_threads(threads)
    code = run_doctor_command(
        spec, storage=storage, fast=fast, out=out, memory_limit_gb=memory_limit_gb, workers=workers
    )
    if code:
        raise typer.Exit(code)


@command("report")
def report_cmd(
    study: Annotated[str, typer.Argument(help="study name")],
    storage: StorageOpt = None,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="HTML file (default reports/STUDY.html)")] = None,
    artifacts: ArtifactsOpt = Path(".hpo/artifacts"),
) -> None:
    """Write the study's self-contained HTML report (works on running studies too)."""
    from hpo.commands.report import run_report
    from hpo.service.urls import resolve_url

    logs()
    typer.echo(f"report: {run_report(resolve_url(storage), study, out=out, artifacts=artifacts)}")


@command("narrow")
def narrow_cmd(
    study: Annotated[str, typer.Argument(help="study name")],
    out: Annotated[Path, typer.Option("-o", "--out", help="the spec to write (YAML)")],
    name: Annotated[str | None, typer.Option(help="the new study's name (default STUDY-next)")] = None,
    storage: StorageOpt = None,
) -> None:
    """Write the next study's spec: ranges narrowed around the best trials for the parameters that
    mattered, the others fixed at the best value, each change with its evidence as a comment."""
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
        typer.Option(help="a ladder: multiples of the study's budget, e.g. 1,4,16; one run per seed gives every rung"),
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="local workers (default 1 on the embedded database)", min=0)
    ] = None,
    detach: Annotated[bool, typer.Option(help="queue the trials and return at once")] = False,
    artifacts: ArtifactsOpt = Path(".hpo/artifacts"),
) -> None:
    """Retrain the top configurations with fresh seeds, through the workers, and give a verdict."""
    from hpo.commands.confirm import run_confirm
    from hpo.errors import HpoError
    from hpo.service.confirm import parse_budgets

    logs()
    if budgets is not None and kimg is not None:
        raise HpoError("--budgets and --kimg: give one; --budgets 1,4,16 scores every rung of one long run")
    run_confirm(study, storage=storage, top=top, seeds=seeds, kimg=kimg, workers=workers, detach=detach,
                artifacts=artifacts, budgets=parse_budgets(budgets) if budgets is not None else None)  # fmt: skip


@command("dashboard")
def dashboard_cmd(
    storage: StorageOpt = None,
    host: Annotated[str, typer.Option(help="bind address; 0.0.0.0 inside a container")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8080,
    artifacts: ArtifactsOpt = Path(".hpo/artifacts"),
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
    artifacts: ArtifactsOpt = Path(".hpo/artifacts"),
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
