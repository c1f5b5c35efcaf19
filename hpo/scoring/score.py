"""Score trained weights: sample with one combination, extract features, FID and KID with clean-fid."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from hpo.scoring.distance import frechet, frechet_pca, kid
from hpo.scoring.features import FeatureExtractor, classifier_extractor, inception_extractor, resize_batch
from hpo.scoring.fidelity import K, PrecisionRecall, RealManifold, matched_reference
from hpo.scoring.reference import ReferenceStats, Split, reference_stats
from hpo.scoring.weights import verify_weights, weights_path
from hpo.spec.config import ScoreConfig
from hpo.spec.sampling import SamplingConfig
from hpo.training.data import ImageData
from hpo.training.generate import draw_labels, sample_batches
from hpo.training.model import DiffusionModel


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
    precision: float | None = None  # share of samples inside the real images' feature manifold (fidelity)
    recall: float | None = None  # share of real images inside the samples' manifold (diversity)
    rank_deficient: bool = False  # num_samples ≤ feature dimensions: FID biased by the samples' spread
    pca_fid: float | None = None  # FID in the reference's top principal components (the screen's statistic)


@dataclass(frozen=True, eq=False)
class Scorer:
    """A feature extractor and its reference statistics: built once per worker and dataset."""

    extractor: FeatureExtractor
    reference: ReferenceStats
    config: ScoreConfig
    manifolds: dict[int, RealManifold] = field(default_factory=dict)  # sample count → matched reference

    def precision_recall(self, feats: np.ndarray) -> PrecisionRecall:
        """Against as many reference images as there are samples (drawn and measured once per count)."""
        n = feats.shape[0]
        if n not in self.manifolds:
            self.manifolds[n] = RealManifold(matched_reference(self.reference.features, n))
        return self.manifolds[n].precision_recall(feats)


@dataclass(frozen=True, eq=False)
class SampleFeatures:
    """Features of samples start..start+n−1 of one combination, and how many were classified as
    the class they were generated for."""

    feats: np.ndarray
    hits: int
    sampling_seconds: float
    feature_seconds: float
    images: torch.Tensor | None = None  # the uint8 samples (CPU), when asked to keep them

    def __add__(self, other: SampleFeatures) -> SampleFeatures:
        images = None
        if self.images is not None and other.images is not None:
            images = torch.cat([self.images, other.images])
        return SampleFeatures(
            np.concatenate([self.feats, other.feats]),
            self.hits + other.hits,
            self.sampling_seconds + other.sampling_seconds,
            self.feature_seconds + other.feature_seconds,
            images,
        )


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


def fid_kid(feats: np.ndarray, reference: ReferenceStats) -> tuple[float, float]:
    """FID and KID of ``feats`` against the reference (:mod:`hpo.scoring.distance`: no sqrtm of a singular
    matrix, KID unbiased against every reference image)."""
    return frechet(feats, reference.space).value, kid(feats, reference.space)


def score_labels(
    scorer: Scorer, model: DiffusionModel, class_frequencies: torch.Tensor | None, *, seed: int
) -> torch.Tensor | None:
    """The labels of every sample a model is scored with, drawn to match the data's class frequencies."""
    return draw_labels(model.info.num_classes, scorer.config.num_samples, frequencies=class_frequencies, seed=seed)


def sample_features(
    scorer: Scorer,
    model: DiffusionModel,
    sampling: SamplingConfig,
    labels: torch.Tensor | None,
    *,
    start: int,
    n: int,
    seed: int,
    keep_images: bool = False,
) -> SampleFeatures:
    """Generate samples start..start+n−1 with ``sampling`` and extract their features (and keep the
    images themselves with ``keep_images``)."""
    extractor = scorer.extractor
    feats, hits, sampling_s, feature_s = [], 0, 0.0, 0.0
    kept: list[torch.Tensor] = []
    batches = sample_batches(model, sampling, labels, start=start, n=n, batch_size=scorer.config.batch_size, seed=seed)
    first = start
    while True:
        t0 = time.perf_counter()
        images = next(batches, None)
        t1 = time.perf_counter()
        if images is None:
            break
        if keep_images:
            kept.append(images.cpu())
        resized = resize_batch(extractor, images)
        feats.append(extractor(resized).cpu().numpy())
        if extractor.classify is not None and labels is not None:
            predicted = extractor.classify(resized).argmax(1).cpu()
            hits += int((predicted == labels[first : first + images.shape[0]]).sum())
        first += images.shape[0]
        sampling_s, feature_s = sampling_s + (t1 - t0), feature_s + (time.perf_counter() - t1)
    images_kept = torch.cat(kept) if keep_images else None
    return SampleFeatures(np.concatenate(feats).astype(np.float64), hits, sampling_s, feature_s, images_kept)


def scores_of(scorer: Scorer, sample: SampleFeatures, *, conditional: bool, pca_dims: int | None = None) -> Scores:
    fid, kid_value = fid_kid(sample.feats, scorer.reference)
    n = sample.feats.shape[0]
    accuracy = sample.hits / n if scorer.extractor.classify is not None and conditional else None
    extractor = scorer.extractor
    pr = scorer.precision_recall(sample.feats) if n > K else None
    return Scores(
        fid, kid_value, extractor.metric_name, extractor.name, n, accuracy, sample.sampling_seconds,
        sample.feature_seconds, pr.precision if pr else None, pr.recall if pr else None,
        rank_deficient=n <= scorer.reference.space.dim,
        pca_fid=None if pca_dims is None else frechet_pca(sample.feats, scorer.reference.space, pca_dims),
    )  # fmt: skip


def score(
    scorer: Scorer,
    model: DiffusionModel,
    sampling: SamplingConfig,
    *,
    class_frequencies: torch.Tensor | None = None,
    seed: int = 0,
) -> Scores:
    """Generate ``num_samples`` images with one combination and score them."""
    labels = score_labels(scorer, model, class_frequencies, seed=seed)
    sample = sample_features(scorer, model, sampling, labels, start=0, n=scorer.config.num_samples, seed=seed)
    return scores_of(scorer, sample, conditional=labels is not None)
