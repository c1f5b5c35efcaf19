"""``hpo report``: load a study and write its HTML report."""

from __future__ import annotations

from pathlib import Path

from hpo.report.render import report_path, write_report
from hpo.service.storage import open_storage, redact
from hpo.service.study import load


def run_report(url: str, study_name: str, *, out: Path | None, artifacts: Path) -> Path:
    study = load(open_storage(url, must_exist=True), study_name, redact(url))
    return write_report(study, out or report_path(study_name), artifact_dir=artifacts)
