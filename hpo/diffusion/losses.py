"""Parameterisations (ε, v, x0), their conversions, and the denoising loss with its weighting.

With α = sqrt(ᾱ_t), σ = sqrt(1-ᾱ_t): x_t = α·x0 + σ·ε and v = α·ε − σ·x0 (Salimans & Ho 2022).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hpo.diffusion.schedule import NoiseSchedule

PREDICTIONS = ("eps", "v", "x0")
# A denoising network: (x_t, time on a 0..1000 scale, class labels or None) → output
Network = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]
WEIGHTINGS = ("uniform", "min_snr")


def model_time(t: torch.Tensor, T: int) -> torch.Tensor:
    """Discrete timestep index → the network's time input on a 0..1000 scale."""
    return t.float() * (1000.0 / T)


def target(
    prediction: str, x0: torch.Tensor, eps: torch.Tensor, alpha: torch.Tensor, sigma: torch.Tensor
) -> torch.Tensor:
    if prediction == "eps":
        return eps
    if prediction == "x0":
        return x0
    if prediction == "v":
        return alpha * eps - sigma * x0
    raise ValueError(f"unknown prediction {prediction!r}; expected one of {', '.join(PREDICTIONS)}")


def to_x0_eps(
    prediction: str, out: torch.Tensor, x_t: torch.Tensor, alpha: torch.Tensor, sigma: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Network output in any parameterisation → (x0̂, ε̂)."""
    if prediction == "eps":
        return (x_t - sigma * out) / alpha, out
    if prediction == "x0":
        return out, (x_t - alpha * out) / sigma
    if prediction == "v":
        return alpha * x_t - sigma * out, sigma * x_t + alpha * out
    raise ValueError(f"unknown prediction {prediction!r}; expected one of {', '.join(PREDICTIONS)}")


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
