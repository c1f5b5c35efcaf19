"""The ``hpo`` command: parse, validate, call one function. Errors a user can fix print as one
line (``error: ...``) with exit code 2, never a traceback."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from hpo.errors import HpoError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Hyperparameter optimisation for image diffusion models.",
)

SpecArg = Annotated[Path, typer.Argument(help="search-space spec (YAML)", show_default=False)]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="override a setting: train.lr=1e-3 (section defaults to train)")
]


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("optuna", "sqlalchemy", "PIL", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@app.callback()
def root() -> None:
    """Hyperparameter optimisation for image diffusion models."""


@app.command("train")
def train_cmd(
    spec: SpecArg,
    set_: SetOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="folder for the sample grid and checkpoint")] = Path(
        "runs/train"
    ),
) -> None:
    """Train one configuration by hand: the spec's fixed settings, its first baseline, then --set."""
    from hpo.commands.train import run_train

    setup_logging()
    run_train(spec, set_ or [], out)


StorageOpt = Annotated[
    str | None, typer.Option("--storage", help="database URL (else $HPO_STORAGE, else ./hpo.db)", show_default=False)
]
ArtifactsOpt = Annotated[Path, typer.Option("--artifacts", help="shared artifact store: sample grids, checkpoints")]


@app.command("launch")
def launch_cmd(
    spec: SpecArg,
    storage: StorageOpt = None,
    workers: Annotated[
        int | None, typer.Option(help="local workers (default 1 on the embedded database, else 0)")
    ] = None,
    detach: Annotated[bool, typer.Option(help="start and return at once")] = False,
    new_name: Annotated[str | None, typer.Option(help="create the study under this name instead")] = None,
    artifacts: ArtifactsOpt = Path(".hpo/artifacts"),
    skip_doctor: Annotated[bool, typer.Option(help="start without the `hpo doctor --fast` checks")] = False,
) -> None:
    """Create (or resume) the study for SPEC, run local workers, follow progress, then report."""
    from hpo.commands.launch import run_launch

    setup_logging()
    run_launch(
        spec,
        storage=storage,
        workers=workers,
        detach=detach,
        new_name=new_name,
        artifacts=artifacts,
        doctor=not skip_doctor,
    )


@app.command("worker")
def worker_cmd(
    study: Annotated[str | None, typer.Option(help="serve this study only (default: every unfinished one)")] = None,
    storage: StorageOpt = None,
    gpus: Annotated[str, typer.Option(help="'all' or indices like 0,1: one process per GPU")] = "all",
    max_trials: Annotated[int | None, typer.Option(help="exit after this many trials")] = None,
    exit_when_idle: Annotated[bool, typer.Option(help="exit when no study has work left")] = False,
    artifacts: ArtifactsOpt = Path(".hpo/artifacts"),
    cache_dir: Annotated[Path | None, typer.Option(help="data and reference-statistics cache")] = None,
    worker_index: Annotated[int, typer.Option(help="offsets the sampler seed")] = 0,
    poll: Annotated[float, typer.Option(help="seconds between looks for work")] = 5.0,
    threads: Annotated[int | None, typer.Option(help="CPU threads for torch (default: all cores)")] = None,
) -> None:
    """Pull trials from the storage's studies and run them."""
    from hpo.commands.worker import run_workers
    from hpo.storage import resolve_url
    from hpo.worker import WorkerOptions

    setup_logging()
    opts = WorkerOptions(
        url=resolve_url(storage),
        study=study,
        max_trials=max_trials,
        exit_when_idle=exit_when_idle,
        artifact_dir=artifacts,
        cache_dir=cache_dir,
        worker_index=worker_index,
        poll_seconds=poll,
        threads=threads,
    )
    run_workers(opts, gpus)


@app.command("status")
def status_cmd(
    study: Annotated[str | None, typer.Argument(help="a study name (default: list studies)")] = None,
    storage: StorageOpt = None,
) -> None:
    """Studies, or one study's trials with their state, parameters, value and failure reason."""
    from hpo.commands.status import status_text
    from hpo.storage import resolve_url

    typer.echo(status_text(resolve_url(storage), study))


@app.command("doctor")
def doctor_cmd(
    spec: SpecArg,
    fast: Annotated[bool, typer.Option(help="data range, overfit, gradients and conditioning only")] = False,
    out: Annotated[Path, typer.Option("--out", "-o", help="folder for the grid of preprocessed images")] = Path(
        "runs/doctor"
    ),
    memory_limit_gb: Annotated[
        float | None, typer.Option(help="memory budget (default: GPU memory or 80% RAM)")
    ] = None,
    workers: Annotated[int, typer.Option(help="workers, for the predicted study time")] = 1,
) -> None:
    """Check data, model and training step for the classic mistakes; exit 1 on any failure."""
    from hpo.doctor.run import run_doctor
    from hpo.spec import load_spec

    setup_logging()
    checks = run_doctor(load_spec(spec), fast=fast, out_dir=out, memory_limit_gb=memory_limit_gb, workers=workers)
    for check in checks:
        typer.echo(check.line())
    failed = [c for c in checks if c.status == "fail"]
    typer.echo(f"{len(failed)} failed, {sum(c.status == 'warn' for c in checks)} warnings, {len(checks)} checks")
    if failed:
        raise SystemExit(1)


@app.command("report")
def report_cmd(
    study: Annotated[str, typer.Argument(help="study name")],
    storage: StorageOpt = None,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="HTML file (default reports/STUDY.html)")] = None,
    artifacts: ArtifactsOpt = Path(".hpo/artifacts"),
) -> None:
    """Write the study's self-contained HTML report (works on running studies too)."""
    from hpo.commands.report import run_report
    from hpo.storage import resolve_url

    typer.echo(f"report: {run_report(resolve_url(storage), study, out=out, artifacts=artifacts)}")


@app.command("dashboard")
def dashboard_cmd(
    storage: StorageOpt = None,
    host: Annotated[str, typer.Option(help="bind address; 0.0.0.0 inside a container")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8080,
    artifacts: ArtifactsOpt = Path(".hpo/artifacts"),
) -> None:
    """Serve optuna-dashboard on the study storage, with sample grids and checkpoints per trial."""
    from hpo.commands.dashboard import run_dashboard
    from hpo.storage import resolve_url

    run_dashboard(resolve_url(storage), host=host, port=port, artifacts=artifacts)


@app.command("fetch-weights")
def fetch_weights_cmd(
    dest: Annotated[Path | None, typer.Option(help="where to write (default $HPO_FID_WEIGHTS or ~/.cache/hpo)")] = None,
) -> None:
    """Download clean-fid's Inception weights once: SHA-256 checked, written atomically."""
    from hpo.scoring.weights import fetch_weights, weights_path

    path = fetch_weights(dest or weights_path())
    typer.echo(f"Inception weights verified at {path}")


def main() -> None:
    try:
        app()
    except HpoError as err:
        typer.echo(f"error: {err}", err=True)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        raise SystemExit(130) from None
