"""``hpo report``: load a study and write its HTML report, and open it where there is a browser."""

from __future__ import annotations

import webbrowser
from pathlib import Path

from hpo.outputs import output_errors, output_file
from hpo.report.render import report_path, write_report
from hpo.service.storage import open_storage
from hpo.service.study import load
from hpo.service.urls import redact


def run_report(url: str, study_name: str, *, out: Path | None, artifacts: Path) -> Path:
    """Write the report to ``out`` (default ``reports/STUDY.html``), checked before the study is read."""
    path = output_file(out or report_path(study_name), example=report_path(study_name).name)
    storage = open_storage(url, must_exist=True)
    study = load(storage, study_name, redact(url))
    with output_errors(path):
        return write_report(study, storage, path, artifact_dir=artifacts)


def open_in_browser(path: Path) -> str:
    """Show the report in the user's browser; on a machine with none, a sentence saying so (never an error)."""
    try:
        opened = webbrowser.open(path.resolve().as_uri())
    except webbrowser.Error:
        opened = False
    return "opened in a browser" if opened else f"no browser found on this machine; open {path} where there is one"
