"""``hpo run``'s phases in parts: what the final run's note says, when it ends early, what a bigger budget
is forecast to buy, its settings, the search's workers, and a phase running on disk from its first moment."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from hpo.records import TrialRecord
from hpo.run.ends import Ends
from hpo.run.ledger import Decisions, Ledger, load_ledger, save_ledger, trained_words
from hpo.run.options import RunOptions, worker_count
from hpo.run.phases.final import bigger_budget
from hpo.run.sizing import final_train, what_trained
from hpo.run.state import Run


def test_the_final_runs_note_says_when_the_deadline_ended_it_and_where() -> None:

    curve = {"1": {"kimg": 10.0}, "2": {"kimg": 20.0}}
    assert what_trained(TrialRecord({"curve": curve}), 20.0) == (20.0, "")
    assert trained_words(20.0, 20.0, "") == "at 20 kimg"
    assert what_trained(TrialRecord({"curve": curve}), 40.0) == (20.0, "the deadline")
    stop = {"kind": "copying", "text": "copying began at 10 kimg", "since_kimg": 10.0}
    copied = TrialRecord({"curve": curve, "stop": stop})
    assert what_trained(copied, 40.0) == (20.0, "the stop verdict (copying since 10 kimg)")
    assert trained_words(20.0, 40.0, "the stop verdict (copying since 10 kimg)") == (
        "at 20 of 40 planned kimg, ended by the stop verdict (copying since 10 kimg)"
    )


def test_a_final_run_cut_by_its_deadline_is_scored_at_the_kimg_it_trained_not_the_plan(tmp_path: Path) -> None:
    """Issue 71: a 10-minute run planned 9.738 kimg, its deadline ended it at 4.9; the ledger, the
    closing lines and the report said "classifier-FID 35.45 at 9.738 kimg"."""
    curve = {"1": {"kimg": 2.45}, "2": {"kimg": 4.9}}
    d = Decisions(final_kimg=9.738, final_num_evals=4, value=35.45, floor=12.0, metric="classifier-FID")
    d.trained_kimg, d.ended_by = what_trained(TrialRecord({"curve": curve}), 9.738)
    assert d.score_words() == "classifier-FID 35.45 at 4.9 of 9.738 planned kimg, ended by the deadline"
    ledger = Ledger(folder="/data", budget_s=600.0, study="s", image_size=32, decisions=d)
    save_ledger(ledger, tmp_path)
    again = load_ledger(tmp_path)  # kept across a resume
    assert again is not None and (again.decisions.trained_kimg, again.decisions.ended_by) == (4.9, "the deadline")
    section = run_section_text(tmp_path, ledger)
    assert "classifier-FID 35.45 at 4.9 of 9.738 planned kimg, ended by the deadline" in section
    assert "at 9.738 kimg" not in section


def run_section_text(tmp_path: Path, ledger: Ledger) -> str:
    """The report's run section of a study carrying ``ledger``, as the text of its blocks."""
    from hpo.records import RUN_ATTR
    from hpo.report.build import run_section
    from tests.study_builders import new_study

    study = new_study(tmp_path, "budgeted")
    study.set_user_attr(RUN_ATTR, ledger.to_dict())
    section = run_section(study)
    assert section is not None
    return repr(section)


def test_the_final_run_ends_at_the_first_point_whose_curve_reads_as_copying() -> None:

    curve: dict[str, dict[str, float]] = {}
    end = Ends(when_copying=True).rule(curve, copy_floor=0.05)
    assert end is not None and Ends().rule(curve, copy_floor=0.05) is None  # hpo train alone runs to its kimg
    asked = []
    for i, low in enumerate([0.0, 0.01, 0.02, 0.12, 0.2], start=1):  # the score still falls: only copies say stop
        curve[str(i)] = {"kimg": 4.0 * i, "score": 50.0 / i, "copy_pixels_low": low, "copy_pixels": low + 0.05}
        asked.append(end())
    assert asked == [False, False, False, True, True]


def test_a_bigger_budget_is_forecast_as_a_gain_while_the_curve_falls_and_as_none_within_the_noise() -> None:

    def said(scores: list[float]) -> str:
        curve = {str(i): {"kimg": 5.0 * i, "score": s} for i, s in enumerate(scores, start=1)}
        return bigger_budget(TrialRecord({"curve": curve, "curve_noise": 0.2}), "FID")  # tie margin 0.57

    falling = said([80.0, 40.0, 27.0, 20.0, 16.0, 13.5])
    assert falling.startswith("twice the final run's training (60 kimg): FID ") and "optimistic" in falling
    flat = said([30.0, 20.0, 18.0, 18.2, 17.9, 18.1, 18.0, 18.1])
    assert "forecasts no gain beyond the noise" in flat and "against 18.1 at its last point" in flat, flat
    assert said([40.0, 30.0]).startswith("no forecast: 2 scored points")


def test_search_workers_are_workers_else_per_gpu_on_each_gpu_else_one_whatever_the_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    def opts(**kw: object) -> RunOptions:
        base = {"images": tmp_path, "budget": "1h", "out": None, "image_size": None, "threads": None, "workers": None}
        return RunOptions(**{**base, "storage": "postgresql://db/hpo", **kw})  # type: ignore[arg-type]

    assert worker_count(opts(workers=3)) == 3
    assert worker_count(opts(gpus="cpu")) == 1 and worker_count(opts(gpus="cpu", per_gpu=2)) == 2
    monkeypatch.setattr("torch.cuda.device_count", lambda: 2)
    assert worker_count(opts(gpus="0,1", per_gpu=2)) == 4 and worker_count(opts(per_gpu=3)) == 6


def test_the_final_run_warms_up_and_averages_over_its_own_budget_not_the_trials() -> None:

    planned = Decisions(final_kimg=40.0, final_num_evals=10)
    assert final_train(planned).params() == {
        "kimg": 40.0, "num_evals": 10, "eval_spacing": "even", "warmup_kimg": 0.8, "ema_halflife_kimg": 2.0,
    }  # fmt: skip


def test_a_phase_is_running_on_disk_from_its_first_moment(tmp_path: Path) -> None:
    """A watcher (``hpo status``, the process test) reads the ledger file; a phase shorter than a tick
    (the doctor took 4 s on a CI machine) must still show as running there, not only once it is done."""

    ledger = Ledger(folder=str(tmp_path), budget_s=600.0, study="s", image_size=None)
    save_ledger(ledger, tmp_path)
    opts = RunOptions(images=tmp_path, budget="10m", out=tmp_path, image_size=None, storage=None, workers=None,
                      threads=None)  # fmt: skip
    Run(opts, tmp_path, "sqlite://", ledger, threading.Lock(), lambda *_: None).start("preflight")
    stored = load_ledger(tmp_path)
    assert stored is not None and stored.phase("preflight").state == "running"


def test_the_runs_decision_names_a_winning_start_by_its_name() -> None:
    from optuna.trial import create_trial

    from hpo.run.phases.search import numbered

    known = create_trial(value=1.11, user_attrs={"baseline": True, "baseline_name": "known start"})
    known.number = 1
    other = create_trial(value=1.01)
    other.number = 7
    assert (numbered(known), numbered(other)) == ("#1 (known start)", "#7")
