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


def main() -> None:
    try:
        app()
    except HpoError as err:
        typer.echo(f"error: {err}", err=True)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        raise SystemExit(130) from None
