from __future__ import annotations

import math

import numpy as np
import pytest

from hpo.diffusion.schedule import NoiseSchedule, cosine_betas, linear_betas, make_betas


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
