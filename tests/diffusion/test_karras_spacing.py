"""EDM's σ spacing (Karras et al. 2022, Eq. 5, ρ = 7) as a sampling setting: the timesteps each
deterministic sampler visits with ``spacing: karras``, checked against diffusers' own Karras
timesteps and solvers, counted as the sweep counts them, and stored as a combination's setting."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from hpo.diffusion.sampler import (
    EDM_SIGMA_MAX,
    evaluation_timesteps,
    karras_timesteps,
    sample_dpmpp_2m,
    sampler_named,
    sampling_timesteps,
    trailing_timesteps,
)
from hpo.diffusion.schedule import NoiseSchedule
from hpo.errors import ConfigError
from hpo.spec.sampling import SamplingConfig, SamplingSweep, build_sweep
from hpo.training.generate import network_evaluations
from tests.diffusion.test_sampler import recording_denoiser, smooth_denoiser

# σ/α at most EDM's σ_max = 80 everywhere (20.8 and 64.4 at t = T−1), where diffusers' Karras sigmas are ours
SHIFTED = {"log_snr_shift": 2.0}
WITHIN_SIGMA_MAX = [("linear", 1000, 10, {"beta_end": 0.012}), ("linear", 1000, 25, {"beta_end": 0.012}),
                    ("linear", 250, 20, SHIFTED), ("linear", 250, 7, SHIFTED)]  # fmt: skip


@pytest.mark.parametrize(("name", "T", "steps", "options"), WITHIN_SIGMA_MAX)
def test_karras_spacing_is_where_diffusers_rounds_its_karras_sigmas(
    name: str, T: int, steps: int, options: dict[str, float]
) -> None:
    from diffusers import DPMSolverMultistepScheduler

    schedule = NoiseSchedule.create(name, T, **options)
    assert schedule.noise_levels.max() <= EDM_SIGMA_MAX
    theirs: Any = DPMSolverMultistepScheduler(
        num_train_timesteps=T, trained_betas=schedule.betas, use_karras_sigmas=True
    )
    theirs.set_timesteps(steps)
    assert karras_timesteps(schedule, steps) == [int(t) for t in theirs.timesteps]
    assert sampling_timesteps(schedule, steps, "karras") == karras_timesteps(schedule, steps)


@pytest.mark.parametrize(("name", "T"), [("linear", 1000), ("cosine", 1000), ("linear", 250)])
def test_above_sigma_max_80_each_step_after_the_first_is_the_timestep_nearest_edms_sigma(name: str, T: int) -> None:
    """Eq. 5 from σ_max = 80 (the schedule reaches 157-2·10⁴): each timestep but the first (T−1, pure
    noise) has the σ/α nearest in log to its σ_i, closer than either neighbouring timestep's."""
    schedule = NoiseSchedule.create(name, T)
    log_levels = np.log(schedule.noise_levels)
    ts = karras_timesteps(schedule, 12)
    high, low = EDM_SIGMA_MAX ** (1 / 7), schedule.noise_levels[0] ** (1 / 7)
    for i, t in enumerate(ts[1:], start=1):
        target = 7 * np.log(high + i / 11 * (low - high))
        gap = abs(log_levels[t] - target)
        assert all(gap <= abs(log_levels[n] - target) for n in (t - 1, t + 1) if 0 <= n < T), (i, t)


def test_karras_spacing_starts_from_pure_noise_ends_at_the_cleanest_step_and_never_repeats() -> None:
    schedules = [
        NoiseSchedule.create("linear", 1000), NoiseSchedule.create("cosine", 1000),
        NoiseSchedule.create("linear", 100, zero_terminal_snr=True), NoiseSchedule.create("linear", 250),
    ]  # fmt: skip
    for schedule in schedules:
        T = schedule.T
        for steps in range(1, T + 1, 7):
            ts = karras_timesteps(schedule, steps)
            assert ts[0] == T - 1 and all(a > b for a, b in itertools.pairwise(ts)), (T, steps)
            assert len(ts) <= steps and (steps == 1 or ts[-1] == 0)
        assert len(karras_timesteps(schedule, 20)) == 20  # a few steps: none rounds onto another
    schedule = NoiseSchedule.create("linear", 1000)  # ρ = 7 crowds the steps where σ/α < 1, trailing does not
    below_one = lambda ts: sum(schedule.noise_levels[t] < 1.0 for t in ts)  # noqa: E731
    assert below_one(karras_timesteps(schedule, 10)) == 4 > below_one(trailing_timesteps(1000, 10)) == 2
    with pytest.raises(ValueError, match="unknown spacing 'edm'; expected one of trailing, karras"):
        sampling_timesteps(schedule, 10, "edm")


@pytest.mark.parametrize(("name", "T", "steps"), [("linear", 1000, 10), ("cosine", 250, 20), ("linear", 1000, 25)])
def test_dpm_solver_pp_on_karras_timesteps_matches_diffusers_step_for_step(name: str, T: int, steps: int) -> None:
    from diffusers import DPMSolverMultistepScheduler

    schedule = NoiseSchedule.create(name, T)
    x0_of = smooth_denoiser(T)
    x_T = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    denoise = lambda x, t: (x0_of(x, t), torch.zeros_like(x))  # noqa: E731
    ours = sample_dpmpp_2m(denoise, schedule, x_T.clone(), steps=steps, spacing="karras")
    theirs: Any = DPMSolverMultistepScheduler(
        num_train_timesteps=T, trained_betas=schedule.betas, algorithm_type="dpmsolver++", solver_order=2,
        final_sigmas_type="zero", prediction_type="sample", lower_order_final=True,
    )  # fmt: skip
    theirs.set_timesteps(timesteps=karras_timesteps(schedule, steps))  # each step at its timestep's own σ
    x = x_T.clone()
    for t in theirs.timesteps:
        x = theirs.step(x0_of(x, torch.full((3,), int(t))), t, x).prev_sample
    np.testing.assert_allclose(ours.numpy(), x.numpy(), atol=1e-5)
    trailing = sample_dpmpp_2m(denoise, schedule, x_T.clone(), steps=steps)
    assert not torch.allclose(ours, trailing)  # the spacing reaches the solver


@pytest.mark.parametrize("sampler", ["ddim", "dpmpp_2m", "heun"])
def test_each_sampler_visits_the_karras_timesteps_the_sweep_counts(sampler: Any) -> None:
    schedule = NoiseSchedule.create("linear", 1000)
    denoise, seen = recording_denoiser(schedule)
    x_T = torch.randn(2, 1, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = sampler_named(sampler)(denoise, schedule, x_T, steps=8, spacing="karras")
    assert torch.isfinite(out).all()
    assert seen == evaluation_timesteps(sampler, schedule, 8, "karras")
    assert set(seen) == set(karras_timesteps(schedule, 8))
    combo = SamplingConfig(2.0, 8, sampler=sampler, spacing="karras")
    assert network_evaluations(combo, schedule, conditional=True) == 2 * len(seen) <= combo.evaluations()


def test_the_spacing_is_a_swept_setting_stored_only_when_set_and_a_typo_is_one_line() -> None:
    combo = SamplingConfig(2.0, 10, sampler="heun", spacing="karras")
    assert combo.as_dict()["spacing"] == "karras" and SamplingConfig.from_dict(combo.as_dict()) == combo
    assert "spacing" not in SamplingConfig(2.0, 10).as_dict()  # combinations stored before read the same
    assert "10 Heun (EDM) steps on the Karras σ spacing (ρ = 7)" in combo.words and combo.label.endswith(" heun karras")
    sweep = build_sweep(yaml.safe_load("{guidance_scale: 2, steps: 10, spacing: [trailing, karras]}"))
    assert [c.spacing for c in sweep.combinations()] == ["trailing", "karras"]
    assert "spacing" not in SamplingSweep().to_dict()  # specs without it keep their fingerprint
    with pytest.raises(ConfigError) as err:
        build_sweep({"spacing": "edm"})
    assert str(err.value) == "sampling.spacing[0]: unknown value 'edm'; expected one of trailing, karras"


def test_hpo_train_refuses_an_unknown_spacing_in_one_line_before_training(tmp_path: Path) -> None:
    from tests.cli import run_cli
    from tests.service_helpers import write_spec

    spec, out = write_spec(tmp_path), tmp_path / "run"
    code, _, err = run_cli(["train", str(spec), "--set", "sampling.spacing=edm", "-o", str(out)])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "unknown value 'edm'; expected one of trailing, karras" in err
    assert not (out / "summary.json").exists()


def test_the_spec_names_the_spacings_the_diffusion_package_has() -> None:
    from hpo.diffusion.sampler import SPACINGS
    from hpo.spec.samplers import SPACING_NAMES

    assert SPACINGS == SPACING_NAMES
