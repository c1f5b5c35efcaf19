"""Is the model copying its training images?

A generated sample counts as a copy when its nearest training image is much closer than the second
nearest: ℓ2(x, NN1) / ℓ2(x, NN2) < 1/3 (Gu et al., TMLR 2025; Bonnaire et al., NeurIPS 2025). The
share of copies comes with a bootstrap 95 % interval, in pixel space and in the scoring feature
space. The same statistic for held-out real images is the floor: real images that merely resemble
the training set (near-duplicates in the data, very simple images) land there without any copying.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from hpo.analysis.progress import CopyShare, Space

COPY_RATIO = 1.0 / 3.0
BOOTSTRAP_DRAWS = 1000


def pixel_vectors(images: torch.Tensor) -> torch.Tensor:
    """uint8 images (N, C, H, W) → float32 rows in [0, 1]."""
    return images.reshape(images.shape[0], -1).float().div(255.0)


def pixel_rows(images: torch.Tensor) -> torch.Tensor:
    """uint8 images (N, C, H, W) → uint8 rows, a view (no copy of a mapped set): :func:`nearest_two`
    reads them as :func:`pixel_vectors` would, a chunk at a time."""
    return images.reshape(images.shape[0], -1)


def as_float_rows(rows: torch.Tensor) -> torch.Tensor:
    """float64 rows; uint8 rows (:func:`pixel_rows`) scaled to [0, 1] as :func:`pixel_vectors` does."""
    if rows.dtype == torch.uint8:
        return pixel_vectors(rows).double()
    return rows.double()


def nearest_two(
    queries: torch.Tensor, bank: torch.Tensor, *, cells: int = 1 << 23
) -> tuple[torch.Tensor, torch.Tensor]:
    """Distances to the two nearest rows of ``bank`` (N, 2) and the index of the nearest (N,). The bank
    is read a chunk of rows at a time (at most ``cells`` distances at once), so a large training set
    (uint8 rows, a view of the shared cache) is never converted whole."""
    if bank.shape[0] < 2:
        raise ValueError(f"the training set needs at least 2 images to find a second neighbour, got {bank.shape[0]}")
    q = as_float_rows(queries)
    best = torch.full((q.shape[0], 2), float("inf"), dtype=torch.float64)
    where = torch.zeros((q.shape[0], 2), dtype=torch.long)
    chunk = max(2, cells // max(q.shape[0], 1))
    for first in range(0, bank.shape[0], chunk):
        d = torch.cdist(q, as_float_rows(bank[first : first + chunk]))
        values, idx = d.topk(min(2, d.shape[1]), dim=1, largest=False)
        merged, order = torch.cat([best, values], dim=1).sort(dim=1, stable=True)
        best = merged[:, :2]
        where = torch.cat([where, idx + first], dim=1).gather(1, order[:, :2])
    return best, where[:, 0]


def bootstrap_interval(flags: np.ndarray, *, draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> tuple[float, float]:
    """Percentile 95 % interval of the mean of 0/1 ``flags`` over ``draws`` resamples. When every
    flag is equal the bootstrap has no spread (every resample is all 0 or all 1): the Wilson score
    interval stands in, so 64 copies out of 64 read 94–100 %, not 100–100 %."""
    if flags.size == 0:
        return float("nan"), float("nan")
    if flags.min() == flags.max():
        return wilson_interval(int(flags.sum()), flags.size)
    rng = np.random.default_rng(seed)
    means = flags[rng.integers(0, flags.size, size=(draws, flags.size))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(low), float(high)


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    return (low if successes > 0 else 0.0), (high if successes < n else 1.0)


def copy_share(queries: np.ndarray | torch.Tensor, bank: np.ndarray | torch.Tensor, space: Space) -> CopyShare:
    """The share of ``queries`` (rows) whose nearest row of ``bank`` is under 1/3 the distance of the
    second nearest, with its bootstrap interval."""
    q, b = torch.as_tensor(queries), torch.as_tensor(bank)
    distances, nearest = nearest_two(q, b)
    ratio = distances[:, 0] / distances[:, 1].clamp_min(1e-12)
    flags = (ratio < COPY_RATIO).numpy().astype(np.float64)
    low, high = bootstrap_interval(flags)
    return CopyShare(float(flags.mean()), low, high, int(flags.size), space, tuple(nearest.tolist()))
