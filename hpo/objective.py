"""The objective: a trial's parameters → a training run → FID. The only place that turns training
events into Optuna reports, pruning decisions, failure reasons and artifacts."""

from __future__ import annotations

import logging
import math
import socket
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.storages import RetryHeartbeatStaleTrialCallback

from hpo.config import TrainConfig
from hpo.data import ImageData
from hpo.diffusion.unet import UNet
from hpo.errors import ConfigError
from hpo.generate import sample_images, save_grid
from hpo.runtime import release_memory
from hpo.scoring.score import Scorer, make_scorer, score
from hpo.space import suggest
from hpo.spec import Spec
from hpo.train import EvalPoint, TrainingAborted, TrainResult, make_schedule, train

log = logging.getLogger("hpo.objective")

GRID_PER_EVAL = 16  # images in the grid saved at each evaluation point


class TrialFailed(Exception):
    """The trial cannot produce a score; ``reason`` is stored as the trial's fail_reason."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


@dataclass
class StudyContext:
    """What a worker holds for one study: spec, data, artifact store, and (lazily) the scorer."""

    name: str
    spec: Spec
    data: ImageData
    device: torch.device
    artifact_dir: Path
    cache_dir: Path
    scorer: Scorer | None = field(default=None)

    @property
    def artifacts(self) -> FileSystemArtifactStore:
        self.artifact_dir.mkdir(parents=True, exist_ok=True)
        return FileSystemArtifactStore(str(self.artifact_dir))

    def get_scorer(self) -> Scorer:
        if self.scorer is None:
            self.scorer = make_scorer(
                self.spec.score, self.data, device=self.device, cache_dir=self.cache_dir / "scoring"
            )
        return self.scorer

    def checkpoint_path(self, trial: optuna.Trial) -> Path:
        """Shared by a trial and its retries, so a retry resumes where the lost worker stopped."""
        frozen = trial.study._storage.get_trial(trial._trial_id)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            root = RetryHeartbeatStaleTrialCallback.retried_trial_number(frozen)
        number = trial.number if root is None else root
        return self.artifact_dir / "checkpoints" / self.name / f"trial-{number}.pt"


def upload(ctx: StudyContext, trial: optuna.Trial, path: Path) -> str:
    return upload_artifact(artifact_store=ctx.artifacts, file_path=str(path), study_or_trial=trial)


def run_objective(trial: optuna.Trial, ctx: StudyContext, on_start: Callable[[], None] = lambda: None) -> float:
    on_start()
    if trial.user_attrs.get("fail_reason"):  # a retry inherits its predecessor's attributes
        trial.set_user_attr("fail_reason", None)
    try:
        cfg = ctx.spec.train_config(suggest(trial, ctx.spec.search)).replace(device=str(ctx.device))
    except ConfigError as err:
        raise _fail(trial, "invalid_config", str(err)) from None
    trial.set_user_attr("device", f"{socket.gethostname()}:{ctx.device}")
    trial.set_user_attr("budget_kimg", cfg.kimg)
    checkpoint = ctx.checkpoint_path(trial)
    started = time.perf_counter()
    try:
        result = train(cfg, ctx.data, on_eval=_reporter(trial, ctx, cfg), checkpoint=checkpoint)
    except TrainingAborted as err:
        trial.set_user_attr("fail_reason", err.reason)
        trial.set_user_attr("stopped_at_kimg", err.step * cfg.batch_size / 1000)
        raise optuna.TrialPruned(str(err)) from None
    except torch.cuda.OutOfMemoryError:
        release_memory(ctx.device)
        trial.set_user_attr("oom_batch_size", cfg.batch_size)
        raise _fail(trial, "oom", f"CUDA out of memory at batch_size={cfg.batch_size}") from None
    return _finish(trial, ctx, cfg, result, time.perf_counter() - started, checkpoint)


def _fail(trial: optuna.Trial, reason: str, detail: str) -> TrialFailed:
    trial.set_user_attr("fail_reason", reason)
    return TrialFailed(reason, detail)


def _reporter(trial: optuna.Trial, ctx: StudyContext, cfg: TrainConfig) -> Callable[[EvalPoint, UNet], None]:
    curve: dict[str, dict[str, float]] = {}
    grids: dict[str, str] = dict(trial.user_attrs.get("grids") or {})

    schedule = make_schedule(cfg)

    def on_eval(point: EvalPoint, ema: UNet) -> None:
        value = point.metrics["val_loss"]
        trial.report(value if math.isfinite(value) else float("nan"), step=point.index)
        curve[str(point.index)] = {"kimg": point.kimg, **point.metrics}
        trial.set_user_attr("curve", curve)
        if not point.replayed:
            with tempfile.TemporaryDirectory() as tmp:
                images = sample_images(ema, schedule, cfg, n=GRID_PER_EVAL, seed=0)
                grids[str(point.index)] = upload(
                    ctx, trial, save_grid(images, Path(tmp) / f"eval{point.index}.png", nrow=8)
                )
            trial.set_user_attr("grids", grids)
        if trial.should_prune():
            trial.set_user_attr("fail_reason", "pruned_by_median")
            trial.set_user_attr("stopped_at_kimg", point.kimg)
            raise optuna.TrialPruned(f"validation metric {value:.4g} above the median at evaluation {point.index}")

    return on_eval


def _finish(
    trial: optuna.Trial,
    ctx: StudyContext,
    cfg: TrainConfig,
    result: TrainResult,
    train_seconds: float,
    checkpoint: Path,
) -> float:
    scores = score(
        ctx.get_scorer(), result.ema, result.schedule, cfg, class_frequencies=ctx.data.class_frequencies(), seed=0
    )
    attrs: dict[str, Any] = {
        "val_loss": result.history[-1].metrics["val_loss"],
        "kid": scores.kid,
        "metric_name": scores.metric_name,
        "class_accuracy": scores.class_accuracy,
        "num_samples": scores.num_samples,
        "train_seconds": round(train_seconds, 2),
        "sample_seconds": round(scores.sampling_seconds, 2),
        "feature_seconds": round(scores.feature_seconds, 2),
        "images_per_second": round(result.images_per_second, 1),
        "peak_memory_mb": round(result.peak_memory_bytes / 2**20, 1),
        "num_parameters": result.num_parameters,
    }
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    with tempfile.TemporaryDirectory() as tmp:
        images = sample_images(result.ema, result.schedule, cfg, n=ctx.spec.score.grid_size, seed=1)
        trial.set_user_attr("samples", upload(ctx, trial, save_grid(images, Path(tmp) / "samples.png")))
        weights = Path(tmp) / "ema.pt"
        torch.save(result.ema.state_dict(), weights)
        trial.set_user_attr("ema_checkpoint", upload(ctx, trial, weights))
    checkpoint.unlink(missing_ok=True)  # the EMA weights are an artifact now
    if not math.isfinite(scores.fid):
        raise _fail(trial, "fid_not_finite", f"{scores.metric_name} is {scores.fid}")
    return scores.fid
