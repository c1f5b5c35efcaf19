"""``hpo report``: load a study and write its HTML report."""

from __future__ import annotations

import re
from pathlib import Path

import optuna

from hpo.errors import HpoError
from hpo.report import write_report
from hpo.storage import open_storage, redact


def default_report_path(study_name: str) -> Path:
    return Path("reports") / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', study_name)}.html"


def run_report(url: str, study_name: str, *, out: Path | None, artifacts: Path) -> Path:
    try:
        study = optuna.load_study(study_name=study_name, storage=open_storage(url))
    except KeyError:
        raise HpoError(f"no study named {study_name!r} in {redact(url)}; `hpo status` lists them") from None
    return write_report(study, out or default_report_path(study_name), artifact_dir=artifacts)
