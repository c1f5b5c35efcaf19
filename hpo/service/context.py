"""What a worker holds for one study, and where a trial's files go: every trial's path is built here
from the study's safe path component and the trial's first-attempt number (shared with its retries);
the artifact store's own layout is :mod:`hpo.service.names`."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna
import torch
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from PIL import Image

from hpo.records import REAL_GRID_ATTR, StudyRecord
from hpo.scoring.progress import ProgressProbe
from hpo.scoring.score import Scorer, make_scorer
from hpo.service.names import path_component, tensorboard_root
from hpo.service.optuna_internals import trial_id
from hpo.service.storage import ResilientStorage
from hpo.service.trials import root_number
from hpo.service.urls import sqlite_path
from hpo.spec.sampling import SamplingConfig
from hpo.spec.spec import Spec
from hpo.training.data import ImageData
from hpo.training.generate import final_grid, sample_images, save_grid
from hpo.training.model import DiffusionModel


@dataclass
class StudyContext:
    """A study's spec, data, storage (the worker's, with heartbeats) and artifact store, and
    (lazily) its scorer."""

    name: str
    spec: Spec
    data: ImageData
    device: torch.device
    artifact_dir: Path
    cache_dir: Path
    storage: ResilientStorage
    sharing: int = 1  # worker processes on this device (hpo worker --per-gpu)
    scorer: Scorer | None = field(default=None)
    progress: ProgressProbe | None = field(default=None)

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

    def get_progress(self) -> ProgressProbe:
        """Score, copy share and floor at evaluation points (budget ladders), built on first use."""
        if self.progress is None:
            self.progress = ProgressProbe(self.get_scorer(), self.data)
        return self.progress

    def trial_root(self, trial: optuna.Trial) -> int:
        return root_number(self.storage.get_trial(trial_id(trial)))

    def checkpoint_path(self, root: int) -> Path:
        """Shared by a trial and its retries, so a retry resumes where the lost worker stopped."""
        return self.artifact_dir / "checkpoints" / path_component(self.name) / f"trial-{root}.pt"

    def branch_path(self, root: int) -> Path:
        """wsd: the stable-phase state of a trial and its retries, kept after it completes for a longer
        run to continue (``hpo run``'s final run)."""
        return self.artifact_dir / "checkpoints" / path_component(self.name) / f"trial-{root}-branch.pt"

    def snapshot_dir(self, root: int) -> Path:
        """The post-hoc EMA snapshots of a trial and its retries."""
        return self.artifact_dir / "checkpoints" / path_component(self.name) / f"trial-{root}-ema"

    def tensorboard_dir(self, root: int) -> Path:
        return tensorboard_root(self.artifact_dir) / path_component(self.name) / f"trial-{root:04d}"

    def tracker_dir(self) -> Path:
        return self.artifact_dir / "trackers" / path_component(self.name)

    def write_places(self) -> list[Path]:
        """Where a trial writes: the artifact store (checkpoints, snapshots, grids, summaries), the
        caches, temporary files, and the database when it is a local file."""
        places = [self.artifact_dir, self.cache_dir, Path(tempfile.gettempdir())]
        database = sqlite_path(str(self.storage.url))
        return [*places, database.parent] if database is not None else places


def upload(ctx: StudyContext, target: optuna.Trial | optuna.Study, path: Path) -> str:
    return upload_artifact(artifact_store=ctx.artifacts, file_path=str(path), study_or_trial=target)


def sample_grid(
    ctx: StudyContext, model: DiffusionModel, sampling: SamplingConfig, n: int, path: Path, *, seed: int
) -> np.ndarray:
    """Save the final grid (:func:`~hpo.training.generate.final_grid`) and return it as an RGB array."""
    final_grid(model, sampling, n, path, seed=seed, class_names=ctx.data.class_names)
    return np.asarray(Image.open(path).convert("RGB"))


def sample_strip(model: DiffusionModel, sampling: SamplingConfig, n: int, path: Path) -> np.ndarray:
    """One row of ``n`` samples from fixed noise (one per class, in class order, for conditional
    models): the same row at every evaluation point, so the rows stacked show the run learning."""
    labels = torch.arange(min(model.info.num_classes, n)) if model.info.conditional else None
    count = labels.shape[0] if labels is not None else n
    save_grid(sample_images(model, sampling, n=count, seed=0, labels=labels), path, nrow=count)
    return np.asarray(Image.open(path).convert("RGB"))


def upload_real_grid(ctx: StudyContext, study: optuna.Study, n: int) -> None:
    """Once per study: a grid of real validation images, to set beside the samples in the report."""
    if StudyRecord.of(study).real_grid:
        return
    images = ctx.data.val_images[:n].cpu()
    with tempfile.TemporaryDirectory() as tmp:
        study.set_user_attr(REAL_GRID_ATTR, upload(ctx, study, save_grid(images, Path(tmp) / "real.png")))
