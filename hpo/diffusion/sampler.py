"""Samplers sharing one signature: ``sample_*(denoise, schedule, x_T, *, steps, eta, generator, spacing)``.

``denoise(x_t, t)`` returns (x0̂, ε̂) at integer timesteps t; :func:`make_denoiser` builds it from a
network, its parameterisation and classifier-free guidance, so samplers know nothing of either.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from hpo.diffusion.parameterization import Network, model_time, to_x0_eps
from hpo.diffusion.schedule import NoiseSchedule

Denoiser = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
EVERYWHERE = (0.0, math.inf)  # a guidance interval that holds every noise level


def guided_output(
    net: Network,
    x: torch.Tensor,
    t: torch.Tensor,
    labels: torch.Tensor | None,
    *,
    scale: float | torch.Tensor,
    null_class: int,
) -> torch.Tensor:
    """Classifier-free guidance (Ho & Salimans 2022, Eq. 6): uncond + w·(cond − uncond).

    The conditional and unconditional passes run as one batch of 2B. w = 1 is the conditional
    model alone (one pass of B); unconditional networks (labels None) are never guided. ``scale`` may
    be a (B, 1, 1, 1) tensor of per-sample w.
    """
    if labels is None or (not isinstance(scale, torch.Tensor) and scale == 1.0):
        return net(x, t, labels)
    null = torch.full_like(labels, null_class)
    out = net(torch.cat([x, x]), torch.cat([t, t]), torch.cat([labels, null]))
    cond, uncond = out.chunk(2)
    return uncond + scale * (cond - uncond)


def make_denoiser(
    net: Network,
    schedule: NoiseSchedule,
    *,
    prediction: str,
    labels: torch.Tensor | None = None,
    guidance_scale: float = 1.0,
    guidance_interval: tuple[float, float] = EVERYWHERE,
    null_class: int = 0,
    clip: bool = True,
) -> Denoiser:
    """(x_t, t) → (x0̂, ε̂); x0̂ is clipped to [-1, 1] and ε̂ re-derived from it when ``clip``.
    Guidance applies only at timesteps whose noise level σ/α lies in ``guidance_interval``
    (:func:`guided_at`); elsewhere the conditional model alone, one pass."""
    levels = schedule.noise_levels

    def scale_at(t: torch.Tensor) -> float | torch.Tensor:
        if guidance_interval == EVERYWHERE:
            return guidance_scale
        inside = [guided_at(float(levels[i]), guidance_interval) for i in t.tolist()]
        if all(inside) or not any(inside):
            return guidance_scale if inside[0] else 1.0
        return torch.tensor([guidance_scale if k else 1.0 for k in inside], device=t.device).view(-1, 1, 1, 1)

    def denoise(x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = guided_output(net, x, model_time(t, schedule.T), labels, scale=scale_at(t), null_class=null_class)
        alpha, sigma = schedule.alpha_sigma(t)
        x0, eps = to_x0_eps(prediction, out.float(), x, alpha, sigma)
        if clip:
            x0 = x0.clamp(-1.0, 1.0)
            eps = (x - alpha * x0) / sigma
        return x0, eps

    return denoise


def guided_at(level: float, interval: tuple[float, float]) -> bool:
    """Whether guidance applies at noise level σ/α: inside (σ_lo, σ_hi] (Kynkäänniemi et al. 2024,
    "Applying Guidance in a Limited Interval Improves Sample and Distribution Quality in Diffusion Models")."""
    low, high = interval
    return low < level <= high


def trailing_timesteps(T: int, steps: int) -> list[int]:
    """'Trailing' spacing (Lin et al. 2024, Table 2): t_i = T − 1 − round(i·T/steps), i = 0..steps−1,
    so sampling starts from pure noise at t = T−1. Integer arithmetic (round half up): exactly
    ``steps`` distinct, decreasing timesteps in [0, T−1]. The float form ``arange(T, 0, -T/steps)``
    (also diffusers') yields steps+1 entries ending in −1 for some pairs, e.g. T=100, steps=29."""
    if not 1 <= steps <= T:
        raise ValueError(f"steps must be in [1, T={T}], got steps={steps}")
    return [int(trailing_step(T, steps, i)) for i in range(steps)]


def trailing_step(T: int, steps: Any, i: Any) -> Any:
    """The i-th trailing timestep, T − 1 − round_half_up(i·T/steps), for ints or integer arrays."""
    return T - 1 - (2 * i * T + steps) // (2 * steps)


KARRAS_RHO = 7.0  # Karras et al. 2022, Eq. 5 and Table 1: ρ = 7 ("EDM")
EDM_SIGMA_MAX = 80.0  # EDM's σ_max (Karras et al. 2022, Table 1)


def karras_timesteps(schedule: NoiseSchedule, steps: int, rho: float = KARRAS_RHO) -> list[int]:
    """EDM's spacing (Karras et al. 2022, Eq. 5): σ_i = (σ_max^{1/ρ} + i/(N−1)·(σ_min^{1/ρ} − σ_max^{1/ρ}))^ρ,
    i = 0..N−1, from σ_max = the schedule's largest finite σ/α, at most EDM's 80, down to σ_min = its
    σ/α at t = 0; each σ_i becomes the training timestep nearest it in log σ, repeats dropped, and the
    first is T−1, so sampling starts from pure noise as with trailing. Steps crowd towards low noise.

    Without the cap at 80 (diffusers' ``use_karras_sigmas`` takes the schedule's own σ_max, and is
    equal to this where that is at most 80: ``tests/diffusion/test_karras_spacing.py``), a cosine T = 1000
    schedule (σ/α 2·10⁴ at T−1) puts 13 of 20 steps on t ≥ 990, where 8 round onto others. diffusers
    also keeps σ_i in its update while the network sees the rounded timestep; here each step uses its
    timestep's own σ, so network and solver agree."""
    T = schedule.T
    if not 1 <= steps <= T:
        raise ValueError(f"steps must be in [1, T={T}], got steps={steps}")
    log_levels = np.log(schedule.noise_levels)
    finite = log_levels[np.isfinite(log_levels)]  # t = 0..k: σ/α grows with t
    high, low = min(float(np.exp(finite.max())), EDM_SIGMA_MAX), float(np.exp(finite.min()))
    ramp = np.linspace(0.0, 1.0, steps)
    sigmas = (high ** (1 / rho) + ramp * (low ** (1 / rho) - high ** (1 / rho))) ** rho
    nearest = [int(np.abs(finite - math.log(s)).argmin()) for s in sigmas]
    return list(dict.fromkeys([T - 1, *nearest[1:]]))


SPACINGS = ("trailing", "karras")  # spec.samplers.Spacing
TRAILING, KARRAS = SPACINGS


def sampling_timesteps(schedule: NoiseSchedule, steps: int, spacing: str = TRAILING) -> list[int]:
    """The decreasing timesteps a deterministic sampler visits before its last step to σ = 0:
    ``trailing`` (:func:`trailing_timesteps`, DDIM's) or ``karras`` (:func:`karras_timesteps`, EDM's)."""
    if spacing == TRAILING:
        return trailing_timesteps(schedule.T, steps)
    if spacing == KARRAS:
        return karras_timesteps(schedule, steps)
    raise ValueError(f"unknown spacing {spacing!r}; expected one of {', '.join(SPACINGS)}")


def _noise(x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    return torch.randn(x.shape, device=x.device, dtype=x.dtype, generator=generator)


@torch.no_grad()
def sample_ddim(
    denoise: Denoiser,
    schedule: NoiseSchedule,
    x: torch.Tensor,
    *,
    steps: int,
    eta: float = 0.0,
    generator: torch.Generator | None = None,
    spacing: str = TRAILING,
) -> torch.Tensor:
    """DDIM (Song et al. 2021, Eq. 12): x_prev = √ᾱ_prev·x0̂ + √(1−ᾱ_prev−σ²)·ε̂ + σ·z,
    σ = η·√((1−ᾱ_prev)/(1−ᾱ_t))·√(1−ᾱ_t/ᾱ_prev). η = 0 is deterministic."""
    abar = schedule.alphas_cumprod
    timesteps = sampling_timesteps(schedule, steps, spacing)
    for i, t in enumerate(timesteps):
        t_prev = timesteps[i + 1] if i + 1 < len(timesteps) else -1
        a_t, a_prev = float(abar[t]), (float(abar[t_prev]) if t_prev >= 0 else 1.0)
        x0, eps = denoise(x, torch.full((x.shape[0],), t, device=x.device, dtype=torch.long))
        sigma = eta * float(np.sqrt((1.0 - a_prev) / (1.0 - a_t) * (1.0 - a_t / a_prev)))
        x = a_prev**0.5 * x0 + max(1.0 - a_prev - sigma**2, 0.0) ** 0.5 * eps
        if t_prev >= 0 and eta > 0.0:
            x = x + sigma * _noise(x, generator)
    return x


@torch.no_grad()
def sample_ddpm(
    denoise: Denoiser,
    schedule: NoiseSchedule,
    x: torch.Tensor,
    *,
    steps: int,
    eta: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Ancestral DDPM (Ho et al. 2020, Eqs. 6–7) through all T steps, the reference sampler:
    x_{t−1} ~ N(μ̃_t(x_t, x0̂), β̃_t). It always takes T steps with η = 1."""
    if steps != schedule.T or eta != 1.0:
        raise ValueError(f"ancestral DDPM takes steps=T={schedule.T} and eta=1, got steps={steps}, eta={eta}")
    betas, abar = schedule.betas, schedule.alphas_cumprod
    for t in range(schedule.T - 1, -1, -1):
        a_t, a_prev, beta = float(abar[t]), (float(abar[t - 1]) if t > 0 else 1.0), float(betas[t])
        x0, _ = denoise(x, torch.full((x.shape[0],), t, device=x.device, dtype=torch.long))
        x = (a_prev**0.5 * beta / (1.0 - a_t)) * x0 + ((1.0 - beta) ** 0.5 * (1.0 - a_prev) / (1.0 - a_t)) * x
        if t > 0:
            x = x + (beta * (1.0 - a_prev) / (1.0 - a_t)) ** 0.5 * _noise(x, generator)
    return x


def _alpha_sigma_lambda(abar: float) -> tuple[float, float, float]:
    """(α_t, σ_t, λ_t = log(α_t/σ_t)) at ᾱ_t; λ = −∞ where ᾱ = 0 (zero terminal SNR), +∞ at ᾱ = 1."""
    alpha, sigma = abar**0.5, (1.0 - abar) ** 0.5
    with np.errstate(divide="ignore"):
        return alpha, sigma, float(np.log(alpha) - np.log(sigma))


@torch.no_grad()
def sample_dpmpp_2m(
    denoise: Denoiser,
    schedule: NoiseSchedule,
    x: torch.Tensor,
    *,
    steps: int,
    eta: float = 0.0,
    generator: torch.Generator | None = None,
    spacing: str = TRAILING,
) -> torch.Tensor:
    """DPM-Solver++(2M) (Lu et al. 2022, "DPM-Solver++", Algorithm 2), the multistep second-order
    solver of the diffusion ODE in data prediction, on the same timesteps as DDIM (``spacing``) and
    then to σ = 0. With h_i = λ_{t_i} − λ_{t_{i−1}} (λ = log α/σ) and x0̂_i the denoiser's data prediction:

    first step (and the last, to σ = 0): x_{t_i} = (σ_{t_i}/σ_{t_{i−1}})·x − α_{t_i}(e^{−h_i} − 1)·x0̂_{i−1}
    others: the same with D_i = (1 + 1/(2r_i))·x0̂_{i−1} − 1/(2r_i)·x0̂_{i−2}, r_i = h_{i−1}/h_i.

    One network evaluation per step, as DDIM; deterministic (``eta`` must be 0). Matches diffusers'
    ``DPMSolverMultistepScheduler(algorithm_type="dpmsolver++", solver_order=2, final_sigmas_type="zero")``
    step for step (``tests/diffusion/test_sampler.py``)."""
    if eta != 0.0:
        raise ValueError(f"DPM-Solver++(2M) is deterministic: eta must be 0, got {eta}")
    del generator  # one signature with the stochastic samplers
    abar = schedule.alphas_cumprod
    timesteps = sampling_timesteps(schedule, steps, spacing)
    levels = [_alpha_sigma_lambda(float(abar[t])) for t in timesteps] + [(1.0, 0.0, np.inf)]
    previous: torch.Tensor | None = None  # x0̂ of the step before
    for i, t in enumerate(timesteps):
        x0, _ = denoise(x, torch.full((x.shape[0],), t, device=x.device, dtype=torch.long))
        (_, sigma_s, lam_s), (alpha_t, sigma_t, lam_t) = levels[i], levels[i + 1]
        h = lam_t - lam_s
        data = x0
        last = i == len(timesteps) - 1
        if previous is not None and not last:
            r = (lam_s - levels[i - 1][2]) / h
            data = (1.0 + 0.5 / r) * x0 - (0.5 / r) * previous
        ratio = sigma_t / sigma_s if sigma_s > 0 else 0.0
        x = ratio * x - alpha_t * float(np.expm1(-h)) * data
        previous = x0
    return x


HEUN_SIGMA_MAX = EDM_SIGMA_MAX  # Heun corrects no step that starts above EDM's σ_max


def heun_corrects(level: float, level_next: float) -> bool:
    """Whether Heun corrects the step from noise level σ/α = ``level`` to ``level_next``: not the last
    (to σ = 0, Algorithm 1 line 6) and not one from above EDM's σ_max, where the trapezoid's two
    slopes lie so far apart (σ/α reaches 157 on a linear T = 1000 schedule, ~10⁴ on a cosine one, ∞ at
    zero terminal SNR) that the correction overshoots: on a cosine T = 1000 photo model, correcting
    the first step gave FID∞ 1 400-1 900 where DPM-Solver++ reached 8.1 (benchmarks/sampler_frontier.py)."""
    return level_next > 0.0 and level <= HEUN_SIGMA_MAX


@torch.no_grad()
def sample_heun(
    denoise: Denoiser,
    schedule: NoiseSchedule,
    x: torch.Tensor,
    *,
    steps: int,
    eta: float = 0.0,
    generator: torch.Generator | None = None,
    spacing: str = TRAILING,
) -> torch.Tensor:
    """Heun's second-order method (Karras et al. 2022, "Elucidating the Design Space of Diffusion-Based
    Generative Models", Algorithm 1, deterministic: S_churn = 0) on the probability-flow ODE
    dx̃/dσ̃ = (x̃ − D(x̃; σ̃))/σ̃ = ε̂ in the variables x̃ = x/α_t, σ̃ = σ_t/α_t, at the same
    timesteps as DDIM (``spacing``: trailing, or EDM's own, ``karras``) and then to σ̃ = 0:

    Euler (line 5): x̃' = x̃_i + (σ̃_{i+1} − σ̃_i)·ε̂(x̃_i, t_i) = x0̂_i + σ̃_{i+1}·ε̂_i — DDIM's step;
    correction (lines 7–8): x̃_{i+1} = x̃_i + (σ̃_{i+1} − σ̃_i)·(ε̂(x̃_i, t_i) + ε̂(x̃', t_{i+1}))/2,
    on every step but the last (to σ̃ = 0) and those starting above σ̃ = 80 (:func:`heun_corrects`).

    So ``steps`` steps cost at most 2·steps − 1 network evaluations (``SamplingConfig.evaluations``;
    :func:`evaluation_timesteps` lists them for a schedule), each on an integer timestep of the
    training schedule. Deterministic (``eta`` must be 0). Where σ̃ starts at most 80 it matches
    diffusers' ``HeunDiscreteScheduler`` given the same timesteps (``tests/diffusion/test_sampler.py``); zero
    terminal SNR (σ̃ = ∞ at t = T−1) starts with DDIM's step, as above 80."""
    if eta != 0.0:
        raise ValueError(f"Heun is deterministic: eta must be 0, got {eta}")
    del generator  # one signature with the stochastic samplers
    abar, noise = schedule.alphas_cumprod, schedule.noise_levels
    timesteps = sampling_timesteps(schedule, steps, spacing)
    levels = [(float(abar[t]) ** 0.5, float(noise[t])) for t in timesteps] + [(1.0, 0.0)]
    at = lambda t: torch.full((x.shape[0],), t, device=x.device, dtype=torch.long)  # noqa: E731
    for i, t in enumerate(timesteps):
        (alpha, level), (alpha_next, level_next) = levels[i], levels[i + 1]
        x0, eps = denoise(x, at(t))
        x_next = x0 + level_next * eps  # Euler, written so that σ̃ = ∞ needs no x/α
        if heun_corrects(level, level_next):
            _, eps_next = denoise(alpha_next * x_next, at(timesteps[i + 1]))
            x_next = x / alpha + (level_next - level) * 0.5 * (eps + eps_next)
        x = alpha_next * x_next
    return x  # α = 1 at σ̃ = 0


Sampler = Callable[..., torch.Tensor]
SAMPLERS: dict[str, Sampler] = {  # spec.sampling.SAMPLER_NAMES
    "ddim": sample_ddim,
    "dpmpp_2m": sample_dpmpp_2m,
    "heun": sample_heun,
}


def evaluation_timesteps(sampler: str, schedule: NoiseSchedule, steps: int, spacing: str = TRAILING) -> list[int]:
    """The timesteps at which ``sampler`` evaluates the network, in order: each of its timesteps once
    (:func:`sampling_timesteps`), and for Heun each corrected step's end once more (:func:`heun_corrects`)."""
    sampler_named(sampler)
    timesteps = sampling_timesteps(schedule, steps, spacing)
    if sampler != "heun":
        return timesteps
    levels = schedule.noise_levels
    steps_between = itertools.pairwise(timesteps)
    corrected = [end for start, end in steps_between if heun_corrects(float(levels[start]), float(levels[end]))]
    return sorted([*timesteps, *corrected], reverse=True)


def sampler_named(name: str) -> Sampler:
    """The sampler a combination names; an unknown name fails loudly with the known ones."""
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; expected one of {', '.join(SAMPLERS)}")
    return SAMPLERS[name]
