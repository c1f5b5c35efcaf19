"""The report says what the data says: studies with a known structure (one parameter drives the
score, the others are noise; most trials pruned; two configurations tied; a confirmation that holds,
ties or fails) are built trial by trial, and their reports read and rendered in Chromium."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from hpo.analysis.importance import Importances, study_importances
from hpo.analysis.noise import Noise
from hpo.analysis.ranking import ties_with_best
from hpo.companions.confirm import verdict
from hpo.records import ComboScore
from hpo.report.data import (
    StepsRow,
    best_vs_baseline,
    complete,
    relative_sweep,
    summarise_study,
    sweep_answer,
    sweep_grid,
    sweep_of,
)
from hpo.report.figures import trial_name
from hpo.spec.sampling import SamplingConfig
from tests.service_helpers import storage_of, study_report
from tests.study_builders import add, create_companion, new_study, planted_sweep, random_params, structured_study


@pytest.fixture(scope="module")
def structured(tmp_path_factory: pytest.TempPathFactory) -> optuna.Study:
    return structured_study(tmp_path_factory.mktemp("structured"))


def test_the_parameter_that_drives_the_score_is_named_and_the_ranking_is_stable(structured: optuna.Study) -> None:
    score, val = study_importances(structured.get_trials(), "classifier-FID")
    assert score.ranked[0] == "lr" and score.n_trials == 30 and score.top_share > 0.9
    assert "lr matters most" in score.reading() and "The ranking is stable." in score.reading()
    lo, hi = score.intervals["lr"]
    assert lo <= score.medians["lr"] <= hi and lo > 0.5
    assert f"fANOVA importance {score.medians['lr']:.2f} (bootstrap median, 80% interval {lo:.2f}–{hi:.2f}" in (
        score.reading()
    )  # the number shown is the one its interval qualifies
    assert val.ranked[0] == "lr" and "evaluation point 4" in val.target
    assert "guidance_scale" not in val.fanova  # it only affects sampling: never ranked for a training metric
    assert "guidance_scale" in score.fanova


def test_a_mostly_pruned_study_ranks_from_every_trial_and_says_how_few_completed(tmp_path: Path) -> None:
    study = new_study(tmp_path, "pruned")
    rng = np.random.default_rng(1)
    for i in range(12):
        p = random_params(rng)
        quality = (math.log10(p["lr"]) + 3) ** 2
        curve = [1 + quality - 0.1 * k for k in range(4 if i < 3 else 2)]
        state = TrialState.COMPLETE if i < 3 else TrialState.PRUNED
        add(study, p, value=5 + quality, curve=curve, state=state, fail_reason=None if i < 3 else "pruned_by_median")
    score, val = study_importances(study.get_trials(), "classifier-FID")
    assert score.n_trials == 3 and "only 3 trials: treat this as a hint" in score.reading()
    assert val.n_trials == 12 and "evaluation point 2" in val.target  # pruned trials count at the point all reached


def test_evaluators_that_disagree_on_the_top_parameter_are_reported_as_such() -> None:
    imp = Importances(
        "FID",
        20,
        {"lr": 0.2, "schedule": 0.8},
        {"lr": 0.7, "schedule": 0.3},
        {"lr": (0.6, 0.8), "schedule": (0.2, 0.4)},
        {"lr": 0.7, "schedule": 0.3},
        0.9,
    )
    assert "PED-ANOVA ranks schedule first instead: the evaluators disagree" in imp.reading()


def test_two_configurations_within_the_noise_are_called_tied(tmp_path: Path) -> None:
    study = new_study(tmp_path, "tied")
    rng = np.random.default_rng(2)
    add(study, random_params(rng), value=10.0, curve=[1.0] * 4, baseline=True, fid_noise=0.4)
    stat = {"metric": "classifier-FID", "samples": 256, "features": 133, "bias_correction": "none",
            "combinations": 9, "completed": 3, "screen": {"samples": 64, "by": "pca", "dims": 16}}  # fmt: skip
    add(study, random_params(rng), value=9.2, curve=[1.0] * 4, fid_noise=0.5, statistic=stat)  # the best
    add(study, random_params(rng), value=9.5, curve=[1.0] * 4)  # within the noise of the best
    add(study, random_params(rng), value=14.0, curve=[1.0] * 4)
    s = summarise_study(study, study.get_trials())
    assert s.noise.sd == pytest.approx(math.sqrt((0.16 + 0.25) / 2)) and s.noise.pairs == 2
    page = study_report(study, tmp_path / "tied.html", artifact_dir=None).read_text()
    assert "#2: classifier-FID 9.5 — tied with #1 (within the noise)" in page
    assert (  # what the value is: count, features, bias correction, how it was picked
        "<b>Score</b>: per trial, classifier-FID of 256 samples in 133 feature dimensions (plug-in, not "
        "bias-corrected: compared at equal counts only); the best of the 3 sampling combinations completed after "
        "a screen of all 9 on 64 samples by FID in 16 principal components" in page
    )
    assert "#0 (baseline): classifier-FID 10 — tied with #1" in page
    assert ties_with_best(complete(study.get_trials()), s.noise) == [2, 0]  # #3 (14.0) is clearly worse
    # best vs baseline: 0.8 apart, tie margin 2·√2·0.45 ≈ 1.3; a baseline stored before names is "the baseline"
    assert "tied with the baseline (#0, 10): the 0.8 difference is within the noise" in page
    assert Noise(0.1, 1).within_tie_margin(9.2, 9.4) and not Noise(0.1, 1).within_tie_margin(9.2, 10.0)


def test_each_named_start_is_compared_with_the_best_by_its_name(tmp_path: Path) -> None:
    """As `hpo init` enqueues them: #0 by hand (6.23), #1 the known start (1.11); #2 beats both, the
    known start within the noise. Neither is "the baseline"."""
    study = new_study(tmp_path, "named")
    rng = np.random.default_rng(4)
    add(study, random_params(rng), value=6.23, curve=[1.0] * 4, baseline=True, baseline_name="by hand", fid_noise=0.1)
    add(study, random_params(rng), value=1.11, curve=[1.0] * 4, baseline=True, baseline_name="known start")
    add(study, random_params(rng), value=1.01, curve=[1.0] * 4, fid_noise=0.1)
    s = summarise_study(study, study.get_trials())
    said = best_vs_baseline(s)
    assert said.startswith("Trial #2 scores 1.01: tied with known start (#1, 1.11): the 0.1 difference is within")
    assert "; 5.22 better than by hand (#0, 6.23), more than the noise (tie margin" in said
    assert "the baseline" not in said
    assert [trial_name(t) for t in study.get_trials()[:2]] == ["#0 by hand complete", "#1 known start complete"]
    page = study_report(study, tmp_path / "named.html", artifact_dir=None).read_text()
    assert "#1 (known start): classifier-FID 1.11" in page and "#0 (by hand): classifier-FID 6.23" in page


def confirmed(tmp_path: Path, name: str, results: dict[int, list[float]]) -> tuple[optuna.Study, optuna.Study]:
    """A source study with three complete trials (#1 the winner, #0 the baseline) and its companion,
    whose runs finish with the given values per source trial."""
    source = new_study(tmp_path, name)
    rng = np.random.default_rng(3)
    for i, value in enumerate([8.0, 6.0, 7.0]):
        add(source, random_params(rng), value=value, curve=[1.0] * 4, baseline=i == 0)
    companion = create_companion(source, storage_of(source), top=2, seeds=3, kimg=3.2)
    remaining = {k: list(v) for k, v in results.items()}
    for _ in range(9):
        trial = companion.ask()
        companion.tell(trial, remaining[trial.user_attrs["confirm_of"]].pop())
    return source, companion


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        ({1: [5.0, 5.1, 5.2], 2: [6.0, 6.1, 6.2], 0: [8.0, 8.1, 8.2]}, "The winner holds at 4× the budget: trial 1"),
        ({1: [5.0, 6.0, 7.0], 2: [5.5, 6.5, 7.5], 0: [9.0, 9.1, 9.2]}, "trial 1 and trial 2 are tied"),
        (
            {1: [7.0, 7.1, 7.2], 2: [5.0, 5.1, 5.2], 0: [9.0, 9.1, 9.2]},
            "The winner does not hold at 4× the budget: trial 2",
        ),
    ],
)
def test_confirmation_verdicts_say_what_the_seeds_say(
    tmp_path: Path, results: dict[int, list[float]], expected: str
) -> None:
    source, companion = confirmed(tmp_path, "confirmed", results)
    v = verdict(source, companion)
    assert [c.trial for c in v.configs] == [1, 2, 0] and v.seeds == 3 and v.finished == v.expected == 9
    assert expected in v.text
    assert "baseline (trial 0" in v.text
    assert v.rank_correlation is not None
    page = study_report(source, tmp_path / "c.html", artifact_dir=None).read_text()
    assert "Confirmed at full length?" in page and expected in page


@pytest.mark.parametrize(
    ("floor", "expected"),
    [
        (0.95, "the best is at the floor, so the metric can no longer rank the best trials"),
        (0.40, "the best is 0.6 above them"),
        (1.60, "the best scores below them, closer to the training images than new real images are"),
    ],
)
def test_every_score_is_read_against_where_real_images_land(tmp_path: Path, floor: float, expected: str) -> None:
    from hpo.commands.status import status_text
    from hpo.records import FLOOR_ATTR

    study = new_study(tmp_path, "scaled")
    rng = np.random.default_rng(5)
    add(study, random_params(rng), value=1.0, curve=[1.0] * 4, fid_noise=0.1)
    add(study, random_params(rng), value=2.0, curve=[1.0] * 4, fid_noise=0.1)
    study.set_user_attr(FLOOR_ATTR, {"score": floor, "score_sd": 0.0, "num_images": 256})
    text = status_text(f"sqlite:///{tmp_path / 'hpo.db'}", "scaled")
    assert f"real held-out images score {floor:g} (256 images): {expected}" in text
    page = study_report(study, tmp_path / "s.html", artifact_dir=None).read_text()
    assert "<b>Real images on this score</b>: Real held-out images score" in page and expected in page
    assert "± is the noise of re-sampling one trained model; another training seed moves a score more" in page


def test_the_sampling_advice_is_the_best_trials_own_and_a_baseline_cannot_swamp_it(tmp_path: Path) -> None:
    """The quickstart's case: the winner samples best at guidance 2 / 30 steps, the baseline (scores
    near 130, gaps of 60) at guidance 3 / 20. Averaging score gaps over both names the baseline's
    favourite; the advice must name the winner's, and say the baseline disagrees."""
    steps, scales = [10, 20, 30], [1.0, 2.0, 3.0]
    winner = {(n, w): 6.0 + 0.1 * n / 10 + abs(w - 2.0) for n in steps for w in scales}
    winner[(30, 2.0)], winner[(20, 3.0)] = 5.0, 7.7
    baseline = {(n, w): 190.0 + n / 10 for n in steps for w in scales}
    baseline[(20, 3.0)] = 130.0
    study = new_study(tmp_path, "advice")
    rng = np.random.default_rng(0)
    add(study, random_params(rng), value=5.0, curve=[0.9, 0.8], sweep=planted_sweep(winner))
    add(study, random_params(rng), value=130.0, curve=[0.95, 0.9], sweep=planted_sweep(baseline))
    done = complete(study.get_trials())
    naive = min(((n, w) for n in steps for w in scales), key=lambda k: winner[k] - 5.0 + baseline[k] - 130.0)
    assert naive == (20, 3.0)  # what the mean of score gaps said
    text = sweep_answer(done, Noise(None, 0))
    assert text.startswith(
        "For the best trial (#0): guidance 2 at 30 DDIM steps samples best (5 at 256 samples, 60 network "
        "evaluations per image); no cheaper combination it completed comes within 0.25 of that (5% of it: no "
        "noise measured)."
    )
    measured = sweep_answer(done, Noise(0.5, 2))  # 2·√2·0.5 ≈ 1.4: 10 guided steps (6.1) are level with the best
    assert "; guidance 2 at 10 DDIM steps (20 evaluations) comes within 1.4 of that at 6.1 (2·√2 × the score's " in (
        measured
    )
    assert "the best in 0 and ranks 7.0 of 9" in text
    paired = new_study(tmp_path, "paired")  # the winner's sweep measured the noise of a difference on its samples
    stat = {"metric": "FID", "samples": 256, "features": 2048, "bias_correction": "none", "combinations": 9,
            "completed": 9, "paired_sd": 0.1}  # fmt: skip
    add(paired, random_params(rng), value=5.0, curve=[0.9, 0.8], sweep=planted_sweep(winner), statistic=stat)
    text = sweep_answer(complete(paired.get_trials()), Noise(0.5, 2))  # 2 × 0.1: 10 steps (6.1) are not level now
    assert "no cheaper combination it completed comes within 0.2 of that (2 × the sd of a difference between two " in (
        text
    )
    thirty = StepsRow("ddim", "trailing", 30)
    assert relative_sweep([sweep_of(t) for t in done])[(thirty, 2.0)] == 4.0  # mean rank: 1 and 7


def test_the_sweep_grid_keeps_samplers_apart() -> None:
    """10 Heun steps (19 network evaluations) and 10 DDIM steps (10) are different rows, never one
    cell holding the better of the two."""
    heun, ddim = SamplingConfig(2.0, 10, sampler="heun", spacing="karras"), SamplingConfig(2.0, 10)
    scores = [ComboScore(c, "full", 256, v, 0.0, None, 1.0) for c, v in ((heun, 4.0), (ddim, 9.0))]
    scales, rows, grid, _ = sweep_grid(scores)
    assert scales == [2.0] and [r.label for r in rows] == ["10", "10 heun karras"] and grid == [[9.0], [4.0]]


def test_two_parameters_drawn_together_are_named_as_confounded(tmp_path: Path) -> None:
    """The quickstart's case: every trial that drew a large batch also drew an extreme lr (low or
    high: no monotone trend, so no correlation), and the validation metric follows lr alone. Whichever
    parameter fANOVA puts on top, the reading must say the two cannot be told apart."""
    study = new_study(tmp_path, "confounded")
    rng = np.random.default_rng(4)
    extremes = iter([-3.9, -2.1] * 3)  # 3 low and 3 high
    for i in range(10):
        p = random_params(rng)
        if i % 3 == 0:
            p["batch_size"], p["lr"] = 32, float(10 ** rng.uniform(-3.2, -2.8))
        else:
            p["batch_size"], p["lr"] = 16, float(10 ** (next(extremes) + rng.uniform(-0.08, 0.08)))
        quality = (math.log10(p["lr"]) + 3) ** 2
        add(study, p, value=5 + 4 * quality, curve=[1 - 0.1 * k + 0.2 * quality for k in range(2)])
    score, _ = study_importances(study.get_trials(), "classifier-FID")
    top = score.ranked[0]
    other = {"lr": "batch_size", "batch_size": "lr"}[top]
    assert other in score.confounded, (top, score.confounded)
    assert f"the drawn values of {top} go with those of {other}" in score.reading()
    assert "their effects cannot be told apart" in score.reading() and "The ranking is stable." not in score.reading()


def test_independent_draws_are_not_called_confounded(structured: optuna.Study) -> None:
    score, _ = study_importances(structured.get_trials(), "classifier-FID")
    assert score.confounded == {} and "go with those of" not in score.reading()
