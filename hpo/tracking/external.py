"""Weights & Biases and MLflow runs, when a spec's ``tracking`` section asks: one run per trial with
the same scalars, images and parameters as TensorBoard, grouped by study; a retry continues its
predecessor's run. :func:`check_trackers` runs at launch and at worker start: a missing package,
or W&B online without credentials, is one clear line there, never a crash mid-study."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from hpo.errors import HpoError
from hpo.spec.spec import MlflowSettings, TrackingSettings, WandbSettings
from hpo.tracking.base import RunInfo, plain_params, scalars_of, sync_scalars
from hpo.training.trainer import EvalPoint, SyncPoint


def check_trackers(settings: TrackingSettings) -> None:
    if settings.wandb is not None:
        if importlib.util.find_spec("wandb") is None:
            raise HpoError(
                "tracking.wandb: the wandb package is not installed; pip install 'hpo[wandb]' or remove tracking.wandb"
            )
        if settings.wandb.mode == "online" and not _wandb_credentials():
            raise HpoError(
                "tracking.wandb: no W&B credentials on this machine; run `wandb login`, set WANDB_API_KEY, or use "
                "mode: offline (then `wandb sync`)"
            )
    if settings.mlflow is not None and importlib.util.find_spec("mlflow") is None:
        raise HpoError(
            "tracking.mlflow: the mlflow package is not installed; pip install 'hpo[mlflow]' or remove tracking.mlflow"
        )


def _wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")


class WandbRun:
    def __init__(self, settings: WandbSettings, info: RunInfo, directory: Path) -> None:
        import wandb

        directory.mkdir(parents=True, exist_ok=True)
        self.wandb = wandb
        self.run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            mode=settings.mode,
            group=info.study,
            name=f"{info.study}/trial-{info.trial:04d}",
            id=re.sub(r"[^A-Za-z0-9_-]", "_", f"{info.study}-trial-{info.trial:04d}"),
            resume="allow",
            config=plain_params(info.params),
            dir=str(directory),
            reinit="finish_previous",
        )

    def on_sync(self, point: SyncPoint) -> None:
        for step, loss, norm, lr in zip(point.steps, point.losses, point.grad_norms, point.lrs, strict=True):
            self.run.log({"train/loss": loss, "train/grad_norm": norm, "train/lr": lr}, step=step)
        self.run.log(sync_scalars(point), step=point.steps[-1])

    def on_eval(self, point: EvalPoint, grid: np.ndarray | None) -> None:
        values: dict[str, object] = dict(scalars_of(point))  # the scalars, and a wandb.Image
        if grid is not None:
            values["samples/while_training"] = self.wandb.Image(grid)
        self.run.log(values, step=point.step)

    def on_result(self, metrics: Mapping[str, float], images: Mapping[str, np.ndarray], step: int) -> None:
        for key, value in metrics.items():
            self.run.summary[f"result/{key}"] = float(value)
        self.run.log({tag: self.wandb.Image(image) for tag, image in images.items()}, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowRun:
    def __init__(self, settings: MlflowSettings, info: RunInfo) -> None:
        import mlflow

        self.mlflow = mlflow
        if mlflow.active_run() is not None:  # left open by a run that failed mid-trial
            mlflow.end_run()
        mlflow.set_tracking_uri(settings.tracking_uri)
        experiment = mlflow.set_experiment(settings.experiment or info.study)
        tag = f"{info.study}/trial-{info.trial:04d}"
        found = mlflow.search_runs(
            [experiment.experiment_id], filter_string=f"tags.hpo_trial = '{tag}'", output_format="list"
        )
        if found:  # a retry continues its predecessor's run
            self.run = mlflow.start_run(run_id=found[0].info.run_id)
        else:
            self.run = mlflow.start_run(run_name=tag, tags={"hpo_trial": tag, "hpo_study": info.study})
            mlflow.log_params(plain_params(info.params))

    def on_sync(self, point: SyncPoint) -> None:
        for step, loss, norm, lr in zip(point.steps, point.losses, point.grad_norms, point.lrs, strict=True):
            self.mlflow.log_metrics({"train/loss": loss, "train/grad_norm": norm, "train/lr": lr}, step=step)
        self.mlflow.log_metrics(sync_scalars(point), step=point.steps[-1])

    def on_eval(self, point: EvalPoint, grid: np.ndarray | None) -> None:
        self.mlflow.log_metrics(scalars_of(point), step=point.step)
        if grid is not None:
            self.mlflow.log_image(grid, f"samples/eval-{point.index}.png")

    def on_result(self, metrics: Mapping[str, float], images: Mapping[str, np.ndarray], step: int) -> None:
        self.mlflow.log_metrics({f"result/{k}": float(v) for k, v in metrics.items()}, step=step)
        for tag, image in images.items():
            self.mlflow.log_image(image, f"{tag}.png")

    def close(self) -> None:
        self.mlflow.end_run()
