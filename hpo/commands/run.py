"""``hpo run FOLDER --budget 8h``: from a folder of images to an exported model, spending a wall-clock
budget. The run is :mod:`hpo.run` (its loop :func:`hpo.run.loop.run_budgeted`); this hands it the
report writer, a layer above it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from hpo.run import loop
from hpo.run.options import RunOptions


def write_report(study: optuna.Study, storage: Any, page: Path, artifacts: Path) -> None:
    from hpo.report.render import write_report as write

    write(study, storage, page, artifact_dir=artifacts)


def run_budgeted(opts: RunOptions) -> None:
    """Run (or continue) the budgeted run ``opts`` describes; see :func:`hpo.run.loop.run_budgeted`."""
    loop.run_budgeted(opts, write_report)
