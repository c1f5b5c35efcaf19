"""Distances between generated features and the reference's, computed so that none is silently ill-posed.

Fréchet distance (FID, Heusel et al. 2017): ‖μg − μr‖² + tr Σg + tr Σr − 2 tr (Σg Σr)^½. The trace
of the square root is the sum of the square roots of the eigenvalues of Σg Σr, which are those of
the symmetric S Σg S with S = Σr^½ (computed once per reference). With fewer samples than feature
dimensions they are the squared singular values of Xc S / √(n−1) (Xc: the centred samples), so no
singular matrix ever reaches ``scipy.linalg.sqrtm``; where clean-fid's ``frechet_distance`` is
well-posed the two agree (tested).

Well computed is not well posed: with n ≤ d samples Σg has rank < d and FID's bias, which grows with
the samples' own spread, dominates. A set with little variety then beats a varied one (64 samples in
143 dimensions ranked guidance scales backwards). Such a value is flagged ``rank_deficient``; the
sweep never ranks by it (:mod:`hpo.scoring.sweep` screens with KID).

KID (Bińkowski et al. 2018, "Demystifying MMD GANs"): the unbiased estimate of MMD² with the cubic
polynomial kernel k(x, y) = (x·y/d + 1)³, between all n samples and all reference features (clean-fid's
``kernel_distance`` averages subsets of equal size instead; same expectation, more variance). Unbiased
at any n, so its ranking of combinations at a small count follows the one at a large count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

CHUNK = 1024  # reference rows per kernel block


@dataclass(frozen=True, eq=False)
class Reference:
    """The reference features, their mean and covariance, and what every distance to them reuses."""

    features: np.ndarray  # (N, d) float64
    mu: np.ndarray  # (d,)
    sigma: np.ndarray  # (d, d)
    projections: dict[int, tuple[np.ndarray, Reference]] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, features: np.ndarray) -> Reference:
        x = features.astype(np.float64)
        return cls(x, x.mean(axis=0), np.atleast_2d(np.cov(x, rowvar=False)))

    @cached_property
    def sigma_sqrt(self) -> np.ndarray:
        values, vectors = np.linalg.eigh(self.sigma)
        return (vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T

    @cached_property
    def self_kernel(self) -> float:
        """The reference's own term of MMD², mean of k(y_a, y_b) over a ≠ b."""
        n, total = self.features.shape[0], 0.0
        for start in range(0, n, CHUNK):  # N × N at once would be 340 MB for 6 500 images
            block = poly_kernel(self.features[start : start + CHUNK], self.features)
            total += float(block.sum()) - float(np.trace(block, offset=start))
        return total / (n * (n - 1))

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])

    def principal(self, k: int) -> tuple[np.ndarray, Reference]:
        """The top-k principal axes (d, k) of the reference and the reference expressed in them."""
        if k not in self.projections:
            _, vectors = np.linalg.eigh(self.sigma)
            basis = np.ascontiguousarray(vectors[:, ::-1][:, :k])
            self.projections[k] = basis, Reference.of((self.features - self.mu) @ basis)
        return self.projections[k]


@dataclass(frozen=True)
class Frechet:
    value: float
    num_samples: int
    dim: int

    @property
    def rank_deficient(self) -> bool:
        """Fewer samples than dimensions + 1: the covariance is singular and the value biased by spread."""
        return self.num_samples <= self.dim


def frechet(feats: np.ndarray, ref: Reference) -> Frechet:
    """FID of ``feats`` (n, d) against ``ref``; exact for the sample covariance at any n ≥ 2."""
    n, d = feats.shape
    if d != ref.dim:
        raise ValueError(f"features have {d} dimensions, the reference {ref.dim}")
    if n < 2:
        raise ValueError(f"a Fréchet distance needs at least 2 samples, got {n}")
    x = feats.astype(np.float64)
    mu = x.mean(axis=0)
    centred = x - mu
    if n <= d:
        roots = np.linalg.svd(centred @ ref.sigma_sqrt / np.sqrt(n - 1), compute_uv=False)
        trace_sqrt = float(roots.sum())
    else:
        s = ref.sigma_sqrt
        sigma = centred.T @ centred / (n - 1)
        trace_sqrt = float(np.sqrt(np.clip(np.linalg.eigvalsh(s @ sigma @ s), 0.0, None)).sum())
    trace_g = float((centred * centred).sum() / (n - 1))
    diff = mu - ref.mu
    value = float(diff @ diff + trace_g + np.trace(ref.sigma) - 2.0 * trace_sqrt)
    return Frechet(max(value, 0.0), n, d)


def frechet_pca(feats: np.ndarray, ref: Reference, k: int) -> float:
    """FID in the reference's top-k principal components: well-posed for n > k samples, its bias
    ∝ k/n small, and the components that carry most of FID's value kept."""
    basis, projected = ref.principal(k)
    return frechet((feats - ref.mu) @ basis, projected).value


def poly_kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = a.shape[1]
    return np.asarray((a.astype(np.float64) @ b.astype(np.float64).T / d + 1.0) ** 3)


def off_diagonal_mean(k: np.ndarray) -> float:
    n = k.shape[0]
    return float((k.sum() - np.trace(k)) / (n * (n - 1)))


def kid(feats: np.ndarray, ref: Reference) -> float:
    """Unbiased MMD² (cubic kernel) between ``feats`` (n ≥ 2) and every reference row."""
    if feats.shape[0] < 2:
        raise ValueError(f"KID needs at least 2 samples, got {feats.shape[0]}")
    cross = float(poly_kernel(feats, ref.features).mean())
    return off_diagonal_mean(poly_kernel(feats, feats)) + ref.self_kernel - 2.0 * cross
