"""The denoising loss with its weighting (uniform or min-SNR), in any parameterisation
(:mod:`hpo.diffusion.parameterization`)."""

from __future__ import annotations

import torch

from hpo.diffusion.parameterization import Network, model_time, target
from hpo.diffusion.schedule import NoiseSchedule

WEIGHTINGS = ("uniform", "min_snr")


def loss_weight(prediction: str, weighting: str, snr: torch.Tensor, gamma: float) -> torch.Tensor:
    """Per-sample weight. Min-SNR-γ (Hang et al. 2023, Eq. 8) expressed for each parameterisation."""
    if weighting == "uniform":
        return torch.ones_like(snr)
    if weighting != "min_snr":
        raise ValueError(f"unknown loss weighting {weighting!r}; expected one of {', '.join(WEIGHTINGS)}")
    clipped = snr.clamp(max=gamma)
    if prediction == "eps":
        return clipped / snr
    if prediction == "v":
        return clipped / (snr + 1.0)
    return clipped


def diffusion_loss(
    net: Network,
    schedule: NoiseSchedule,
    x0: torch.Tensor,
    labels: torch.Tensor | None,
    *,
    prediction: str,
    weighting: str = "uniform",
    gamma: float = 5.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Mean weighted MSE between the network output and its target at uniformly drawn t, in fp32."""
    b = x0.shape[0]
    t = torch.randint(0, schedule.T, (b,), device=x0.device, generator=generator)
    eps = torch.randn(x0.shape, device=x0.device, generator=generator, dtype=x0.dtype)
    alpha, sigma = schedule.alpha_sigma(t)
    x_t = alpha * x0 + sigma * eps
    out = net(x_t, model_time(t, schedule.T), labels).float()
    per_sample = (out - target(prediction, x0, eps, alpha, sigma)).pow(2).mean(dim=(1, 2, 3))
    weight = loss_weight(prediction, weighting, (alpha / sigma).pow(2).view(-1), gamma)
    return (weight * per_sample).mean()
