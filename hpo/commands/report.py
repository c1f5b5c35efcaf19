"""``hpo report``: load a study and write its HTML report."""

from __future__ import annotations

from pathlib import Path

from hpo.report.render import report_path, write_report
from hpo.service.storage import open_storage
from hpo.service.study import load
from hpo.service.urls import redact


def run_report(url: str, study_name: str, *, out: Path | None, artifacts: Path) -> Path:
    storage = open_storage(url, must_exist=True)
    study = load(storage, study_name, redact(url))
    return write_report(study, storage, out or report_path(study_name), artifact_dir=artifacts)
