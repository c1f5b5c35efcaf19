"""Names never decide where files go: unsafe study names are refused in one line at launch and on
read commands (SQLite and PostgreSQL), and studies that other tools created with any name at all get
their files inside the artifact store and the reports folder."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from hpo.records import SPEC_ATTR
from hpo.report.render import report_path
from hpo.service.names import path_component
from hpo.service.storage import open_storage
from hpo.service.worker import Worker, WorkerOptions
from hpo.spec.loading import load_spec
from tests.cli import run_cli
from tests.service_helpers import write_spec

HOSTILE = {
    "traversal": "../../../../escaped-by-study-name",
    "absolute": "/tmp/escaped-absolute",
    "nested": "a/b/c",
    "nul": "a\x00b",
    "long": "x" * 10_000,
    "dot": "..",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'hpo.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_an_unsafe_name_is_refused_in_one_line_at_launch_and_by_read_commands(
    kind: str, url: str, tmp_path: Path
) -> None:
    name = HOSTILE[kind]
    spec = write_spec(tmp_path)
    code, _, err = run_cli(["launch", str(spec), "--name", name, "--storage", url, "--detach", "--workers", "0"])
    assert code == 2 and err.startswith("error: --name: ") and err.count("\n") == 1, err[:300]
    for command in (["status", name], ["report", name], ["confirm", name]):
        code, _, err = run_cli([*command, "--storage", url])
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (command, err[:300])


def test_studies_created_elsewhere_with_any_name_keep_their_files_inside_the_stores(tmp_path: Path) -> None:
    """Two studies another tool created under traversing names, served by one worker."""
    raw = load_spec(write_spec(tmp_path, study={"name": "safe", "n_trials": 1})).to_dict()
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    for kind in ("traversal", "absolute"):
        study = optuna.create_study(study_name=HOSTILE[kind], storage=open_storage(url))
        study.set_user_attr(SPEC_ATTR, json.dumps(raw))
    artifacts = tmp_path / "work" / "artifacts"
    Worker(WorkerOptions(url=url, exit_when_idle=True, artifact_dir=artifacts, poll_seconds=0.1)).serve()
    for kind in ("traversal", "absolute"):
        (trial,) = optuna.load_study(study_name=HOSTILE[kind], storage=url).get_trials()
        assert trial.state == optuna.trial.TrialState.COMPLETE
    written = [p for p in tmp_path.rglob("*") if p.is_file() and "cache" not in p.parts]
    outside = [p for p in written if not p.is_relative_to(artifacts) and p.parent != tmp_path]
    assert not outside, outside
    for name in HOSTILE.values():
        component = path_component(name)
        assert "/" not in component and "\x00" not in component and component not in (".", "..")
        assert len(component) <= 60 and report_path(name).parent == Path("reports")
    assert path_component("a/b") != path_component("a_b")  # two unsafe names never share a folder
