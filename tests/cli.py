"""The CLI in-process: real argument parsing by the same click command the ``hpo`` script builds
(built once; typer's own runner rebuilds it on every call), no subprocess."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

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


def hpo_in_process(*args: str, url: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``hpo ARGS`` in this process, in ``cwd`` with ``url`` as $HPO_STORAGE (unset without one): the
    in-process twin of :func:`tests.service_helpers.hpo` for tests where the process itself is not the
    point (about 5 s of imports saved per call)."""
    here = Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        result = CliRunner().invoke(command(), list(args), env={"HPO_STORAGE": url})
    finally:
        os.chdir(here)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["hpo", *args], result.exit_code, result.stdout, result.stderr)
