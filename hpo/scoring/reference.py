"""Reference statistics, computed once per (dataset, image size, split, features, mode) and cached.

Several worker processes may ask at the same moment: one computes under a file lock, the others
wait and read the file it wrote (atomically).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from filelock import FileLock

from hpo.files import atomic_write
from hpo.scoring.distance import Reference
from hpo.scoring.features import FeatureExtractor, extract
from hpo.training.data import ImageData

log = logging.getLogger("hpo.scoring")

Split = Literal["train", "val", "all"]
FULL_RANK = 2048  # Inception's feature size: fewer images leave FID's covariance rank-deficient


@dataclass(frozen=True, eq=False)
class ReferenceStats:
    mu: np.ndarray
    sigma: np.ndarray
    features: np.ndarray  # kept for KID
    count: int
    path: Path

    @cached_property
    def space(self) -> Reference:
        """The features with what every distance to them reuses (Σ^½, KID's own term), made once."""
        return Reference(self.features.astype(np.float64), self.mu, self.sigma)


def reference_images(data: ImageData, split: Split) -> list[torch.Tensor]:
    """The split's images as parts of the data (views of the shared cache; ``all`` is both, not a copy)."""
    if split == "train":
        return [data.train_images]
    if split == "val":
        return [data.val_images]
    return [data.train_images, data.val_images]


def stats_path(data: ImageData, extractor: FeatureExtractor, split: Split, cache_dir: Path) -> Path:
    ident = f"{data.key}|{data.image_size}|{split}|{extractor.ident}|clean"
    return cache_dir / f"ref-{hashlib.sha256(ident.encode()).hexdigest()[:20]}.npz"


def reference_stats(
    data: ImageData, extractor: FeatureExtractor, *, split: Split, cache_dir: Path, batch_size: int = 250
) -> ReferenceStats:
    path = stats_path(data, extractor, split, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            parts = reference_images(data, split)
            feats = np.concatenate([extract(extractor, part.cpu(), batch_size=batch_size) for part in parts])
            mu, sigma = feats.mean(axis=0), np.cov(feats, rowvar=False)
            atomic_write(path, lambda tmp: np.savez(tmp, mu=mu, sigma=sigma, features=feats.astype(np.float32)))
            log.info("computed %s reference statistics of %d %s images → %s", extractor.name, len(feats), split, path)
    with np.load(path) as blob:
        stats = ReferenceStats(blob["mu"], blob["sigma"], blob["features"], int(blob["features"].shape[0]), path)
    if extractor.name == "inception" and stats.count < FULL_RANK:
        log.warning(
            "only %d reference images: FID's %d-dimensional covariance is rank-deficient and the score is "
            "biased; compare trials by KID, or use more images",
            stats.count,
            FULL_RANK,
        )
    return stats
