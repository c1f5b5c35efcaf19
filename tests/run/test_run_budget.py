"""``hpo run``'s pure parts: the budget's words, the split of a budget between phases, the ledger."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hpo.analysis.tables import duration
from hpo.errors import HpoError
from hpo.records import ComboScore, TrialRecord
from hpo.run.budget import parse_budget
from hpo.run.ledger import PHASES, RUN_FILE, Ledger, load_ledger, save_ledger
from hpo.run.sizing import final_speed, speed_of
from hpo.run.split import (
    MIN_COMPLETE,
    MIN_POINTS,
    Costs,
    Speed,
    Split,
    decide_runs,
    final_kimg,
    final_num_evals,
    minimum_budget,
    parse_split,
    plan_search,
)
from hpo.spec.sampling import SamplingConfig


@pytest.mark.parametrize(
    ("text", "seconds"), [("8h", 28800), ("90m", 5400), ("1h30m", 5400), ("45s", 45), ("2d", 172800), ("1.5h", 5400)]
)
def test_budget_words_are_read_in_seconds(text: str, seconds: float) -> None:
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["8 hrs", "8", "h", "", "8x", "0m"])
def test_a_budget_without_a_known_unit_is_one_line_naming_the_units(text: str) -> None:
    with pytest.raises(HpoError) as err:
        parse_budget(text)
    assert "\n" not in str(err.value) and ("s, m, h or d" in str(err.value) or "more than nothing" in str(err.value))


def test_a_split_is_read_as_percent_of_search_and_decision_and_the_final_run_takes_the_rest() -> None:
    split = parse_split("20/10")
    assert (split.search, split.decide) == (0.2, 0.1) and split.final == pytest.approx(0.7)
    assert split.words() == "20/10" and parse_split("50/10") == Split()


@pytest.mark.parametrize("text", ["35", "35/10/55", "a/b", "0/10", "60/30", "50/-5"])
def test_a_split_that_leaves_no_search_or_too_little_final_run_is_one_line(text: str) -> None:
    with pytest.raises(HpoError) as err:
        parse_split(text)
    assert "\n" not in str(err.value) and "--split 50/10" in str(err.value)


def test_durations_print_in_the_two_largest_units() -> None:
    assert [duration(s) for s in (45, 750, 3900)] == ["0m45s", "12m30s", "1h05m"]


COSTS = Costs(kimg=12.0, train_s=60.0, sweep_s=20.0, first_point=0.25, min_kimg=0.5)


def test_a_budget_below_the_minimum_is_refused_with_the_minimum_named() -> None:
    need = minimum_budget(COSTS, Split(), overhead_s=60.0)
    with pytest.raises(HpoError, match=r"below this plan's minimum of .* give --budget \d+m00s or more"):
        plan_search(COSTS, Split(), left_s=need - 61.0, budget_s=need - 1.0, overhead_s=60.0)
    plan = plan_search(COSTS, Split(), left_s=need - 59.0, budget_s=need + 1.0, overhead_s=60.0)
    assert plan.n_trials >= MIN_COMPLETE


def test_a_small_budget_shortens_each_trial_so_that_four_complete_ones_fit_the_search() -> None:
    plan = plan_search(COSTS, Split(), left_s=600.0, budget_s=660.0, overhead_s=60.0)
    assert plan.trial.kimg < COSTS.kimg
    assert MIN_COMPLETE * plan.trial.complete_s <= plan.shares.search_s + 1e-6
    large = plan_search(COSTS, Split(), left_s=36000.0, budget_s=36060.0, overhead_s=60.0)
    assert large.trial.kimg == COSTS.kimg and large.n_trials > plan.n_trials


def test_workers_side_by_side_run_as_many_times_the_trials_at_the_same_trial_budget() -> None:
    one = plan_search(COSTS, Split(), left_s=3600.0, budget_s=3660.0, overhead_s=60.0)
    four = plan_search(COSTS, Split(), left_s=3600.0, budget_s=3660.0, overhead_s=60.0, workers=4)
    assert four.trial == one.trial and four.n_trials in range(4 * one.n_trials, 4 * one.n_trials + 4)


def test_the_shares_add_up_to_what_is_left() -> None:
    plan = plan_search(COSTS, Split(), left_s=3600.0, budget_s=3660.0, overhead_s=60.0)
    s = plan.shares
    assert s.search_s + s.decide_s + s.final_s + s.sweep_s + s.export_s == pytest.approx(3600.0)


def test_the_final_run_gets_what_the_time_buys_at_the_winners_speed_never_less_than_a_trial() -> None:
    speed = Speed(kimg_per_second=0.2, point_seconds=0.0)
    assert final_kimg(seconds=600.0, speed=speed, points=10, trial_kimg=12.0) == 120.0
    assert final_kimg(seconds=10.0, speed=speed, points=10, trial_kimg=12.0) == 12.0


def test_the_final_runs_evaluation_points_are_paid_for_before_its_training() -> None:
    # a trial of 4 points: 100 s in all, 20 s of them at its points; 8 kimg trained (80 images/s)
    record = {"train_seconds": 100.0, "images_per_second": 80.0, "eval_seconds": 20.0, "eval_points": 4}
    speed = speed_of(TrialRecord(record))
    assert speed.kimg_per_second == pytest.approx(0.1) and speed.point_seconds == 5.0
    # 600 s with 20 points: 100 s of points, 500 s of training; the trial's average rate would say 48 kimg
    assert final_kimg(seconds=600.0, speed=speed, points=20, trial_kimg=8.0) == pytest.approx(50.0)
    assert final_kimg(seconds=600.0, speed=speed, points=4, trial_kimg=8.0) == pytest.approx(58.0)
    unsplit = speed_of(TrialRecord({"train_seconds": 100.0, "images_per_second": 80.0}))
    assert unsplit == Speed(kimg_per_second=0.08, point_seconds=0.0)  # a record from before points were timed


def test_a_final_runs_point_also_pays_for_scoring_the_trials_best_combination() -> None:
    """Shapes at 16 px: a trial's point took 2.3 s, the final run's 9.3 s, because the final run scores
    its watched combination (the trial's best) on the full count at every point. Its plan pays for that."""
    best, other = SamplingConfig(3.0, 10), SamplingConfig(1.0, 5)
    sweep = [ComboScore(best, "screen", 64, 30.0, 0.0, None, 0.9), ComboScore(other, "screen", 64, 4.0, 0.0, None, 0.3),
             ComboScore(best, "full", 512, 25.0, 0.0, None, 6.9)]  # fmt: skip
    trial = TrialRecord({"train_seconds": 54.66, "images_per_second": 174.5, "eval_seconds": 9.26, "eval_points": 4,
                         "sampling": best.as_dict(), "sweep": [c.to_dict() for c in sweep]})  # fmt: skip
    assert trial.combination_seconds(best) == pytest.approx(7.8) and trial.combination_seconds(None) == 0.0
    final = final_speed(trial)
    assert final.point_seconds == pytest.approx(9.26 / 4 + 7.8)
    assert final.kimg_per_second == speed_of(trial).kimg_per_second
    # the run that the deadline cut at 40.4 of 51.9 kimg: 267 s planned; the cap of a tenth keeps 4 points
    points = final_num_evals(267.0, 600.0, final.point_seconds)
    assert points == MIN_POINTS and final_kimg(seconds=267.0, speed=final, points=points, trial_kimg=9.5) < 48.0


def test_the_final_run_checkpoints_at_least_every_twentieth_of_the_budget() -> None:
    assert final_num_evals(5400.0, 28800.0) == 4  # floor of 4
    assert final_num_evals(16000.0, 28800.0) == 12
    assert final_num_evals(28800.0, 28800.0) == 20
    assert final_num_evals(28800.0, 28800.0, point_s=10.0) == 20  # on a long budget the points cost little


def test_a_short_final_run_spends_at_most_a_tenth_on_evaluation_points_but_keeps_four() -> None:
    assert final_num_evals(300.0, 600.0) == 10  # a checkpoint every 5 % of a 10-minute budget...
    assert final_num_evals(300.0, 600.0, point_s=2.0) == 10  # ...when points are cheap
    assert final_num_evals(1200.0, 1800.0, point_s=20.0) == 6  # 120 s of points in 1200
    assert final_num_evals(300.0, 600.0, point_s=13.6) == 4  # the stop verdict and the forecast need 4


def test_the_decision_retrains_only_when_two_configurations_and_their_baseline_fit() -> None:
    assert decide_runs(100.0, 60.0, complete=5) == (0, 0)
    assert decide_runs(180.0, 60.0, complete=5) == (2, 1)
    assert decide_runs(1200.0, 60.0, complete=5) == (3, 5)
    assert decide_runs(1200.0, 60.0, complete=1) == (0, 0)


def test_the_ledger_banks_running_time_and_continues_after_a_stop(tmp_path: Path) -> None:
    ledger = Ledger(folder="/data", budget_s=600.0, study="s", image_size=None)
    ledger.start("plan")
    ledger.phase("plan").running_since = time.time() - 30
    ledger.finish("plan", note="planned")
    assert ledger.phase("plan").spent_s == pytest.approx(30, abs=1)
    ledger.start("preflight")
    ledger.phase("preflight").running_since = time.time() - 10
    ledger.stop_running()
    save_ledger(ledger, tmp_path)
    again = load_ledger(tmp_path)
    assert again is not None and again.to_dict() == ledger.to_dict()
    assert again.current() is not None and again.current().name == "preflight"  # type: ignore[union-attr]
    assert again.spent() == pytest.approx(40, abs=1) and again.left() == pytest.approx(560, abs=1)


def test_a_phase_leaves_the_time_planned_for_the_phases_after_it() -> None:
    ledger = Ledger(folder="/data", budget_s=600.0, study="s", image_size=None)
    for name, seconds in zip(PHASES, (1, 60, 200, 60, 250, 20, 9), strict=True):
        ledger.phase(name).planned_s = seconds
    ledger.finish("decide", state="skipped")
    assert ledger.planned_after("search") == 250 + 20 + 9


def test_a_damaged_ledger_is_one_line_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / RUN_FILE).write_text(json.dumps({"folder": "/x"}))
    with pytest.raises(HpoError, match=f"{RUN_FILE}: not a readable run ledger"):
        load_ledger(tmp_path)


GOOD = Ledger(folder="/data", budget_s=600.0, study="s", image_size=64).to_dict()
MALFORMED = [
    "[1, 2]",  # not a mapping
    "{not json",
    json.dumps({**GOOD, "budget_s": "ten minutes"}),
    json.dumps({**GOOD, "phases": [{"name": "plan", "state": "half-done"}]}),
    json.dumps({**GOOD, "phases": {"plan": {}}}),
    json.dumps({**GOOD, "decisions": {"winner": "seven"}}),
    json.dumps({**GOOD, "phases": [{"planned_s": 3.0}]}),  # a phase without its name
]
NEWER = [
    json.dumps({**GOOD, "version": 2}),
    json.dumps({**GOOD, "phases": [{"name": "tune", "state": "done"}]}),
    json.dumps({**GOOD, "phases": [{"name": "plan", "state": "done", "energy_j": 4.0}]}),
    json.dumps({**GOOD, "decisions": {"winner": 3, "runner_up": 4}}),
]


@pytest.mark.parametrize("text", MALFORMED + NEWER)
def test_a_malformed_or_newer_ledger_is_one_line_and_none_never_a_traceback(tmp_path: Path, text: str) -> None:
    (tmp_path / RUN_FILE).write_text(text)
    with pytest.raises(HpoError) as refused:  # hpo run refuses to continue from it, in one line naming the file
        load_ledger(tmp_path)
    assert len(str(refused.value).splitlines()) == 1 and RUN_FILE in str(refused.value)
    try:
        raw = json.loads(text)
    except ValueError:
        return
    assert Ledger.read(raw) is None  # hpo status and the report leave it out
    if text in NEWER:
        assert "a newer hpo wrote it" in str(refused.value)


def test_a_ledger_written_before_a_field_existed_still_reads() -> None:
    older = {k: v for k, v in GOOD.items() if k != "image_size"}
    older["phases"] = [{"name": "plan", "state": "done"}]  # the other phases: pending
    older["decisions"] = {"winner": 3}
    ledger = Ledger.read(older)
    assert ledger is not None and ledger.image_size is None and ledger.decisions.winner == 3
    assert ledger.phase("plan").state == "done" and ledger.phase("search").state == "pending"


def test_a_ledger_written_before_trained_kimg_was_kept_reads_and_says_only_the_plan() -> None:
    older = {**GOOD, "decisions": {"winner": 3, "final_kimg": 9.738, "value": 35.45, "metric": "classifier-FID"}}
    ledger = Ledger.read(older)
    assert ledger is not None and ledger.decisions.trained_kimg is None and ledger.decisions.ended_by == ""
    assert ledger.decisions.score_words() == "classifier-FID 35.45 at 9.738 kimg planned"
