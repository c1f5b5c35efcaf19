"""The sampling sweep: one trained model scored at every combination with the same noise, the
trial's value is the best full-count combination, and a retry rescores nothing already stored."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import torch
from optuna.trial import TrialState

from hpo.analysis.frontier import screen_finalists, screen_frontier
from hpo.analysis.sweep import statistic_text, value_statistic
from hpo.diffusion import sampler as sampler_module
from hpo.records import ComboScore, ValueStatistic
from hpo.scoring import pipeline
from hpo.scoring import score as score_module
from hpo.scoring import sweep as sweep_module
from hpo.scoring.distance import Reference, frechet
from hpo.scoring.score import Scorer, make_scorer
from hpo.scoring.sweep import half_fids, paired_sd, run_sweep
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume
from hpo.service.worker import Worker, WorkerOptions, WorkerStopping
from hpo.spec.config import ScoreConfig
from hpo.spec.loading import load_spec
from hpo.spec.sampling import SamplingConfig, SamplingSweep
from hpo.training.data import ImageData
from hpo.training.model import DiffusionModel
from hpo.training.trainer import train
from tests.conftest import tiny_config
from tests.service_helpers import write_spec

COMBOS = [SamplingConfig(w, n) for w in (1.0, 2.0) for n in (3, 6)]
Trained = tuple[DiffusionModel, Scorer]


@pytest.fixture(scope="module")
def trained(digits8: ImageData, cache_dir: Path) -> Trained:
    result = train(tiny_config(kimg=1.6, batch_size=32, num_evals=1, timesteps=50), digits8)
    scorer = make_scorer(
        ScoreConfig(features="classifier", num_samples=48, batch_size=16), digits8, device=torch.device("cpu"),
        cache_dir=cache_dir / "scoring",
    )  # fmt: skip
    return result.model, scorer


def test_every_combination_starts_from_the_same_noise_and_labels(
    trained: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, scorer = trained
    seen: dict[tuple[float, int], list[torch.Tensor]] = {}
    real = sampler_module.sample_ddim

    def recording(denoise, schedule, x, *, steps, eta, generator, spacing):  # type: ignore[no-untyped-def]
        key = (round(float(x.sum()), 4), steps)
        seen.setdefault(key, []).append(x.clone())
        return real(denoise, schedule, x, steps=steps, eta=eta, generator=generator, spacing=spacing)

    monkeypatch.setitem(sampler_module.SAMPLERS, "ddim", recording)
    result = run_sweep(scorer, model, COMBOS, class_frequencies=torch.full((10,), 0.1))
    starts = {(round(float(x.sum()), 4)) for xs in seen.values() for x in xs}
    assert len(starts) == 3  # the same 3 batches of initial noise (48 samples / batch 16) for all 4 combinations
    assert {s.sampling for s in result.scores} == set(COMBOS) and all(s.num_samples == 48 for s in result.scores)
    assert result.best.score == min(s.score for s in result.full)


def test_screening_scores_all_then_completes_the_best_reusing_their_samples(
    trained: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, scorer = trained
    drawn: list[int] = []
    real = score_module.sample_features

    def counting(*args, start: int, n: int, **kwargs):  # type: ignore[no-untyped-def]
        drawn.append(n)
        return real(*args, start=start, n=n, **kwargs)

    monkeypatch.setattr(sweep_module, "sample_features", counting)
    result = run_sweep(scorer, model, COMBOS, screen_samples=16, rescore_top=1)
    screened = [s for s in result.scores if s.stage == "screen"]
    screened_best = min(screened, key=lambda s: s.rank_value)
    # the finalist, the screen's best at each guidance scale and at each cheaper cost (its frontier)
    finalists = set(screen_finalists(screened, 1, conditional=True))
    assert screened_best.sampling in finalists and set(screen_frontier(screened, conditional=True)) <= finalists
    assert {c.guidance_scale for c in finalists} == {1.0, 2.0}
    assert len(screened) == 4 and {s.sampling for s in result.full} == finalists
    assert drawn == [16] * 4 + [32] * len(finalists)  # a finalist's 16 screening samples are the first 16 of its 48
    assert result.best.score == min(s.score for s in result.full) and result.best.num_samples == 48
    stat = value_statistic(result, scorer.config.metric_name, scorer.reference.space.dim)
    picked = (
        "the one sampling combination a screen of all 4 on 16 samples by FID in 4 principal components ranked first"
        if len(finalists) == 1
        else f"the best of the {len(finalists)} sampling combinations completed after a screen of all 4 on 16 "
        "samples by FID in 4 principal components"
    )
    assert statistic_text(stat) == (
        "classifier-FID of 48 samples in 133 feature dimensions (plug-in, not bias-corrected: compared at equal "
        f"counts only); {picked}"
    )


def test_the_noise_of_a_difference_on_shared_samples_is_smaller_than_of_two_independent_values() -> None:
    """Combinations that share each sample's noise (``a`` nudged) differ by far less noise than
    independent draws of the same distribution: the halves of their own samples say so."""
    rng = np.random.default_rng(0)
    reference = Reference.of(rng.normal(0.0, 1.0, (4000, 8)))
    a = rng.normal(0.3, 1.0, (512, 8))
    nudged = [a + rng.normal(0.05 * k, 0.05, a.shape) for k in range(4)]
    drawn = [rng.normal(0.3 + 0.05 * k, 1.0, a.shape) for k in range(4)]
    shared = paired_sd([half_fids(reference, f) for f in nudged])
    independent = paired_sd([half_fids(reference, f) for f in drawn])
    assert shared is not None and independent is not None
    assert shared < independent / 3
    assert paired_sd([half_fids(reference, f) for f in nudged[:3]]) is None  # too few to estimate it from


def test_the_paired_sd_estimates_the_spread_of_a_difference_over_fresh_samples() -> None:
    """Over 200 fresh draws of 4 combinations sharing their samples' noise, the estimate from each
    draw's own halves agrees with the spread of the combinations' differences across the draws
    (pooled over the pairs, as the estimate is: 0.97 of it here)."""
    rng = np.random.default_rng(1)
    reference = Reference.of(rng.normal(0.0, 1.0, (4000, 8)))
    estimates, values = [], []
    for _ in range(200):
        base = rng.normal(0.3, 1.0, (512, 8))
        combos = [base + 0.1 * k + rng.normal(0.0, 0.5, base.shape) for k in range(4)]
        sd = paired_sd([half_fids(reference, f) for f in combos])
        assert sd is not None
        estimates.append(sd)
        values.append([frechet(c, reference).value for c in combos])
    v = np.array(values)
    spread = math.sqrt(np.mean([np.var(v[:, i] - v[:, j], ddof=1) for i in range(4) for j in range(i + 1, 4)]))
    assert 0.8 < math.sqrt(np.mean(np.square(estimates))) / spread < 1.25


def test_a_sweep_stores_the_noise_of_a_difference_beside_the_trials_value(trained: Trained) -> None:
    model, scorer = trained
    result = run_sweep(scorer, model, COMBOS)
    stat = value_statistic(result, scorer.config.metric_name, scorer.reference.space.dim)
    assert result.paired_sd is not None and result.paired_sd > 0
    assert stat.paired_sd == result.paired_sd
    assert ValueStatistic.from_dict(stat.as_dict()) == stat


def test_known_scores_are_not_recomputed(trained: Trained, monkeypatch: pytest.MonkeyPatch) -> None:
    model, scorer = trained
    first = run_sweep(scorer, model, COMBOS)
    calls: list[int] = []
    real = score_module.sample_features

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep_module, "sample_features", counting)
    again = run_sweep(scorer, model, COMBOS, known=first.scores[:3])
    assert len(calls) == 1
    assert [s.score for s in again.scores] == pytest.approx([s.score for s in first.scores], rel=1e-6)
    stored = first.scores[0]
    assert ComboScore.from_dict(stored.to_dict()) == replace(stored, seconds=round(stored.seconds, 3))


def test_a_combinations_score_is_stored_under_the_fid_key_that_stored_studies_use() -> None:
    old = {"guidance_scale": 2.0, "steps": 8, "eta": 0.0, "stage": "full", "num_samples": 64, "fid": 12.5,
           "kid": 0.01, "class_accuracy": None, "seconds": 1.0}  # fmt: skip
    combo = ComboScore.from_dict(old)
    assert combo.score == 12.5
    assert combo.to_dict()["fid"] == 12.5 and "score" not in combo.to_dict()


@pytest.mark.parametrize("swept", ["guidance", "ema"])
def test_a_retried_trial_rescores_only_the_combinations_not_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swept: str
) -> None:
    """The first attempt is stopped (as by SIGTERM) after two combinations; its retry resumes from the
    final checkpoint (and, with the EMA length swept, the snapshots), keeps the two stored scores and
    scores the other two."""
    second_axis = {"guidance_scale": [1.0, 2.0]} if swept == "guidance" else {"ema_sigma_rel": [0.05, 0.15]}
    spec = load_spec(
        write_spec(
            tmp_path,
            study={"name": "sweep", "n_trials": 1},
            search={"lr": {"type": "float", "low": 1e-3, "high": 2e-3}},
            sampling={**second_axis, "steps": [3, 6]},
            score={"features": "classifier", "num_samples": 32, "batch_size": 32, "grid_size": 4},
            baselines=[{"lr": 1.5e-3}],
        )
    )
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    study, _ = create_or_resume(spec, open_storage(url))
    scored: list[SamplingConfig] = []
    real = pipeline.run_sweep

    def stop_after_two(*args, on_score, **kwargs):  # type: ignore[no-untyped-def]
        def record(entry: ComboScore) -> None:
            scored.append(entry.sampling)
            on_score(entry)
            if len(scored) == 2:
                raise WorkerStopping

        return real(*args, on_score=record, **kwargs)

    monkeypatch.setattr(pipeline, "run_sweep", stop_after_two)
    opts = WorkerOptions(url=url, study="sweep", exit_when_idle=True, artifact_dir=tmp_path / "art", poll_seconds=0.1)
    Worker(opts).serve()
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert trials[0].user_attrs["fail_reason"] == "worker_stopped"
    assert len(scored) == 4 and len(set(scored)) == 4  # two before the stop, the other two after
    sweep = [ComboScore.from_dict(d) for d in trials[1].user_attrs["sweep"]]
    assert len(sweep) == 4 and trials[1].value == min(s.score for s in sweep)
    assert trials[1].user_attrs["sampling"] == min(sweep, key=lambda s: s.score).sampling.as_dict()
    assert not (tmp_path / "art" / "checkpoints" / "sweep" / "trial-0.pt").exists()  # deleted once complete
    snapshots = tmp_path / "art" / "checkpoints" / "sweep" / "trial-0-ema"
    if swept == "ema":  # the baseline's score was repeated, so it keeps its snapshots: any EMA length later
        summary = trials[1].user_attrs["ema_snapshots"]
        assert summary["kept"] and summary["folder"] == str(snapshots)
        assert {s.ema_sigma_rel for s in scored} == {0.05, 0.15}
        assert summary["profiles"] == [0.05, 0.1] and summary["residual"]["0.05"] == 0.0
        assert summary["residual"]["0.15"] < 0.05 and len(list(snapshots.glob("ema-*.pt"))) == summary["count"]
    else:
        assert not snapshots.exists() and "ema_snapshots" not in trials[1].user_attrs
    stored = optuna.load_study(study_name="sweep", storage=url)
    assert stored.best_value == trials[1].value
    assert stored.user_attrs["fid_noise"]["pairs"] == 1  # the baseline was re-scored with a second sample set
    assert trials[1].user_attrs["fid_noise"] == pytest.approx(
        abs(trials[1].user_attrs["fid_repeat"] - trials[1].value) / 2**0.5
    )


def test_a_sweeps_cost_counts_every_screened_combination_and_the_costliest_finalists() -> None:
    """Network evaluations per image: steps, twice under guidance (w ≠ 1) of a conditional network;
    every combination on the screen, the rescore_top most expensive, the dearest at each guidance scale
    and the screen's frontier completed, never more than every combination."""
    assert SamplingConfig(2.0, 30).evaluations() == 60 and SamplingConfig(1.0, 30).evaluations() == 30
    sweep = SamplingSweep(guidance_scale=(1.0, 3.0), steps=(10, 20, 30), eta=(0.0, 0.5, 1.0), screen_samples=64,
                          rescore_top=1)  # fmt: skip
    every = 3 * (10 + 20 + 30) + 3 * (20 + 40 + 60)  # 18 combinations
    below = 10 + 20 + 30 + 40  # the screen's frontier: at most one completed at each cost below the dearest (60)
    scales = 30 + 60  # the best at each guidance scale, at most its dearest
    assert sweep.evaluations(256) == 64 * every + 192 * (60 + scales + below)
    assert replace(sweep, rescore_top=3).evaluations(256) == 64 * every + 192 * (3 * 60 + scales + below)
    assert replace(sweep, screen_samples=0).evaluations(256) == 256 * every
    assert sweep.evaluations(256, conditional=False) == 64 * 360 + 192 * (30 + 30 + 10 + 20)  # one "scale"
    # the quickstart's former DDIM grid: the finalists may be all 9, so a screen saves nothing at worst
    small = SamplingSweep(guidance_scale=(1.0, 2.0, 3.0), steps=(10, 20, 30), screen_samples=64)
    assert small.evaluations(256) == replace(small, screen_samples=0).evaluations(256) == 256 * 300
    assert small.screen_saving(256) == 0.0 and replace(small, screen_samples=0).screen_saving(256) == 0.0


def test_a_sweep_over_samplers_scores_dpm_solver_on_the_same_weights_and_noise(
    trained: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, scorer = trained
    starts: dict[str, set[float]] = {}
    for name in ("ddim", "dpmpp_2m"):
        real = sampler_module.SAMPLERS[name]

        def recording(denoise, schedule, x, *, steps, eta, generator, spacing, _name=name, _real=real):  # type: ignore[no-untyped-def]
            starts.setdefault(_name, set()).add(round(float(x.sum()), 4))
            return _real(denoise, schedule, x, steps=steps, eta=eta, generator=generator, spacing=spacing)

        monkeypatch.setitem(sampler_module.SAMPLERS, name, recording)
    combos = [SamplingConfig(2.0, 4), SamplingConfig(2.0, 4, sampler="dpmpp_2m")]
    result = run_sweep(scorer, model, combos, class_frequencies=torch.full((10,), 0.1))
    assert starts["ddim"] == starts["dpmpp_2m"] and len(starts["ddim"]) == 3  # the same noise, batch by batch
    by = {s.sampling.sampler: s.score for s in result.scores}
    assert set(by) == {"ddim", "dpmpp_2m"} and by["ddim"] != by["dpmpp_2m"]  # two solvers, two sample sets


def test_a_sweep_over_spacings_walks_each_grid_on_the_same_weights_and_counts_its_evaluations(
    trained: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, scorer = trained
    walked: dict[str, list[int]] = {}
    real = sampler_module.SAMPLERS["heun"]

    def recording(denoise, schedule, x, *, steps, eta, generator, spacing):  # type: ignore[no-untyped-def]
        def seen(x_t, t):  # type: ignore[no-untyped-def]
            walked.setdefault(spacing, []).append(int(t[0]))
            return denoise(x_t, t)

        walked.pop(spacing, None)  # one batch's walk
        return real(seen, schedule, x, steps=steps, eta=eta, generator=generator, spacing=spacing)

    monkeypatch.setitem(sampler_module.SAMPLERS, "heun", recording)
    combos = [SamplingConfig(2.0, 4, sampler="heun"), SamplingConfig(2.0, 4, sampler="heun", spacing="karras")]
    result = run_sweep(scorer, model, combos, class_frequencies=torch.full((10,), 0.1))
    schedule = model.schedule
    for spacing in ("trailing", "karras"):
        assert walked[spacing] == sampler_module.evaluation_timesteps("heun", schedule, 4, spacing)
    assert walked["trailing"] != walked["karras"]
    by = {s.sampling.spacing: s for s in result.scores}
    assert by["karras"].score != by["trailing"].score  # two grids, two sample sets
    assert by["karras"].nfe == 2 * len(walked["karras"])  # stored: the evaluations it made, guided


def test_the_spec_names_the_samplers_the_diffusion_package_has() -> None:
    from hpo.spec.samplers import SAMPLER_NAMES

    assert tuple(sampler_module.SAMPLERS) == SAMPLER_NAMES


def test_a_sampler_axis_multiplies_the_combinations_and_old_combinations_read_as_ddim() -> None:
    from hpo.spec.sampling import build_sweep

    sweep = build_sweep({"guidance_scale": [1, 2], "steps": 10, "sampler": ["ddim", "dpmpp_2m"]})
    combos = sweep.combinations()
    assert len(combos) == 4 and {c.sampler for c in combos} == {"ddim", "dpmpp_2m"}
    dpm = SamplingConfig(2.0, 10, sampler="dpmpp_2m")
    assert dpm.as_dict()["sampler"] == "dpmpp_2m" and SamplingConfig.from_dict(dpm.as_dict()) == dpm
    assert SamplingConfig.from_dict({"guidance_scale": 2, "steps": 10, "eta": 0}).sampler == "ddim"
    assert "sampler" not in SamplingConfig(2.0, 10).as_dict() and "sampler" not in SamplingSweep().to_dict()
    assert "DPM-Solver++(2M)" in dpm.words and dpm.evaluations() == 20  # one evaluation per step, two guided
    heun = SamplingConfig(2.0, 10, sampler="heun")
    assert "Heun (EDM)" in heun.words and heun.evaluations() == 38 and heun.evaluations(conditional=False) == 19
    assert SamplingConfig.from_dict(heun.as_dict()) == heun


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"sampler": "euler"}, "sampling.sampler[0]: unknown value 'euler'"),
        ({"sampler": ["dpmpp_2m"], "eta": [0.5]}, "dpmpp_2m is deterministic: eta must be 0"),
        ({"sampler": ["heun", "ddim"], "eta": [0.0, 1.0]}, "heun is deterministic: eta must be 0"),
    ],
)
def test_a_wrong_sampler_is_one_line_naming_the_fix(raw: dict[str, Any], message: str) -> None:
    from hpo.errors import ConfigError
    from hpo.spec.sampling import build_sweep

    with pytest.raises(ConfigError) as err:
        build_sweep(raw)
    assert message in str(err.value) and "\n" not in str(err.value)
