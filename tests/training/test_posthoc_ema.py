"""Post-hoc EMA: power-function EMAs tracked while training, snapshots at fixed points, and any EMA
length rebuilt from them after training (Karras et al. 2024)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from hpo.analysis.frontier import screen_finalists
from hpo.analysis.sweep import SweepResult, ema_sentence, sweep_table
from hpo.records import ComboScore
from hpo.spec.sampling import SamplingConfig
from hpo.training.checkpoint import load_checkpoint
from hpo.training.data import ImageData
from hpo.training.posthoc_ema import (
    PosthocEma,
    gamma_to_sigma_rel,
    list_snapshots,
    power_beta,
    profile,
    sigma_rel_to_gamma,
    solve,
)
from hpo.training.trainer import EvalPoint, train
from tests.cli import run_cli
from tests.conftest import tiny_config
from tests.service_helpers import write_spec


def flat(state: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([v.float().flatten() for v in state.values() if v.is_floating_point()])


def test_sigma_rel_maps_to_edm2s_exponents_and_back() -> None:
    assert sigma_rel_to_gamma(0.05) == pytest.approx(16.97, abs=0.01)  # the paper's two tracked profiles
    assert sigma_rel_to_gamma(0.10) == pytest.approx(6.94, abs=0.01)
    for sigma in (0.02, 0.075, 0.15, 0.25):
        assert gamma_to_sigma_rel(sigma_rel_to_gamma(sigma)) == pytest.approx(sigma, rel=1e-9)
    with pytest.raises(Exception, match="σ_rel must be in"):
        sigma_rel_to_gamma(0.4)


def test_the_discrete_update_applies_exactly_the_stated_profile() -> None:
    """β_t = (1 − 1/t)^(γ+1) run over a sequence puts weight profile(t, γ) on each step."""
    gamma, steps = sigma_rel_to_gamma(0.1), 300
    values = torch.randn(steps, dtype=torch.float64)
    ema = torch.zeros((), dtype=torch.float64)
    for t in range(1, steps + 1):
        ema = torch.lerp(ema, values[t - 1], 1.0 - power_beta(t, gamma))
    weights = profile(steps, gamma, steps)
    assert float(weights.sum()) == pytest.approx(1.0, abs=1e-12)
    assert float(ema) == pytest.approx(float(weights @ values), abs=1e-12)


def test_a_tracked_length_is_recovered_exactly_and_others_nearly() -> None:
    snapshots = [(round(4000 * k / 16), sigma_rel_to_gamma(s)) for k in range(1, 17) for s in (0.05, 0.10)]
    tracked = solve(snapshots, 4000, sigma_rel_to_gamma(0.10))
    assert tracked.residual < 1e-9 and tracked.coefficients[-1] == pytest.approx(1.0)
    for sigma in (0.03, 0.075, 0.15, 0.2):  # 16 snapshots of EDM2's two profiles
        assert solve(snapshots, 4000, sigma_rel_to_gamma(sigma)).residual < 0.04, sigma


def test_an_untracked_ema_length_is_rebuilt_from_the_snapshots_like_a_tracked_one(
    digits8: ImageData, tmp_path: Path
) -> None:
    """A run tracks σ_rel 0.05, 0.10 and (as the truth) 0.15; with 0.15's snapshots removed, the
    length is rebuilt from the other two profiles' fp16 snapshots and matches the tracked average."""
    cfg = tiny_config(kimg=4, batch_size=32, num_evals=2, lr=1e-3, ema_profiles=(0.05, 0.10, 0.15))
    result = train(cfg, digits8, checkpoint=tmp_path / "ckpt.pt", snapshot_dir=tmp_path / "ema")
    truth = flat(load_checkpoint(tmp_path / "ckpt.pt")["power_emas"][2])  # full precision, at the last step
    for path in (tmp_path / "ema").glob("ema-0.15-*.pt"):
        path.unlink()
    rebuilt = PosthocEma(result.model, tmp_path / "ema")
    assert len(rebuilt.snapshots) == 2 * len(cfg.snapshot_steps()) == 32
    weights = flat(rebuilt.weights(0.15))
    first = flat(torch.load(rebuilt.snapshots[0].path, weights_only=True))
    error = float((weights - truth).norm())
    assert error / float(truth.norm()) < 1e-3  # relative weight error
    assert error / float((truth - first).norm()) < 0.02  # and small against how far the weights moved
    model = rebuilt.model(0.15)
    assert model.net is not result.model.net and rebuilt.model(None) is result.model
    assert rebuilt.fit(0.15) is rebuilt.fit(0.15)  # solved once per length (the trial's residual and the rebuild)


def test_resume_keeps_the_snapshots_and_writes_the_same_ones(digits8: ImageData, tmp_path: Path) -> None:
    cfg = tiny_config(kimg=3, batch_size=32, num_evals=3, lr=1e-3, ema_profiles=(0.05, 0.10), ema_snapshots=6)
    train(cfg, digits8, snapshot_dir=tmp_path / "full")

    def stop_at_second(point: EvalPoint, _ema: object) -> None:
        if point.index == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(cfg, digits8, on_eval=stop_at_second, checkpoint=tmp_path / "ckpt.pt", snapshot_dir=tmp_path / "cut")
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "cut").iterdir()}
    assert before and max(s.step for s in list_snapshots(tmp_path / "cut")) == cfg.eval_steps()[1]
    train(cfg, digits8, checkpoint=tmp_path / "ckpt.pt", snapshot_dir=tmp_path / "cut")
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "cut").iterdir()}
    assert all(after[name] == mtime for name, mtime in before.items())  # kept, not rewritten
    assert sorted(after) == sorted(p.name for p in (tmp_path / "full").iterdir())
    for name in after:
        a = torch.load(tmp_path / "full" / name, weights_only=True)
        b = torch.load(tmp_path / "cut" / name, weights_only=True)
        assert all(torch.equal(a[k], b[k]) for k in a), name


def test_a_run_without_profiles_keeps_no_snapshots_and_says_so_when_asked(digits8: ImageData) -> None:
    result = train(tiny_config(kimg=0.5, batch_size=32, num_evals=1), digits8)
    assert result.snapshot_dir is None
    with pytest.raises(ValueError, match="pass snapshot_dir"):
        train(tiny_config(kimg=0.5, batch_size=32, num_evals=1, ema_profiles=(0.05,)), digits8)


def test_the_sweep_table_and_sentence_name_the_best_ema_length_per_guidance() -> None:
    scores = [
        ComboScore(SamplingConfig(w, 10, 0.0, sigma), "screen", 64, fid, 0.0, None, 0.0)
        for w, sigma, fid in [(1.0, 0.05, 3.0), (1.0, 0.15, 2.0), (3.0, 0.05, 1.0), (3.0, 0.15, 4.0)]
    ]
    scores.append(ComboScore(SamplingConfig(3.0, 10, 0.0, 0.05), "full", 256, 1.5, 0.0, None, 0.0))
    assert ema_sentence(scores) == "EMA σ_rel 0.15 is best at guidance 1; 0.05 at guidance 3"
    table = sweep_table(SweepResult(scores), "FID")
    assert table.splitlines()[0].split()[3] == "EMA" and "0.15" in table
    assert ema_sentence([ComboScore(SamplingConfig(), "full", 64, 1.0, 0.0, None, 0.0)]) is None
    stored = scores[0].to_dict()
    assert stored["ema_sigma_rel"] == 0.05 and ComboScore.from_dict(stored).sampling == scores[0].sampling


def test_hpo_train_sweeps_the_ema_length_and_prints_it(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        search={"lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True}},
        sampling={"steps": 4, "ema_sigma_rel": [0.05, 0.12]},
        score={"features": "classifier", "num_samples": 32, "batch_size": 32, "grid_size": 16},
        tracking={"tensorboard": False},
        baselines=[{"lr": 1e-3}],
    )
    out = tmp_path / "run"
    code, stdout, _ = run_cli(["train", str(spec), "--set", "kimg=0.5", "-o", str(out), "--threads", "1"])
    assert code == 0, stdout
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(s["ema_sigma_rel"] for s in summary["sweep"]) == [0.05, 0.12]
    assert summary["sampling"]["ema_sigma_rel"] in (0.05, 0.12)
    assert summary["ema_snapshots"]["count"] == len(list((out / "ema").glob("ema-*.pt"))) > 0
    header = next(line for line in stdout.splitlines() if line.split()[:1] == ["guidance"])
    assert header.split()[3] == "EMA" and "EMA σ_rel" in stdout and "is best at guidance 1" in stdout


def test_the_report_draws_ema_length_against_guidance_and_says_which_is_best() -> None:
    import optuna

    from hpo.report.build import sweep_section
    from hpo.report.data import summarise_study
    from hpo.report.render import sweep_html

    combos = [(w, sigma) for w in (1.0, 3.0) for sigma in (0.05, 0.1, 0.2)]
    sweep = [
        ComboScore(SamplingConfig(w, 8, 0.0, sigma), "screen", 64, 1 + abs(sigma - 0.07 * w), 0.0, None, 0.0).to_dict()
        for w, sigma in combos
    ]
    study = optuna.create_study()
    trial = optuna.trial.create_trial(
        value=1.0,
        params={"lr": 1e-3},
        distributions={"lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)},
        user_attrs={"sweep": sweep, "sampling": SamplingConfig(1.0, 8, 0.0, 0.05).as_dict()},
    )
    study.add_trial(trial)
    (done,) = study.get_trials()
    page = sweep_html(sweep_section([done], summarise_study(study, [done])))
    assert "EMA σ_rel 0.05 is best at guidance 1; 0.2 at guidance 3" in page
    assert "guidance × EMA length, trial #0" in page and page.count("<figure") == 2  # steps, and EMA length


def test_ema_lengths_are_screened_at_the_winning_steps_only_and_rebuilt_once_each(
    digits8: ImageData, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3 lengths × 2 guidance × 2 DDIM steps: the middle length sees all 4 (guidance, steps); the
    other two lengths only the 2 guidance values at the steps that won: 8 screened, not 12."""
    from hpo.scoring.score import make_scorer
    from hpo.scoring.sweep import ema_stages, run_sweep
    from hpo.spec.config import ScoreConfig
    from hpo.training import posthoc_ema

    cfg = tiny_config(kimg=1.6, batch_size=32, num_evals=1, timesteps=50, ema_profiles=(0.05, 0.10))
    result = train(cfg, digits8, snapshot_dir=tmp_path / "ema")
    scorer = make_scorer(
        ScoreConfig(features="classifier", num_samples=32, batch_size=16), digits8, device=torch.device("cpu"),
        cache_dir=cache_dir / "scoring",
    )  # fmt: skip
    combos = [SamplingConfig(w, n, 0.0, sigma) for sigma in (0.2, 0.05, 0.1) for w in (1.0, 2.0) for n in (3, 6)]
    first, rest = ema_stages(combos)
    assert {c.ema_sigma_rel for c in first} == {0.1} and len(first) == 4 and len(rest) == 8
    rebuilt: list[float] = []
    real = posthoc_ema.combine

    def counting(snapshots, coefficients):  # type: ignore[no-untyped-def]
        rebuilt.append(len(snapshots))
        return real(snapshots, coefficients)

    monkeypatch.setattr(posthoc_ema, "combine", counting)
    sweep = run_sweep(
        scorer, result.model, combos, screen_samples=16, rescore_top=2, ema=PosthocEma(result.model, tmp_path / "ema")
    )
    screened = [s.sampling for s in sweep.scores if s.stage == "screen"]
    won = min(
        (s for s in sweep.scores if s.stage == "screen" and s.sampling.ema_sigma_rel == 0.1), key=lambda s: s.rank_value
    )
    assert len(screened) == 8 and {c.steps for c in screened if c.ema_sigma_rel != 0.1} == {won.sampling.steps}
    finalists = set(screen_finalists(sweep.scores, 2, conditional=True))
    assert {s.sampling for s in sweep.full} == finalists and sweep.best.num_samples == 32
    lengths = len({c.ema_sigma_rel for c in finalists})  # each length rebuilt once screening, once completing
    assert len(rebuilt) <= 3 + lengths


def test_the_ema_stage_keeps_the_winners_sampler_and_spacing_not_only_its_steps() -> None:
    """Two samplers at the same steps and η: the other EMA lengths are screened with the sampler and
    spacing that won the first stage, not with every combination that shares its steps."""
    from hpo.scoring.sweep import at_settings_of, ema_stages

    solvers = (SamplingConfig(steps=10), SamplingConfig(steps=10, sampler="dpmpp_2m", spacing="karras"))
    combos = [
        replace(c, guidance_scale=w, ema_sigma_rel=sigma)
        for sigma in (0.05, 0.1, 0.2)
        for w in (1.0, 2.0)
        for c in solvers
    ]
    first, rest = ema_stages(combos)
    assert {c.ema_sigma_rel for c in first} == {0.1} and len(first) == 4  # two solvers: a stage of its own
    won = SamplingConfig(2.0, 10, 0.0, 0.1, sampler="dpmpp_2m", spacing="karras")
    second = at_settings_of(won, rest)
    assert {(c.sampler, c.spacing) for c in second} == {("dpmpp_2m", "karras")}
    assert sorted((c.ema_sigma_rel, c.guidance_scale) for c in second) == [
        (0.05, 1.0),
        (0.05, 2.0),
        (0.2, 1.0),
        (0.2, 2.0),
    ]
