"""Open one trial's runs in every tool the spec's ``tracking`` section names."""

from __future__ import annotations

from pathlib import Path

from hpo.spec.spec import TrackingSettings
from hpo.tracking.base import RunInfo, Runs, Tracker, log


def open_runs(settings: TrackingSettings, info: RunInfo, *, tensorboard_dir: Path, local_dir: Path) -> Runs:
    """``tensorboard_dir``: this trial's event-log folder; ``local_dir``: where offline W&B runs go."""
    runs: list[tuple[str, Tracker]] = []
    if settings.tensorboard:
        from hpo.tracking.tensorboard import TensorBoardRun

        runs.append(("tensorboard", TensorBoardRun(tensorboard_dir, info)))
    for name, settings_of in (("wandb", settings.wandb), ("mlflow", settings.mlflow)):
        if settings_of is None:
            continue
        try:
            runs.append((name, _open(name, settings, info, local_dir)))
        except Exception as err:  # a tracker that cannot start must not fail the trial
            log.warning(
                "%s tracking could not start (%s: %s); this trial goes on without it", name, type(err).__name__, err
            )
    return Runs(runs)


def _open(name: str, settings: TrackingSettings, info: RunInfo, local_dir: Path) -> Tracker:
    from hpo.tracking.external import MlflowRun, WandbRun

    if name == "wandb" and settings.wandb is not None:
        return WandbRun(settings.wandb, info, local_dir)
    if settings.mlflow is None:
        raise ValueError(f"unknown tracker {name}")
    return MlflowRun(settings.mlflow, info)
