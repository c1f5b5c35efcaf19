"""The canonical validation metric: comparable across T, schedule, parameterisation and weighting.

Fixed held-out images, fixed noise, a fixed grid of log-SNR levels (each mapped to the run's
nearest timestep), and the error always measured in v-space: ‖v̂ − v‖² equals the x0 error at low
SNR and the ε error at high SNR, so no end of the noise range dominates. Two evaluations of the
same weights give the same number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hpo.data import ImageData, to_model_range
from hpo.diffusion.losses import Network, model_time, to_x0_eps
from hpo.diffusion.schedule import NoiseSchedule

LOG_SNR_RANGE = (-6.0, 6.0)
PROBE_SEED = 1_000_003


@dataclass(frozen=True, eq=False)
class ValidationProbe:
    images: torch.Tensor  # uint8 held-out images
    labels: torch.Tensor
    log_snrs: tuple[float, ...]

    def noise(self, level: int, device: torch.device) -> torch.Tensor:
        """The fixed noise of one level; drawn on the CPU so every device sees the same numbers."""
        gen = torch.Generator().manual_seed(PROBE_SEED + level)
        return torch.randn(self.images.shape, generator=gen).to(device)


def make_probe(data: ImageData, *, num_images: int, num_levels: int) -> ValidationProbe:
    n = min(num_images, data.val_images.shape[0])
    grid = np.linspace(*LOG_SNR_RANGE, num_levels) if num_levels > 1 else np.zeros(1)
    return ValidationProbe(data.val_images[:n], data.val_labels[:n], tuple(float(v) for v in grid))


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
    """``val_loss`` (mean over levels) and ``val_loss@<log-SNR>`` for each level."""
    device = probe.images.device
    timesteps = schedule.nearest_timesteps(np.array(probe.log_snrs))
    metrics: dict[str, float] = {}
    for level, (log_snr, t_index) in enumerate(zip(probe.log_snrs, timesteps, strict=True)):
        noise = probe.noise(level, device)
        total = 0.0
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
        metrics[f"val_loss@{log_snr:+.1f}"] = total / probe.images.shape[0]
    metrics["val_loss"] = float(np.mean([metrics[f"val_loss@{v:+.1f}"] for v in probe.log_snrs]))
    return metrics
