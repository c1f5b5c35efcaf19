"""Noise schedules: pure functions of T, computed in float64.

Discrete time t = 0..T-1; ``alphas_cumprod[t]`` is ᾱ_t of Ho et al. (2020), so
x_t = sqrt(ᾱ_t)·x_0 + sqrt(1-ᾱ_t)·ε and log-SNR λ_t = log(ᾱ_t / (1-ᾱ_t)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

MAX_BETA = 0.999
SCHEDULES = ("linear", "cosine", "sigmoid")


def linear_betas(T: int, beta_start: float = 1e-4, beta_end: float = 0.02, *, scaled: bool = True) -> np.ndarray:
    """Ho et al. (2020): betas linear in t. ``scaled``: the range is given for T=1000 and scaled by
    1000/T (Nichol & Dhariwal 2021, ``get_named_beta_schedule``) so every T has the same ᾱ curve;
    otherwise the range is taken literally over T (diffusers' ``DDPMScheduler``, most hand-written code)."""
    scale = 1000.0 / T if scaled else 1.0
    betas = np.linspace(beta_start * scale, beta_end * scale, T, dtype=np.float64)
    return np.clip(betas, 0.0, MAX_BETA)


def betas_from_alpha_bar(T: int, alpha_bar: np.ndarray) -> np.ndarray:
    """β_i = 1 - ᾱ((i+1)/T) / ᾱ(i/T), clipped at 0.999; ``alpha_bar`` holds ᾱ at i/T, i = 0..T."""
    assert alpha_bar.shape == (T + 1,)
    return np.minimum(1.0 - alpha_bar[1:] / alpha_bar[:-1], MAX_BETA)


def cosine_betas(T: int, s: float = 0.008) -> np.ndarray:
    """Nichol & Dhariwal (2021), Eq. 17: ᾱ(t) = f(t)/f(0), f(t) = cos²(((t/T)+s)/(1+s)·π/2)."""
    u = np.arange(T + 1, dtype=np.float64) / T
    f = np.cos((u + s) / (1.0 + s) * math.pi / 2.0) ** 2
    return betas_from_alpha_bar(T, f / f[0])


def sigmoid_betas(T: int, start: float = -3.0, end: float = 3.0, tau: float = 1.0) -> np.ndarray:
    """Jabri et al. (2023) / Chen (2023), Alg. 1: ᾱ(t) from a sigmoid on [start, end] at temperature tau."""
    u = np.arange(T + 1, dtype=np.float64) / T

    def sig(x: np.ndarray | float) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))

    v_start, v_end = sig(start / tau), sig(end / tau)
    alpha_bar = (v_end - sig((u * (end - start) + start) / tau)) / (v_end - v_start)
    return betas_from_alpha_bar(T, np.clip(alpha_bar, 1e-12, 1.0))


def rescale_zero_terminal_snr(betas: np.ndarray) -> np.ndarray:
    """Lin et al. (2024), Algorithm 1: shift and scale √ᾱ so that ᾱ_{T-1} = 0 (the last step is pure
    noise, as at sampling time) while ᾱ_0 keeps its value. Needs v- or x0-prediction."""
    root = np.sqrt(np.cumprod(1.0 - betas))
    first, last = root[0], root[-1]
    root = (root - last) * first / (first - last)
    alpha_bar = root**2
    alphas = np.concatenate([alpha_bar[:1], alpha_bar[1:] / alpha_bar[:-1]])
    return 1.0 - alphas


def shift_log_snr(betas: np.ndarray, shift: float) -> np.ndarray:
    """Hoogeboom et al. (2023), "simple diffusion", Sec. 3: every step's log-SNR moved by ``shift``,
    λ'_t = λ_t + shift, i.e. ᾱ'_t = sigmoid(λ_t + shift) = ᾱ_t / (ᾱ_t + (1 − ᾱ_t)·e^(−shift)).
    2·ln(64/d) leaves an image of side d as recognisable at each step as the schedule leaves a 64-px
    one (negative: noisier, for larger images). ᾱ = 0 (zero terminal SNR) stays 0."""
    if shift == 0.0:
        return betas
    a = np.cumprod(1.0 - betas)
    shifted = a / (a + (1.0 - a) * math.exp(-shift))
    return 1.0 - np.concatenate([shifted[:1], shifted[1:] / shifted[:-1]])


def make_betas(
    name: str,
    T: int,
    *,
    beta_start: float = 1e-4,
    beta_end: float = 0.02,
    scaled: bool = True,
    zero_terminal_snr: bool = False,
    log_snr_shift: float = 0.0,
) -> np.ndarray:
    if T < 2:
        raise ValueError(f"T must be at least 2, got T={T}")
    if name == "linear":
        betas = linear_betas(T, beta_start, beta_end, scaled=scaled)
    elif name == "cosine":
        betas = cosine_betas(T)
    elif name == "sigmoid":
        betas = sigmoid_betas(T)
    else:
        raise ValueError(f"unknown schedule {name!r}; expected one of {', '.join(SCHEDULES)}")
    return shift_log_snr(rescale_zero_terminal_snr(betas) if zero_terminal_snr else betas, log_snr_shift)


@dataclass(frozen=True, eq=False)
class NoiseSchedule:
    """ᾱ_t for t = 0..T-1 (float64 on the host; ``coefficients`` gives device tensors)."""

    betas: np.ndarray

    @classmethod
    def create(cls, name: str, T: int, **options: Any) -> NoiseSchedule:
        """The schedule ``name`` over ``T`` steps; ``options`` are :func:`make_betas`' keywords."""
        return cls(make_betas(name, T, **options))

    @property
    def T(self) -> int:
        return int(self.betas.shape[0])

    @property
    def alphas_cumprod(self) -> np.ndarray:
        return np.cumprod(1.0 - self.betas)

    @property
    def log_snr(self) -> np.ndarray:
        """λ_t = log(ᾱ_t / (1-ᾱ_t)); −inf where ᾱ_t = 0 (zero terminal SNR)."""
        a = self.alphas_cumprod
        with np.errstate(divide="ignore"):
            return np.log(a) - np.log1p(-a)

    @property
    def noise_levels(self) -> np.ndarray:
        """σ_t/α_t = √((1−ᾱ_t)/ᾱ_t), EDM's σ of the same noisy image (Karras et al. 2022); ∞ where ᾱ_t = 0."""
        a = self.alphas_cumprod
        with np.errstate(divide="ignore"):
            return np.sqrt((1.0 - a) / a)

    def nearest_timesteps(self, log_snr: np.ndarray) -> np.ndarray:
        """The timestep whose log-SNR is closest to each requested value."""
        return np.abs(self.log_snr[None, :] - np.asarray(log_snr)[:, None]).argmin(axis=1)

    def alpha_sigma(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(sqrt(ᾱ_t), sqrt(1-ᾱ_t)) gathered at integer timesteps ``t``, shaped (B, 1, 1, 1), float32."""
        alpha, sigma = self._table(t.device)
        index = t.long()
        return alpha[index].view(-1, 1, 1, 1), sigma[index].view(-1, 1, 1, 1)

    def _table(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        cache: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = self.__dict__.setdefault("_tables", {})
        if device not in cache:
            a = torch.from_numpy(self.alphas_cumprod)
            cache[device] = (a.sqrt().float().to(device), (1.0 - a).sqrt().float().to(device))
        return cache[device]
