"""The canonical validation metric: comparable across T, schedule, parameterisation and weighting.

Fixed held-out images, fixed noise, a fixed grid of log-SNR levels (each mapped to the run's
nearest timestep), and the error always measured in v-space: ‖v̂ − v‖² = ‖x̂0 − x0‖² / σ², which is
the x0 error at low SNR and the ε error at high SNR. Two evaluations of the same weights give the
same number.

Each level's error is also divided by what a reference predictor scores on the same images, noise
and timestep: the per-pixel linear (Wiener) denoiser built from the training set's mean and variance,
which needs no training. The ratio says how much of the predictable structure the network has
learned at that noise level, whatever the level's irreducible error; it also cancels most of the
offset between a level and the nearest timestep of a small T.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from hpo.diffusion.parameterization import Network, model_time, to_x0_eps
from hpo.diffusion.schedule import NoiseSchedule
from hpo.records import level_key
from hpo.training.data import ImageData, to_model_range

LOG_SNR_RANGE = (-6.0, 6.0)
PROBE_SEED = 1_000_003


@dataclass(frozen=True, eq=False)
class ValidationProbe:
    images: torch.Tensor  # uint8 held-out images
    labels: torch.Tensor
    log_snrs: tuple[float, ...]
    mean: torch.Tensor  # per-pixel mean of the training images in [-1, 1], (C, H, W)
    var: torch.Tensor  # per-pixel variance, (C, H, W)

    def noise(self, level: int, device: torch.device) -> torch.Tensor:
        """The fixed noise of one level; drawn on the CPU so every device sees the same numbers."""
        gen = torch.Generator().manual_seed(PROBE_SEED + level)
        return torch.randn(self.images.shape, generator=gen).to(device)


def pixel_moments(images: torch.Tensor, chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-pixel mean and variance of uint8 images in model range, accumulated in float64."""
    total = torch.zeros(images.shape[1:], dtype=torch.float64, device=images.device)
    squares = torch.zeros_like(total)
    for start in range(0, images.shape[0], chunk):
        x = to_model_range(images[start : start + chunk]).double()
        total += x.sum(0)
        squares += x.pow(2).sum(0)
    n = images.shape[0]
    mean = total / n
    return mean.float(), (squares / n - mean.pow(2)).clamp_min(1e-6).float()


def make_probe(
    data: ImageData,
    *,
    num_images: int,
    num_levels: int,
    split: str = "val",
    device: torch.device | None = None,
    moments: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> ValidationProbe:
    """The probe over the first held-out images, or (``split="train"``) over as many training images
    with the same noise and levels: their ratio is the generalisation gap. Its images, and the
    training set's moments, are on ``device`` (default: where the data is). ``moments``: the
    training set's :func:`pixel_moments`, when the caller has them (a pass over the whole set)."""
    images, labels = (data.val_images, data.val_labels) if split == "val" else (data.train_images, data.train_labels)
    n = min(num_images, data.val_images.shape[0], images.shape[0])
    grid = np.linspace(*LOG_SNR_RANGE, num_levels) if num_levels > 1 else np.zeros(1)
    mean, var = pixel_moments(data.train_images) if moments is None else moments
    to = device or images.device
    return ValidationProbe(images[:n].to(to), labels[:n].to(to), tuple(float(v) for v in grid), mean.to(to), var.to(to))


def generalisation_gap(val_rel: float, train_rel: float) -> float:
    """Held-out error over training error on the same noise and levels: 1 while the model
    generalises, growing as it fits its training images better than new ones."""
    return val_rel / train_rel if train_rel > 0 and math.isfinite(train_rel) else float("nan")


def reference_v_error(
    probe: ValidationProbe, x0: torch.Tensor, x_t: torch.Tensor, alpha: torch.Tensor, sigma: torch.Tensor
) -> torch.Tensor:
    """Per-image v-space error of the per-pixel Wiener denoiser x̂0 = μ + k(x_t − αμ), k = αs²/(α²s² + σ²)."""
    gain = alpha * probe.var / (alpha.pow(2) * probe.var + sigma.pow(2))
    x0_hat = probe.mean + gain * (x_t - alpha * probe.mean)
    return ((x0_hat - x0).pow(2) / sigma.pow(2)).mean(dim=(1, 2, 3))


@torch.no_grad()
def evaluate_probe(
    net: Network,
    schedule: NoiseSchedule,
    probe: ValidationProbe,
    *,
    prediction: str,
    conditional: bool,
    batch_size: int = 256,
) -> dict[str, float]:
    """Per level: ``val_loss@λ`` (v-space MSE) and ``val_rel@λ`` (its ratio to the reference);
    overall: ``val_loss`` (mean MSE over levels) and ``val_rel`` (geometric mean of the ratios)."""
    device = probe.images.device
    timesteps = schedule.nearest_timesteps(np.array(probe.log_snrs))
    metrics: dict[str, float] = {}
    for level, (log_snr, t_index) in enumerate(zip(probe.log_snrs, timesteps, strict=True)):
        noise = probe.noise(level, device)
        total = reference = 0.0
        for start in range(0, probe.images.shape[0], batch_size):
            x0 = to_model_range(probe.images[start : start + batch_size])
            eps = noise[start : start + batch_size]
            labels = probe.labels[start : start + batch_size] if conditional else None
            t = torch.full((x0.shape[0],), int(t_index), device=device, dtype=torch.long)
            alpha, sigma = schedule.alpha_sigma(t)
            x_t = alpha * x0 + sigma * eps
            out = net(x_t, model_time(t, schedule.T), labels).float()
            x0_hat, eps_hat = to_x0_eps(prediction, out, x_t, alpha, sigma)
            v_err = (alpha * eps_hat - sigma * x0_hat) - (alpha * eps - sigma * x0)
            total += float(v_err.pow(2).mean(dim=(1, 2, 3)).sum())
            reference += float(reference_v_error(probe, x0, x_t, alpha, sigma).sum())
        metrics[level_key("val_loss", log_snr)] = total / probe.images.shape[0]
        metrics[level_key("val_rel", log_snr)] = total / max(reference, 1e-12)
    metrics["val_loss"] = float(np.mean([metrics[level_key("val_loss", v)] for v in probe.log_snrs]))
    metrics["val_rel"] = geometric_mean([metrics[level_key("val_rel", v)] for v in probe.log_snrs])
    return metrics


def geometric_mean(values: list[float]) -> float:
    if not all(math.isfinite(v) and v > 0 for v in values):
        return float("nan")
    return math.exp(sum(math.log(v) for v in values) / len(values))
