"""``hpo dashboard``: optuna-dashboard on the same storage resolution as every other command, with
the artifact store wired in so sample grids and checkpoints show per trial."""

from __future__ import annotations

from pathlib import Path

from optuna.artifacts import FileSystemArtifactStore

from hpo.service.storage import open_storage
from hpo.service.urls import redact


def run_dashboard(url: str, *, host: str, port: int, artifacts: Path) -> None:
    import optuna_dashboard

    storage = open_storage(url, must_exist=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    print(f"optuna-dashboard for {redact(url)} at http://{host}:{port}/dashboard (artifacts: {artifacts})", flush=True)
    optuna_dashboard.run_server(storage, host=host, port=port, artifact_store=FileSystemArtifactStore(str(artifacts)))
