"""Score a trained model: sample with its DDIM settings, extract features, FID and KID with clean-fid."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from cleanfid.fid import frechet_distance, kernel_distance

from hpo.config import ScoreConfig, TrainConfig
from hpo.data import ImageData
from hpo.diffusion.schedule import NoiseSchedule
from hpo.diffusion.unet import UNet
from hpo.generate import draw_labels, sample_batches
from hpo.scoring.features import FeatureExtractor, classifier_extractor, inception_extractor, resize_batch
from hpo.scoring.reference import ReferenceStats, Split, reference_stats
from hpo.scoring.weights import verify_weights, weights_path


@dataclass(frozen=True)
class Scores:
    fid: float
    kid: float
    metric_name: str  # FID (Inception, clean-fid) or classifier-FID
    features: str
    num_samples: int
    class_accuracy: float | None  # share of samples for class c that the classifier assigns to c
    sampling_seconds: float
    feature_seconds: float


@dataclass(frozen=True, eq=False)
class Scorer:
    """A feature extractor and its reference statistics: built once per worker and dataset."""

    extractor: FeatureExtractor
    reference: ReferenceStats
    config: ScoreConfig


def preflight(cfg: ScoreConfig) -> None:
    """Fail before any training when scoring could not run (Inception weights absent or corrupt)."""
    if cfg.features == "inception":
        verify_weights(weights_path(cfg.weights))


def make_scorer(
    cfg: ScoreConfig, data: ImageData, *, device: torch.device, cache_dir: Path, split: Split = "train"
) -> Scorer:
    if cfg.features == "inception":
        extractor = inception_extractor(weights_path(cfg.weights), device)
    else:
        extractor = classifier_extractor(data, cache_dir, device)
    return Scorer(
        extractor, reference_stats(data, extractor, split=split, cache_dir=cache_dir, batch_size=cfg.batch_size), cfg
    )


def fid_kid(feats: np.ndarray, reference: ReferenceStats, *, seed: int = 0) -> tuple[float, float]:
    fid = float(frechet_distance(feats.mean(axis=0), np.cov(feats, rowvar=False), reference.mu, reference.sigma))
    state = np.random.get_state()
    np.random.seed(seed)  # clean-fid's KID draws subsets from NumPy's global generator
    try:
        kid = kernel_distance(feats, reference.features.astype(np.float64))
    finally:
        np.random.set_state(state)
    return fid, kid


def score(
    scorer: Scorer,
    model: UNet,
    schedule: NoiseSchedule,
    cfg: TrainConfig,
    *,
    class_frequencies: torch.Tensor | None = None,
    seed: int = 0,
) -> Scores:
    """Generate ``num_samples`` images (labels drawn to match the data's class frequencies) and
    score them against the reference statistics."""
    n, extractor = scorer.config.num_samples, scorer.extractor
    labels = draw_labels(model.cfg.num_classes, n, frequencies=class_frequencies, seed=seed)
    feats, hits = [], 0
    sampling = featuring = 0.0
    batches = sample_batches(model, schedule, cfg, labels, n=n, batch_size=scorer.config.batch_size, seed=seed)
    start = 0
    while True:
        t0 = time.perf_counter()
        images = next(batches, None)
        t1 = time.perf_counter()
        if images is None:
            break
        resized = resize_batch(extractor, images)
        feats.append(extractor(resized).cpu().numpy())
        if extractor.classify is not None and labels is not None:
            pred = extractor.classify(resized).argmax(1).cpu()
            hits += int((pred == labels[start : start + images.shape[0]]).sum())
        start += images.shape[0]
        sampling, featuring = sampling + (t1 - t0), featuring + (time.perf_counter() - t1)
    all_feats = np.concatenate(feats).astype(np.float64)
    fid, kid = fid_kid(all_feats, scorer.reference, seed=seed)
    accuracy = hits / n if extractor.classify is not None and labels is not None else None
    return Scores(fid, kid, extractor.metric_name, extractor.name, n, accuracy, sampling, featuring)
