"""Quality against sampling cost: each trial's frontier (the best score within each number of network
evaluations per image), and `hpo export` / `hpo sample --max-nfe N` choosing the best trial and
combination within N, which on a planted study is not the unconstrained best."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hpo.analysis.frontier import Screened, best_within, finalists, screen_frontier, trial_frontier
from hpo.records import ComboScore
from hpo.service.export import fixed_spec
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume, require_spec
from hpo.spec.loading import load_spec
from hpo.spec.params import Params
from hpo.spec.sampling import SamplingConfig
from hpo.spec.spec import spec_from_dict
from hpo.training.model import info_for, network_for
from tests.cli import run_cli
from tests.commands.test_outputs import SEARCH
from tests.service_helpers import write_spec
from tests.study_builders import add, planted_sweep, random_params

NAME = "costly"
# (DDIM steps, guidance) → score. Guided combinations cost two evaluations per step.
EXPENSIVE_WINNER = {(10, 1.0): 9.0, (30, 1.0): 6.0, (30, 2.0): 2.0}  # 10, 30, 60 NFE
CHEAP_RUNNER_UP = {(10, 1.0): 4.0, (30, 1.0): 3.8, (30, 2.0): 3.0}


def scores(grid: dict[tuple[int, float], float]) -> list[ComboScore]:
    return [ComboScore.from_dict(d) for d in planted_sweep(grid)]


def test_a_frontier_keeps_each_cost_that_beats_every_cheaper_one_and_guidance_costs_double() -> None:
    grid = {(10, 1.0): 9.0, (20, 1.0): 9.5, (10, 2.0): 5.0, (30, 1.0): 6.0, (30, 2.0): 2.0}
    frontier = trial_frontier(4, scores(grid), conditional=True)
    assert frontier is not None
    assert [(p.nfe, p.value) for p in frontier.points] == [(10, 9.0), (20, 5.0), (60, 2.0)]  # 20 NFE unguided: worse
    unguided = trial_frontier(4, scores(grid), conditional=False)  # an unconditional network is never guided twice
    assert unguided is not None and [p.nfe for p in unguided.points] == [10, 30]
    assert frontier.within(25) == frontier.points[1] and frontier.within(5) is None


def test_a_frontier_quotes_completed_values_only_and_the_sweep_completes_the_screens_frontier() -> None:
    """The quickstart's case: the screen (PCA-FID of 64 samples) saw 3.78 at 10 NFE beside a trial value
    of 2.64 at 512 samples. A frontier point is a completed value at the trial's own count, never the
    screen's statistic; the sweep completes the screen's best at each cheaper cost for that."""
    screen = {SamplingConfig(1.0, 5): 3.9, SamplingConfig(1.0, 10): 3.78, SamplingConfig(2.0, 10): 3.1}
    screen |= {SamplingConfig(2.0, 5): 4.5, SamplingConfig(3.0, 10): 3.3}
    scores = [ComboScore(c, "screen", 64, 40.0, 0.0, None, 1.0, ranked_by="pca", pca_fid=v) for c, v in screen.items()]
    assert screen_frontier(scores, conditional=True) == [SamplingConfig(1.0, 5), SamplingConfig(1.0, 10),
                                                         SamplingConfig(2.0, 10)]  # fmt: skip
    completed = {SamplingConfig(1.0, 5): 3.0, SamplingConfig(1.0, 10): 2.64, SamplingConfig(2.0, 10): 2.7}
    scores += [ComboScore(c, "full", 512, v, 0.0, None, 1.0) for c, v in completed.items()]
    frontier = trial_frontier(0, scores, conditional=True, metric="classifier-FID")
    assert frontier is not None and frontier.statistic == "classifier-FID of 512 samples"
    assert [(p.nfe, p.value) for p in frontier.points] == [(5, 3.0), (10, 2.64)]  # 20 NFE completed: no better
    assert trial_frontier(0, scores[:5], conditional=True) is None  # a screen alone quotes nothing


def test_within_a_budget_the_best_is_another_trial_and_the_cost_is_said() -> None:
    frontiers = {
        n: trial_frontier(n, scores(g), conditional=True) for n, g in ((0, EXPENSIVE_WINNER), (1, CHEAP_RUNNER_UP))
    }
    pick = best_within({n: f for n, f in frontiers.items() if f is not None}, 20)
    assert pick is not None and (pick.trial, pick.point.nfe, pick.point.value) == (1, 10, 4.0)
    assert (pick.best_trial, pick.best.nfe, pick.best.value) == (0, 60, 2.0)
    assert "within 20 NFE, trial 1" in pick.text and "the budget costs 2" in pick.text


@pytest.fixture(scope="module")
def study_with_weights(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """Trial 12 the unconstrained best (at 60 NFE), trial 13 the best within 20; both with EMA weights."""
    folder = tmp_path_factory.mktemp("frontier")
    url = f"sqlite:///{folder / 'hpo.db'}"
    study, _ = create_or_resume(load_spec(write_spec(folder, study={"name": NAME}, search=SEARCH)), open_storage(url))
    rng = np.random.default_rng(0)
    for _ in range(12):
        add(study, random_params(rng), value=20.0, curve=[1.0] * 4)  # no sweep stored: no frontier
    params: Params = {"lr": 1e-3, "batch_size": 16, "schedule": "linear", "guidance_scale": 1.5}
    cfg = spec_from_dict(fixed_spec(require_spec(study), params, SamplingConfig(2.0, 30))).train
    artifacts = folder / "artifacts"
    artifacts.mkdir()
    torch.save(
        network_for(cfg, info_for(cfg, channels=1, image_size=8, num_classes=10)).state_dict(), artifacts / "ema.pt"
    )
    for grid in (EXPENSIVE_WINNER, CHEAP_RUNNER_UP):
        best = min(grid, key=lambda k: grid[k])
        sampling = SamplingConfig(guidance_scale=best[1], steps=best[0])
        add(study, params, value=grid[best], curve=[1.0] * 4, sampling=sampling.as_dict(), ema_checkpoint="ema.pt",
            sweep=planted_sweep(grid))  # fmt: skip
    return url, artifacts


def exported(url: str, artifacts: Path, out: Path, *extra: str) -> tuple[dict[str, object], str]:
    code, stdout, stderr = run_cli(
        ["export", NAME, "-o", str(out), "--storage", url, "--artifacts", str(artifacts), *extra]
    )
    assert code == 0, stderr
    return json.loads((out / "sampling.json").read_text()), stdout


def test_export_with_a_step_budget_takes_the_best_trial_within_it(
    study_with_weights: tuple[str, Path], tmp_path: Path
) -> None:
    url, artifacts = study_with_weights
    best, _ = exported(url, artifacts, tmp_path / "best")
    assert best["trial"] == 12 and best["sampling"] == {"guidance_scale": 2.0, "steps": 30, "eta": 0.0}
    cheap, stdout = exported(url, artifacts, tmp_path / "cheap", "--max-nfe", "20")
    assert cheap["trial"] == 13 and cheap["sampling"] == {"guidance_scale": 1.0, "steps": 10, "eta": 0.0}
    assert cheap["max_nfe"] == 20 and "within 20 NFE, trial 13" in stdout and "the budget costs 2" in stdout
    assert cheap["value"] == 4.0  # the exported combination's value, not trial 13's best (3.0 at 60 NFE)
    wider, _ = exported(url, artifacts, tmp_path / "wider", "--max-nfe", "40")
    assert wider["trial"] == 13 and wider["sampling"] == {"guidance_scale": 1.0, "steps": 30, "eta": 0.0}
    assert wider["value"] == 3.8 and best["value"] == 2.0


def test_sample_with_a_step_budget_says_what_it_chose_and_a_budget_below_every_combination_is_one_line(
    study_with_weights: tuple[str, Path], tmp_path: Path
) -> None:
    url, artifacts = study_with_weights
    opts = ["--storage", url, "--artifacts", str(artifacts), "--threads", "1"]
    code, stdout, stderr = run_cli(
        ["sample", f"{NAME}:12", "--max-nfe", "30", "-n", "1", "-o", str(tmp_path / "g.png"), *opts]
    )
    assert code == 0, stderr
    assert "within 30 NFE, trial 12 at guidance 1, 30 DDIM steps" in stdout and (tmp_path / "g.png").is_file()
    code, _, stderr = run_cli(["sample", NAME, "--max-nfe", "5", "-n", "1", "-o", str(tmp_path / "h.png"), *opts])
    assert code == 2 and stderr.count("\n") == 1 and "the cheapest costs 10 (raise --max-nfe)" in stderr


def test_status_shows_the_best_trials_frontier_and_its_json_every_trials(
    study_with_weights: tuple[str, Path],
) -> None:
    url, _ = study_with_weights
    code, stdout, stderr = run_cli(["status", NAME, "--storage", url])
    assert code == 0, stderr
    assert "best trial's cost frontier: 10 NFE 9, 30 NFE 6, 60 NFE 2 (FID of 256 samples;" in stdout
    code, stdout, stderr = run_cli(["status", NAME, "--storage", url, "--json"])
    frontiers = json.loads(stdout)["study"]["frontiers"]
    assert set(frontiers) == {"12", "13"}  # the trials without a stored sweep have none
    assert [(p["nfe"], p["value"]) for p in frontiers["13"]["points"]] == [(10, 4.0), (30, 3.8), (60, 3.0)]


def test_the_report_draws_the_top_trials_frontiers(study_with_weights: tuple[str, Path], tmp_path: Path) -> None:
    url, artifacts = study_with_weights
    code, _, stderr = run_cli(
        ["report", NAME, "-o", str(tmp_path / "r.html"), "--storage", url, "--artifacts", str(artifacts)]
    )
    assert code == 0, stderr
    page = (tmp_path / "r.html").read_text()
    assert "Quality against sampling cost: each of the top 2 trials&#x27; best FID of 256 samples" in page
    assert '"name":"#12"' in page and '"x":[10,30,60]' in page  # one line per trial, its costs on x


def test_a_study_without_a_spec_still_has_frontiers(tmp_path: Path) -> None:
    """The report reads studies `hpo launch` did not make (no spec stored): conditional by default."""
    import optuna

    from hpo.service.frontiers import study_frontiers

    study = optuna.create_study(study_name="plain", storage=f"sqlite:///{tmp_path / 'p.db'}")
    add(study, {"lr": 1e-3}, value=2.0, curve=[1.0], sweep=planted_sweep(EXPENSIVE_WINNER))
    assert [p.nfe for p in study_frontiers(study)[0].points] == [10, 30, 60]


def test_a_screen_that_ranks_the_best_guidance_last_still_sends_it_to_the_full_count() -> None:
    """../shared/cases/photo-sweep: on 64 samples (PCA-16) guidance 2 ranked last at every step count; on
    1 024 it was best (2.44 against the reported 3.04). The screen ordered steps within each guidance
    scale as the full count did, so the best of each scale goes on beside the best 3 and the frontier."""
    screen = {(1.0, 10): 5.08, (1.0, 20): 3.80, (1.0, 30): 3.54, (2.0, 10): 6.41, (2.0, 20): 5.02, (2.0, 30): 4.75,
              (3.0, 10): 4.87, (3.0, 20): 3.41, (3.0, 30): 3.07}  # fmt: skip
    rows = [Screened((w, n), w, n * (1 if w == 1 else 2), v) for (w, n), v in screen.items()]
    picked = finalists(rows, 3)
    assert picked[:3] == [(3.0, 30), (3.0, 20), (1.0, 30)]  # the best 3 first
    assert (2.0, 30) in picked and picked.count((3.0, 30)) == 1  # every scale's best, each once
    assert set(picked) - {(3.0, 30), (3.0, 20), (1.0, 30), (2.0, 30)} == {(1.0, 10), (1.0, 20)}  # the frontier
    unguided = [Screened(r.key, 1.0, r.nfe, r.value) for r in rows]  # an unconditional network: one "scale"
    assert (2.0, 30) not in finalists(unguided, 3)
