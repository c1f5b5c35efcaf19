"""``hpo doctor``: print the checklist; exit 1 on any failure."""

from __future__ import annotations

from pathlib import Path

import typer

from hpo.doctor.checklist import Checklist
from hpo.doctor.run import run_doctor
from hpo.errors import HpoError
from hpo.outputs import output_folder
from hpo.service.names import DEFAULT_ARTIFACTS
from hpo.spec.loading import load_spec
from hpo.spec.spec import Spec


def spec_or_study(target: Path, storage: str | None) -> Spec:
    """The spec file ``target``, or when no such file exists, the spec stored in the study of that name."""
    if target.exists() or target.suffix in (".yaml", ".yml"):
        return load_spec(target)
    from hpo.service.storage import open_storage
    from hpo.service.study import load, require_spec
    from hpo.service.urls import redact, resolve_url

    url = resolve_url(storage)
    try:
        return require_spec(load(open_storage(url, must_exist=True), str(target), redact(url)))
    except HpoError as err:
        raise HpoError(f"{target}: no such spec file, and not a study either ({err})") from None


def run_doctor_command(
    target: Path,
    *,
    storage: str | None,
    fast: bool,
    out: Path,
    memory_limit_gb: float | None,
    workers: int,
    per_gpu: int = 1,
) -> int:
    """Each check is printed as it finishes; a long one says every few seconds that it is still running.
    ``out`` is checked before the spec is read."""
    output_folder(out, holds="the grid of preprocessed images")
    spec = spec_or_study(target, storage)
    checklist = Checklist(lambda c: typer.echo(c.line()), lambda text: typer.echo(text, err=True))
    checks = run_doctor(
        spec, fast=fast, out_dir=out, artifacts=DEFAULT_ARTIFACTS, memory_limit_gb=memory_limit_gb, workers=workers,
        per_gpu=per_gpu, checklist=checklist,
    )  # fmt: skip
    failed = [c for c in checks if c.status == "fail"]
    typer.echo(f"{len(failed)} failed, {sum(c.status == 'warn' for c in checks)} warnings, {len(checks)} checks")
    return 1 if failed else 0
