"""Guidance in a limited interval of noise levels (Kynkäänniemi et al. 2024): guided where σ/α lies in
(guidance_sigma_min, guidance_sigma_max], the conditional model alone elsewhere; each combination's
network evaluations are counted on the schedule and stored with its score, and the frontier reads them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from hpo.analysis.frontier import trial_frontier
from hpo.analysis.sweep import SweepResult, sweep_table
from hpo.diffusion.sampler import evaluation_timesteps, make_denoiser, sampler_named
from hpo.diffusion.schedule import NoiseSchedule
from hpo.errors import ConfigError
from hpo.records import ComboScore
from hpo.scoring.sweep import run_sweep
from hpo.spec.sampling import SamplingConfig, SamplingSweep, build_sweep
from hpo.training.generate import network_evaluations
from tests.diffusion.test_sampler import random_unet
from tests.scoring.test_sweep import Trained, trained  # noqa: F401 (the module's trained model and scorer)

T = 100


class Counting(torch.nn.Module):
    """A network that records the batch size of every call (2B: a guided pass, B: the conditional alone)."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net
        self.batches: list[int] = []

    def forward(self, x: torch.Tensor, t: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        self.batches.append(x.shape[0])
        out: torch.Tensor = self.net(x, t, labels)
        return out


def run(sampling: SamplingConfig, net: Counting, schedule: NoiseSchedule) -> torch.Tensor:
    labels = torch.tensor([0, 1])
    denoise = make_denoiser(
        net, schedule, prediction="eps", labels=labels, guidance_scale=sampling.guidance_scale,
        guidance_interval=sampling.guidance_interval, null_class=3,
    )  # fmt: skip
    x = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    return sampler_named(sampling.sampler)(denoise, schedule, x, steps=sampling.steps)


@pytest.mark.parametrize("sampler", ["ddim", "dpmpp_2m", "heun"])
def test_guidance_runs_two_passes_inside_its_interval_one_outside_and_the_count_says_so(sampler: Any) -> None:
    schedule = NoiseSchedule.create("linear", T)
    levels = schedule.noise_levels
    timesteps = evaluation_timesteps(sampler, schedule, 8)
    low, high = float(levels[timesteps[5]]), float(levels[timesteps[1]])  # the middle of the trajectory
    sampling = SamplingConfig(3.0, 8, sampler=sampler, guidance_sigma_min=low, guidance_sigma_max=high)
    net = Counting(random_unet(num_classes=3))
    run(sampling, net, schedule)
    guided = [low < levels[t] <= high for t in timesteps]
    assert net.batches == [4 if g else 2 for g in guided] and 0 < sum(guided) < len(guided)
    assert network_evaluations(sampling, schedule, conditional=True) == sum(b // 2 for b in net.batches)
    assert network_evaluations(sampling, schedule, conditional=True) < sampling.evaluations()  # the bound
    assert network_evaluations(sampling, schedule, conditional=False) == len(timesteps)


def test_an_interval_holding_every_level_is_plain_guidance_and_one_holding_none_is_the_conditional_model() -> None:
    schedule = NoiseSchedule.create("cosine", T)
    top = float(schedule.noise_levels.max())
    net = Counting(random_unet(num_classes=3))
    plain = run(SamplingConfig(3.0, 6), net, schedule)
    torch.testing.assert_close(run(SamplingConfig(3.0, 6, guidance_sigma_max=top), net, schedule), plain)
    above = SamplingConfig(3.0, 6, guidance_sigma_min=top, guidance_sigma_max=top + 1)
    torch.testing.assert_close(run(above, net, schedule), run(SamplingConfig(1.0, 6), net, schedule))
    assert network_evaluations(above, schedule, conditional=True) == 6


def test_samples_at_different_noise_levels_in_one_batch_are_each_guided_or_not() -> None:
    schedule = NoiseSchedule.create("linear", T)
    net, labels = random_unet(num_classes=3), torch.tensor([0, 1])
    x, t = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([90, 10])
    interval = (float(schedule.noise_levels[50]), math.inf)  # t = 90 inside, t = 10 outside
    both = make_denoiser(net, schedule, prediction="eps", labels=labels, guidance_scale=3.0,
                         guidance_interval=interval, null_class=3)(x, t)  # fmt: skip
    guided = make_denoiser(net, schedule, prediction="eps", labels=labels, guidance_scale=3.0, null_class=3)(x, t)
    alone = make_denoiser(net, schedule, prediction="eps", labels=labels, null_class=3)(x, t)
    for mixed, g, a in zip(both, guided, alone, strict=True):
        torch.testing.assert_close(mixed[0], g[0])
        torch.testing.assert_close(mixed[1], a[1])


def test_the_interval_is_stored_only_when_set_and_read_back() -> None:
    combo = SamplingConfig(2.0, 10, guidance_sigma_min=0.28, guidance_sigma_max=5.42)
    assert combo.as_dict() == {
        "guidance_scale": 2.0, "steps": 10, "eta": 0.0, "guidance_sigma_min": 0.28, "guidance_sigma_max": 5.42,
    }  # fmt: skip
    assert SamplingConfig.from_dict(combo.as_dict()) == combo
    assert "guidance_sigma_min" not in SamplingConfig(2.0, 10).as_dict()  # combinations stored before read the same
    assert "σ∈(0.28, 5.42]" in combo.label and "guidance 2 for σ in (0.28, 5.42]" in combo.words
    open_top = SamplingConfig(2.0, 10, guidance_sigma_min=0.5)
    assert open_top.as_dict()["guidance_sigma_min"] == 0.5 and "guidance_sigma_max" not in open_top.as_dict()
    assert "(0.5, ∞)" in open_top.words
    sweep = build_sweep(yaml.safe_load("{guidance_scale: 2, steps: 10, guidance_sigma_max: [null, 5.42]}"))
    assert {c.guidance_interval[1] for c in sweep.combinations()} == {math.inf, 5.42}
    assert "guidance_sigma_max" not in SamplingSweep().to_dict()  # specs without it keep their fingerprint


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"guidance_sigma_min": -1}, "sampling.guidance_sigma_min[0]: must be a noise level σ/α >= 0, got -1"),
        ({"guidance_sigma_max": 0}, "sampling.guidance_sigma_max[0]: 0 is not above guidance_sigma_min 0"),
        (
            {"guidance_sigma_min": [0.2, 3.0], "guidance_sigma_max": [2.0, 5.0]},
            "sampling.guidance_sigma_max: 2 is not above guidance_sigma_min 3: every pair must leave a non-empty",
        ),
    ],
)
def test_an_empty_or_negative_interval_is_one_line_naming_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_sweep({"guidance_scale": 2, **raw})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_sweep_stores_each_combinations_counted_evaluations(trained: Trained) -> None:  # noqa: F811
    model, scorer = trained
    middle = float(model.schedule.noise_levels[model.schedule.T // 2])
    combos = [SamplingConfig(2.0, 4), SamplingConfig(2.0, 4, guidance_sigma_max=middle)]
    result = run_sweep(scorer, model, combos, class_frequencies=torch.full((10,), 0.1))
    nfe = {s.sampling: s.nfe for s in result.scores}
    assert nfe[combos[0]] == 8 and nfe[combos[1]] == network_evaluations(combos[1], model.schedule, conditional=True)
    assert 4 < (nfe[combos[1]] or 0) < 8  # the noisy steps ran the conditional model alone
    assert [ComboScore.from_dict(s.to_dict()).nfe for s in result.scores] == [s.nfe for s in result.scores]


def test_the_frontier_costs_a_combination_by_its_stored_count_not_its_bound() -> None:
    everywhere, interval = SamplingConfig(2.0, 10), SamplingConfig(2.0, 10, guidance_sigma_max=3.0)
    scores = [
        ComboScore(SamplingConfig(1.0, 10), "full", 256, 9.0, 0.0, None, 1.0, nfe=10),
        ComboScore(interval, "full", 256, 5.0, 0.0, None, 1.0, nfe=13),  # 3 of its 10 steps guided
        ComboScore(everywhere, "full", 256, 4.0, 0.0, None, 1.0, nfe=20),
    ]
    frontier = trial_frontier(0, scores, conditional=True)
    assert frontier is not None and [(p.nfe, p.value) for p in frontier.points] == [(10, 9.0), (13, 5.0), (20, 4.0)]
    assert frontier.within(15) == frontier.points[1]  # its bound, 20, would have put it beyond a budget of 15
    stored = SweepResult([ComboScore.from_dict(s.to_dict()) for s in scores])
    table = sweep_table(stored, "FID")
    assert "guided σ" in table and "(0, 3]" in table and " all " in table


def test_where_guidance_does_nothing_the_interval_is_dropped_and_the_combination_counted_once() -> None:
    sweep = build_sweep(yaml.safe_load("{guidance_scale: [1, 2], steps: 10, guidance_sigma_max: [null, 5.4]}"))
    combos = sweep.combinations()
    assert len(combos) == 3 and SamplingConfig(1.0, 10) in combos  # w = 1 once, with the default interval
    assert sweep.combinations(conditional=False) == [SamplingConfig(1.0, 10), SamplingConfig(2.0, 10)]
    assert sweep.evaluations(64, conditional=False) == 64 * 20


def test_hpo_train_refuses_a_mistyped_sampling_setting_in_one_line(tmp_path: Path) -> None:
    from hpo.run.train import split_overrides
    from tests.cli import run_cli
    from tests.service_helpers import write_spec

    spec, out = write_spec(tmp_path), tmp_path / "run"
    code, _, err = run_cli(["train", str(spec), "--set", "sampling.guidance_sigma_max=abc", "-o", str(out)])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "--set guidance_sigma_max: expected a number or null, got 'abc'" in err
    assert not (out / "summary.json").exists()  # refused before any training
    with pytest.raises(ConfigError, match="--set guidance_sigma_max: expected a number or null, got 'abc'"):
        split_overrides(["sampling.guidance_sigma_max=abc"])
    with pytest.raises(ConfigError, match="expected a number or null, got inf"):
        split_overrides(["guidance_sigma_max=.inf"])
    assert split_overrides(["guidance_sigma_max=3", "kimg=2"]) == (["kimg=2"], {"guidance_sigma_max": 3.0})


def test_a_score_stored_before_the_count_was_kept_costs_what_its_combination_implies(tmp_path: Path) -> None:
    d = {"guidance_scale": 2.0, "steps": 10, "eta": 0.0, "stage": "full", "num_samples": 8, "fid": 3.0,
         "kid": 0.1, "class_accuracy": None}  # fmt: skip
    old = ComboScore.from_dict(d)
    assert old.nfe is None and old.evaluations(conditional=True) == 20 and old.evaluations(conditional=False) == 10


def test_the_reports_answer_names_the_winning_cells_sampler_and_interval() -> None:
    from hpo.report.data import cell_words

    assert cell_words(SamplingConfig(2.0, 30)) == "guidance 2 at 30 DDIM steps"  # the quickstart's words, unchanged
    heun = SamplingConfig(2.0, 5, sampler="heun", guidance_sigma_max=3.0)
    assert cell_words(heun) == "guidance 2 for σ in (0, 3] at 5 Heun (EDM) steps"


def test_the_combination_watched_while_training_takes_the_first_sampler_and_interval_listed() -> None:
    raw = "{guidance_scale: [1, 2, 3], steps: [10, 20], sampler: [heun, ddim], guidance_sigma_max: 4}"
    sweep = build_sweep(yaml.safe_load(raw))
    assert sweep.preview() == SamplingConfig(2.0, 10, sampler="heun", guidance_sigma_max=4.0)
    assert sweep.preview({"sampler": "ddim"}).sampler == "ddim"  # a trial's searched value wins
