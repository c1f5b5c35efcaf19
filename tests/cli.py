"""The CLI in-process: real argument parsing by the same click command the ``hpo`` script builds
(built once; typer's own runner rebuilds it on every call), no subprocess."""

from __future__ import annotations

import functools

import click
import typer
from click.testing import CliRunner

from hpo.cli import app


@functools.cache
def command() -> click.Command:
    built: click.Command = typer.main.get_command(app)  # type: ignore[assignment]
    return built


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``hpo ARGS``."""
    result = CliRunner().invoke(command(), args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr
