"""``hpo doctor``: print the checklist; exit 1 on any failure."""

from __future__ import annotations

from pathlib import Path

import typer

from hpo.doctor.checklist import Checklist
from hpo.doctor.run import run_doctor
from hpo.spec.loading import load_spec


def run_doctor_command(spec_path: Path, *, fast: bool, out: Path, memory_limit_gb: float | None, workers: int) -> int:
    """Each check is printed as it finishes; a long one says every few seconds that it is still running."""
    spec = load_spec(spec_path)
    checklist = Checklist(lambda c: typer.echo(c.line()), lambda text: typer.echo(text, err=True))
    checks = run_doctor(
        spec, fast=fast, out_dir=out, memory_limit_gb=memory_limit_gb, workers=workers, checklist=checklist
    )
    failed = [c for c in checks if c.status == "fail"]
    typer.echo(f"{len(failed)} failed, {sum(c.status == 'warn' for c in checks)} warnings, {len(checks)} checks")
    return 1 if failed else 0
