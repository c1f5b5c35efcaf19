"""Precision and recall in feature space (Kynkäänniemi et al. 2019, "Improved Precision and Recall
Metric for Assessing Generative Models"): fidelity and diversity apart, where FID mixes them.

Each real feature vector gets a ball reaching its k-th nearest real neighbour; the union of the balls
is the real manifold's estimate. Precision: the share of samples that fall inside it (are they
realistic?). Recall: the same with the roles swapped — the share of real images inside the samples'
balls (is the data's variety covered?). "Sharp but all alike" reads high precision, low recall;
"varied but noisy" the opposite. Computed on as many real images as samples (the paper's setting),
drawn once with a fixed seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

K = 3  # the paper's neighbourhood size
CHUNK = 2048  # rows of the distance matrix at a time


@dataclass(frozen=True)
class PrecisionRecall:
    precision: float
    recall: float


def kth_radii(feats: torch.Tensor, k: int = K) -> torch.Tensor:
    """Distance from each row to its k-th nearest other row."""
    radii = []
    for start in range(0, feats.shape[0], CHUNK):
        d = torch.cdist(feats[start : start + CHUNK], feats)
        radii.append(d.kthvalue(k + 1, dim=1).values)  # the row itself is at distance 0
    return torch.cat(radii)


def inside(points: torch.Tensor, centres: torch.Tensor, radii: torch.Tensor) -> torch.Tensor:
    """Whether each point lies within some centre's ball."""
    hits = []
    for start in range(0, points.shape[0], CHUNK):
        d = torch.cdist(points[start : start + CHUNK], centres)
        hits.append((d <= radii[None, :]).any(dim=1))
    return torch.cat(hits)


def as_tensor(feats: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32))


class RealManifold:
    """Real features and their k-NN radii, computed once and reused for every set of samples."""

    def __init__(self, real: np.ndarray, k: int = K) -> None:
        if real.shape[0] <= k:
            raise ValueError(f"precision/recall with k={k} needs more than {k} real images")
        self.k, self.feats = k, as_tensor(real)
        self.radii = kth_radii(self.feats, k)

    def precision_recall(self, fake: np.ndarray) -> PrecisionRecall:
        """Precision and recall of ``fake`` features (rows are images) against these real ones."""
        if fake.shape[0] <= self.k:
            raise ValueError(f"precision/recall with k={self.k} needs more than {self.k} generated images")
        f = as_tensor(fake)
        precision = inside(f, self.feats, self.radii).float().mean()
        recall = inside(self.feats, f, kth_radii(f, self.k)).float().mean()
        return PrecisionRecall(float(precision), float(recall))


def precision_recall(real: np.ndarray, fake: np.ndarray, *, k: int = K) -> PrecisionRecall:
    return RealManifold(real, k).precision_recall(fake)


def matched_reference(reference: np.ndarray, n: int, *, seed: int = 0) -> np.ndarray:
    """``n`` reference rows (all when there are no more), drawn once per (n, seed)."""
    if reference.shape[0] <= n:
        return reference
    rows = np.random.default_rng(seed).choice(reference.shape[0], n, replace=False)
    return reference[np.sort(rows)]
