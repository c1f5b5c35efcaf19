"""What a denoising network's inputs and output mean (the protocol in :mod:`hpo.diffusion.network`):
its time input on a 0..1000 scale, and its output in one of three parameterisations (ε, v, x0),
converted here to (x0̂, ε̂) for samplers and validation and to a training target for the loss.

With α = sqrt(ᾱ_t), σ = sqrt(1-ᾱ_t): x_t = α·x0 + σ·ε and v = α·ε − σ·x0 (Salimans & Ho 2022).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

PREDICTIONS = ("eps", "v", "x0")
# A denoising network: (x_t, time on a 0..1000 scale, class labels or None) → output
Network = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


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
