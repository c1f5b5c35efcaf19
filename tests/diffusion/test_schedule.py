from __future__ import annotations

import math

import numpy as np
import pytest

from hpo.diffusion.schedule import NoiseSchedule, cosine_betas, linear_betas, make_betas
from hpo.spec.config import TrainConfig
from hpo.training.trainer import make_schedule


def test_linear_schedule_at_T1000_is_ho_et_al_beta_range() -> None:
    betas = linear_betas(1000)
    np.testing.assert_allclose(betas, np.linspace(1e-4, 0.02, 1000), rtol=0, atol=1e-15)
    assert betas.dtype == np.float64


def test_linear_schedule_scales_with_T_so_terminal_alpha_bar_stays_small() -> None:
    for T in (50, 250, 4000):
        abar_T = np.cumprod(1 - linear_betas(T))[-1]
        assert abar_T < 1e-3, (T, abar_T)


def test_cosine_schedule_matches_nichol_dhariwal_formula() -> None:
    T, s = 1000, 0.008
    abar = np.cumprod(1 - cosine_betas(T))
    f = lambda t: math.cos(((t / T) + s) / (1 + s) * math.pi / 2) ** 2  # noqa: E731
    for t in (0, 10, 250, 500, 900):
        assert abar[t] == pytest.approx(f(t + 1) / f(0), rel=1e-9)


def test_cosine_betas_are_clipped_at_0_999() -> None:
    betas = cosine_betas(1000)
    assert betas.max() == pytest.approx(0.999)
    assert (betas > 0).all()


@pytest.mark.parametrize("name", ["linear", "cosine", "sigmoid"])
@pytest.mark.parametrize("T", [50, 1000, 4000])
def test_every_schedule_decreases_from_near_one_to_near_zero(name: str, T: int) -> None:
    sched = NoiseSchedule.create(name, T)
    abar = sched.alphas_cumprod
    assert abar.shape == (T,)
    assert (np.diff(abar) < 0).all()
    assert abar[0] > 0.97 and abar[-1] < 0.01
    assert (sched.betas <= 0.999).all() and (sched.betas > 0).all()


def test_unknown_schedule_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown schedule 'cosin'; expected one of linear, cosine, sigmoid"):
        make_betas("cosin", 1000)


def test_nearest_timesteps_follow_log_snr() -> None:
    sched = NoiseSchedule.create("cosine", 1000)
    t = sched.nearest_timesteps(np.array([-6.0, 0.0, 6.0]))
    assert t[0] > t[1] > t[2]
    assert abs(sched.log_snr[t[1]]) < 0.05


def test_literal_beta_range_matches_diffusers_ddpm_scheduler() -> None:
    """The person's schedule as written: betas 1e-3 → 0.02 over T=512, not rescaled by 1000/T."""
    from diffusers import DDPMScheduler

    ours = NoiseSchedule.create("linear", 512, beta_start=1e-3, beta_end=0.02, scaled=False).betas
    scheduler = DDPMScheduler(num_train_timesteps=512, beta_start=1e-3, beta_end=0.02, beta_schedule="linear")
    theirs = scheduler.betas  # type: ignore[attr-defined]
    np.testing.assert_allclose(ours, theirs.double().numpy(), rtol=1e-6)
    np.testing.assert_allclose(ours, np.linspace(1e-3, 0.02, 512), rtol=0, atol=1e-15)
    scaled = NoiseSchedule.create("linear", 512, beta_start=1e-3, beta_end=0.02).betas
    np.testing.assert_allclose(scaled, np.linspace(1e-3, 0.02, 512) * 1000 / 512, rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", ["linear", "cosine", "sigmoid"])
def test_zero_terminal_snr_makes_the_last_step_pure_noise_and_keeps_the_first(name: str) -> None:
    from diffusers import DDPMScheduler

    plain = NoiseSchedule.create(name, 1000)
    rescaled = NoiseSchedule.create(name, 1000, zero_terminal_snr=True)
    assert rescaled.alphas_cumprod[-1] == 0.0 and rescaled.log_snr[-1] == -np.inf
    assert rescaled.alphas_cumprod[0] == pytest.approx(plain.alphas_cumprod[0], rel=1e-9)
    assert (np.diff(rescaled.alphas_cumprod) < 0).all()
    if name == "linear":
        scheduler = DDPMScheduler(num_train_timesteps=1000, rescale_betas_zero_snr=True)
        theirs = scheduler.alphas_cumprod.double().numpy()  # type: ignore[attr-defined]
        np.testing.assert_allclose(rescaled.alphas_cumprod, theirs, atol=1e-6)


@pytest.mark.parametrize("name", ["linear", "cosine", "sigmoid"])
@pytest.mark.parametrize("shift", [-2 * math.log(2), 0.7])
def test_schedule_shift_moves_every_steps_log_snr_by_the_shift(name: str, shift: float) -> None:
    plain = NoiseSchedule.create(name, 1000)
    shifted = NoiseSchedule.create(name, 1000, log_snr_shift=shift)
    np.testing.assert_allclose(shifted.log_snr - plain.log_snr, shift, rtol=0, atol=1e-9)
    assert (np.diff(shifted.alphas_cumprod) < 0).all() and shifted.betas.min() > 0


def test_no_shift_leaves_the_betas_untouched_and_zero_terminal_snr_stays_pure_noise() -> None:
    np.testing.assert_array_equal(make_betas("cosine", 500, log_snr_shift=0.0), make_betas("cosine", 500))
    both = NoiseSchedule.create("linear", 1000, zero_terminal_snr=True, log_snr_shift=-1.5)
    rescaled = NoiseSchedule.create("linear", 1000, zero_terminal_snr=True)
    assert both.alphas_cumprod[-1] == 0.0
    np.testing.assert_allclose(both.log_snr[:-1] - rescaled.log_snr[:-1], -1.5, rtol=0, atol=1e-9)


def test_the_trainer_builds_its_schedule_with_the_configs_shift() -> None:
    """2·ln(64/128): a 128-px run sees at each step the log-SNR a 64-px run sees, minus 1.39."""
    base = make_schedule(TrainConfig(schedule="cosine"))
    at_128 = make_schedule(TrainConfig(schedule="cosine", schedule_shift=2 * math.log(64 / 128)))
    np.testing.assert_allclose(at_128.log_snr - base.log_snr, -1.3863, atol=1e-4)
