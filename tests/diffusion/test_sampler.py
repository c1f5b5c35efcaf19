from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from hpo.diffusion.parameterization import target, to_x0_eps
from hpo.diffusion.sampler import (
    HEUN_SIGMA_MAX,
    evaluation_timesteps,
    guided_output,
    make_denoiser,
    sample_ddim,
    sample_ddpm,
    sample_dpmpp_2m,
    sample_heun,
    trailing_step,
    trailing_timesteps,
)
from hpo.diffusion.schedule import NoiseSchedule
from hpo.diffusion.unet import UNet, UNetConfig


def random_unet(num_classes: int = 0, channels: int = 1) -> UNet:
    """A UNet whose zero-initialised layers are perturbed, so its output depends on its inputs."""
    torch.manual_seed(0)
    net = UNet(
        UNetConfig(
            in_channels=channels,
            base_channels=8,
            channel_mult=(1, 2),
            dropout=0.0,
            num_classes=num_classes,
            image_size=8,
        )
    ).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return net


@pytest.mark.parametrize("prediction", ["eps", "v", "x0"])
def test_parameterisations_convert_back_to_x0_and_eps(prediction: str) -> None:
    x0, eps = torch.randn(4, 1, 8, 8), torch.randn(4, 1, 8, 8)
    alpha = torch.tensor([0.9, 0.5, 0.2, 0.99]).view(-1, 1, 1, 1)
    sigma = (1 - alpha**2).sqrt()
    x_t = alpha * x0 + sigma * eps
    x0_hat, eps_hat = to_x0_eps(prediction, target(prediction, x0, eps, alpha, sigma), x_t, alpha, sigma)
    torch.testing.assert_close(x0_hat, x0, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(eps_hat, eps, atol=1e-4, rtol=1e-4)


def test_trailing_spacing_starts_at_the_last_timestep() -> None:
    assert trailing_timesteps(1000, 10) == [999, 899, 799, 699, 599, 499, 399, 299, 199, 99]
    assert trailing_timesteps(50, 50) == list(range(49, -1, -1))


def test_ddim_with_eta_zero_is_reproducible_given_a_generator() -> None:
    net, sched = random_unet(), NoiseSchedule.create("linear", 100)
    denoise = make_denoiser(net, sched, prediction="eps")

    def run(seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        return sample_ddim(denoise, sched, torch.randn(3, 1, 8, 8, generator=gen), steps=10, eta=0.0, generator=gen)

    torch.testing.assert_close(run(1), run(1), rtol=0, atol=0)
    assert not torch.allclose(run(1), run(2))


def test_ddim_with_eta_one_over_all_steps_is_ancestral_ddpm() -> None:
    net, sched = random_unet(), NoiseSchedule.create("cosine", 20)
    denoise = make_denoiser(net, sched, prediction="v")
    x = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    a = sample_ddim(denoise, sched, x, steps=20, eta=1.0, generator=torch.Generator().manual_seed(5))
    b = sample_ddpm(denoise, sched, x, steps=20, eta=1.0, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_guidance_scale_one_equals_the_conditional_model_alone() -> None:
    net = random_unet(num_classes=3)
    x, t, labels = torch.randn(4, 1, 8, 8), torch.full((4,), 500.0), torch.tensor([0, 1, 2, 1])
    torch.testing.assert_close(guided_output(net, x, t, labels, scale=1.0, null_class=3), net(x, t, labels))


def test_guidance_batches_cond_and_uncond_into_one_forward() -> None:
    net = random_unet(num_classes=3)
    x, t, labels = torch.randn(4, 1, 8, 8), torch.full((4,), 500.0), torch.tensor([0, 1, 2, 1])
    calls: list[int] = []
    net.register_forward_hook(lambda _m, args, _o: calls.append(args[0].shape[0]))
    out = guided_output(net, x, t, labels, scale=3.0, null_class=3)
    assert calls == [8]
    cond, uncond = net(x, t, labels), net(x, t, torch.full_like(labels, 3))
    torch.testing.assert_close(out, uncond + 3.0 * (cond - uncond), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out, cond)


def test_ancestral_ddpm_refuses_fewer_steps_than_T() -> None:
    net, sched = random_unet(), NoiseSchedule.create("linear", 20)
    with pytest.raises(ValueError, match="steps=T=20"):
        sample_ddpm(make_denoiser(net, sched, prediction="eps"), sched, torch.randn(1, 1, 8, 8), steps=10)


def test_trailing_spacing_gives_exactly_steps_distinct_decreasing_timesteps_for_every_pair() -> None:
    """Over all T ≤ 2000 and steps ≤ T (the float form fails 15k of them, e.g. T=100, steps=29):
    the first step is T−1, the last ≥ 0, and the second differs from the first, at every pair
    (vectorised over the same integer rule the sampler uses); every step of every list for T ≤ 400,
    where the lists are built by the sampler's own function."""
    for T in range(1, 2001):
        steps = np.arange(1, T + 1)
        assert (trailing_step(T, steps, 0) == T - 1).all()
        assert (trailing_step(T, steps, steps - 1) >= 0).all()
        many = steps[steps > 1]
        assert (trailing_step(T, many, 1) < T - 1).all()
        assert (trailing_step(T, many, many - 1) < trailing_step(T, many, many - 2)).all()
    for T in range(1, 401):
        for n in range(1, T + 1):
            ts = trailing_timesteps(T, n)
            assert len(ts) == n and ts[0] == T - 1 and ts[-1] >= 0
            assert all(a > b for a, b in itertools.pairwise(ts)), (T, n)


def test_ddim_with_an_exact_denoiser_does_not_collapse_at_t100_and_29_steps() -> None:
    """Data N(0, 0.8²) per pixel, denoised by its exact posterior mean. The float trailing spacing
    ran a 30th step at t = −1 for (T=100, 29 steps), read as the noisiest level, and collapsed the
    samples (std 0.002 where 28 and 30 steps give 0.74)."""
    sched = NoiseSchedule.create("linear", 100)
    abar = torch.tensor(sched.alphas_cumprod, dtype=torch.float32)

    def posterior_mean(x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = abar[t].view(-1, 1, 1, 1)
        x0 = a.sqrt() * 0.64 / (a * 0.64 + 1 - a) * x
        return x0, (x - a.sqrt() * x0) / (1 - a).sqrt()

    x = torch.randn(4096, 1, 1, 1, generator=torch.Generator().manual_seed(0))
    std = {n: float(sample_ddim(posterior_mean, sched, x, steps=n, eta=0.0).std()) for n in (28, 29, 30)}
    assert std[29] == pytest.approx((std[28] + std[30]) / 2, rel=0.01) and std[29] > 0.7, std


def smooth_denoiser(T: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A fixed, nonlinear x0̂(x, t) standing in for a network (the samplers see only this)."""

    def x0_of(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.tanh(0.7 * x + 0.3 * (t.to(x.dtype) / T).view(-1, 1, 1, 1))

    return x0_of


@pytest.mark.parametrize(("name", "T", "steps"), [("linear", 1000, 10), ("cosine", 250, 20), ("linear", 1000, 25)])
def test_dpm_solver_pp_2m_matches_diffusers_step_for_step(name: str, T: int, steps: int) -> None:
    from diffusers import DPMSolverMultistepScheduler

    schedule = NoiseSchedule.create(name, T)
    x0_of = smooth_denoiser(T)
    x_T = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ours = sample_dpmpp_2m(lambda x, t: (x0_of(x, t), torch.zeros_like(x)), schedule, x_T.clone(), steps=steps)
    theirs: Any = DPMSolverMultistepScheduler(  # diffusers' decorated class: mypy sees none of its methods
        num_train_timesteps=T, trained_betas=schedule.betas, algorithm_type="dpmsolver++", solver_order=2,
        final_sigmas_type="zero", prediction_type="sample", lower_order_final=True,
    )  # fmt: skip
    theirs.set_timesteps(timesteps=trailing_timesteps(T, steps))  # diffusers rounds half to even, we half up
    x = x_T.clone()
    for t in theirs.timesteps:
        x = theirs.step(x0_of(x, torch.full((3,), int(t))), t, x).prev_sample
    np.testing.assert_allclose(ours.numpy(), x.numpy(), atol=1e-5)  # diffusers computes its σ's in float32


def test_dpm_solver_pp_2m_starts_from_pure_noise_at_zero_terminal_snr_and_one_step_is_ddims() -> None:
    schedule = NoiseSchedule.create("linear", 500, zero_terminal_snr=True)
    x0_of = smooth_denoiser(500)

    def denoise(x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x0_of(x, t), torch.zeros_like(x)

    x_T = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.isfinite(sample_dpmpp_2m(denoise, schedule, x_T.clone(), steps=7)).all()  # λ = −∞ at t = T−1
    one = sample_dpmpp_2m(denoise, schedule, x_T.clone(), steps=1)
    torch.testing.assert_close(one, sample_ddim(denoise, schedule, x_T.clone(), steps=1))
    with pytest.raises(ValueError, match="eta must be 0"):
        sample_dpmpp_2m(denoise, schedule, x_T, steps=4, eta=0.5)


# Schedules whose σ/α stays within EDM's σ_max = 80, where Heun corrects every step but the last, as diffusers does.
WITHIN_SIGMA_MAX = [("linear", 1000, 10, {"beta_end": 0.012}), ("linear", 250, 20, {"log_snr_shift": 2.0}),
                    ("linear", 1000, 7, {"beta_end": 0.012})]  # fmt: skip


@pytest.mark.parametrize(("name", "T", "steps", "options"), WITHIN_SIGMA_MAX)
def test_heun_matches_diffusers_step_for_step(name: str, T: int, steps: int, options: dict[str, float]) -> None:
    from diffusers import HeunDiscreteScheduler

    schedule = NoiseSchedule.create(name, T, **options)
    assert schedule.noise_levels.max() <= HEUN_SIGMA_MAX
    x0_of = smooth_denoiser(T)
    x_T = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    denoise = lambda x, t: (x0_of(x, t), _eps(schedule, x, x0_of(x, t), t))  # noqa: E731
    ours = sample_heun(denoise, schedule, x_T.clone(), steps=steps)
    theirs: Any = HeunDiscreteScheduler(num_train_timesteps=T, trained_betas=schedule.betas, prediction_type="sample")
    ts = trailing_timesteps(T, steps)
    theirs.set_timesteps(timesteps=ts)
    level = torch.as_tensor(schedule.noise_levels)[ts]
    theirs.sigmas = torch.cat([level[:1], level[1:].repeat_interleave(2), torch.zeros(1, dtype=level.dtype)])
    x = x_T.clone() * (level[0] ** 2 + 1) ** 0.5  # their variable is x/α (init_noise_sigma drops the +1)
    calls = 0
    for t in theirs.timesteps:
        calls += 1
        model_in = theirs.scale_model_input(x, t)  # x/√(σ̃² + 1) = α·x/α: the network sees our x
        x = theirs.step(x0_of(model_in, torch.full((3,), int(t))), t, x).prev_sample
    assert calls == 2 * steps - 1 == len(evaluation_timesteps("heun", schedule, steps))  # Heun's count
    np.testing.assert_allclose(ours.numpy(), x.numpy(), atol=1e-9)  # their σ's as ours, in float64


def _eps(schedule: NoiseSchedule, x: torch.Tensor, x0: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    abar = torch.as_tensor(schedule.alphas_cumprod, dtype=x.dtype)[t].view(-1, 1, 1, 1)
    return (x - abar.sqrt() * x0) / (1 - abar).sqrt()


def recording_denoiser(schedule: NoiseSchedule) -> tuple[Callable[..., Any], list[int]]:
    """:func:`smooth_denoiser` as (x0̂, ε̂), and the list of timesteps it is called at, in order."""
    x0_of = smooth_denoiser(schedule.T)
    seen: list[int] = []

    def denoise(x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(int(t[0]))
        return x0_of(x, t), _eps(schedule, x, x0_of(x, t), t)

    return denoise, seen


def test_heun_corrects_no_step_from_above_sigma_max_nor_the_last_and_counts_what_it_evaluates() -> None:
    from hpo.spec.sampling import SamplingConfig

    schedule = NoiseSchedule.create("cosine", 200)  # σ/α 4 058 at t = 199: the first step starts above 80
    denoise, seen = recording_denoiser(schedule)
    x_T = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    sample_heun(denoise, schedule, x_T.clone(), steps=6)
    ts = trailing_timesteps(200, 6)
    above = [t for t in ts if schedule.noise_levels[t] > HEUN_SIGMA_MAX]
    assert above == ts[:1]  # only the first
    assert seen == [ts[0], ts[1], *itertools.chain.from_iterable((t, t) for t in ts[2:])]  # all on the grid
    assert seen == evaluation_timesteps("heun", schedule, 6)  # what the sweep's count of evaluations walks
    assert len(seen) == 10 < SamplingConfig(1.0, 6, sampler="heun").evaluations() == 11  # the bound
    assert SamplingConfig(2.0, 6, sampler="heun").evaluations() == 22  # guided: both passes each time
    one = sample_heun(denoise, schedule, x_T.clone(), steps=1)
    torch.testing.assert_close(one, sample_ddim(denoise, schedule, x_T.clone(), steps=1))


def test_heun_from_infinite_or_huge_noise_levels_stays_finite_and_refuses_a_nonzero_eta() -> None:
    """Zero terminal SNR (σ/α = ∞) and a cosine T = 1000 schedule (σ/α 2·10⁴ at t = T−1): the first
    step is DDIM's; correcting it gave a trained photo model an FID∞ over 1 400 (DPM-Solver++: 8.1)."""
    for schedule in (NoiseSchedule.create("linear", 100, zero_terminal_snr=True), NoiseSchedule.create("cosine", 1000)):
        x0_of = smooth_denoiser(schedule.T)
        denoise = lambda x, t, s=schedule, f=x0_of: (f(x, t), _eps(s, x, f(x, t), t))  # noqa: E731
        x_T = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        out = sample_heun(denoise, schedule, x_T, steps=5)
        assert torch.isfinite(out).all() and out.abs().max() <= 1.0  # x0̂ is tanh: within [-1, 1]
    with pytest.raises(ValueError, match="eta must be 0"):
        sample_heun(denoise, schedule, torch.randn(1, 1, 8, 8), steps=4, eta=0.5)
