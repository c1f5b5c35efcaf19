"""Issue 71: trials are prefixes of the model. Under ``lr_schedule: wsd`` a completed trial keeps its
stable-phase state, ``hpo run``'s final run continues it (``hpo train --from STUDY:TRIAL`` with the
state) instead of training from scratch, and its cooldown starts early enough to end by the deadline."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from hpo.records import TrialRecord
from hpo.run import ends as ends_module
from hpo.run.ends import CooldownClock, Deadline, Ends
from hpo.run.ledger import Decisions
from hpo.run.sizing import final_train, what_trained
from hpo.run.split import Speed, final_kimg
from hpo.run.train import train_run
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume
from hpo.service.worker import Worker, WorkerOptions
from hpo.spec.loading import load_spec
from hpo.training.checkpoint import load_checkpoint
from tests.service_helpers import write_spec


def one_wsd_trial(tmp_path: Path) -> tuple[str, Path, TrialRecord]:
    """A study of one wsd trial served by a real worker: (its storage URL, artifacts, the trial's record)."""
    spec = write_spec(
        tmp_path, study={"name": "lineage", "n_trials": 1}, train={"lr_schedule": "wsd", "kimg": 0.8},
        search={"lr": {"type": "float", "low": 1e-3, "high": 1e-3, "log": False}},
    )  # fmt: skip
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    study, _ = create_or_resume(load_spec(spec), open_storage(url))
    artifacts = tmp_path / "art"
    Worker(
        WorkerOptions(url=url, study="lineage", exit_when_idle=True, artifact_dir=artifacts, poll_seconds=0.1)
    ).serve()
    return url, artifacts, TrialRecord.of(study.trials[0])


def test_a_wsd_trial_keeps_its_stable_state_and_the_final_run_continues_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url, artifacts, trial = one_wsd_trial(tmp_path)
    branch = trial.branch
    assert branch is not None, trial.attrs
    path, kimg = artifacts / branch[0], branch[1]
    state = load_checkpoint(path)
    batch = int(state["config"]["batch_size"])
    assert kimg == pytest.approx(state["step"] * batch / 1000)  # the last state at full lr: 80 % of 0.8 kimg
    assert kimg < 0.8 and not (artifacts / branch[0].replace("-branch", "")).exists()  # the checkpoint went

    fixed = final_train(Decisions(final_kimg=1.6, final_num_evals=4, continued_kimg=kimg))
    assert "train.warmup_kimg" not in " ".join(fixed.overrides())  # the trial's warm-up, already trained
    with caplog.at_level(logging.INFO):
        train_run(None, fixed.overrides(), tmp_path / "final", source="lineage:0", storage=url, continue_from=path)
    assert f"continued from {path} at step {state['step']}" in caplog.text
    summary = TrialRecord(json.loads((tmp_path / "final" / "summary.json").read_text(encoding="utf-8")))
    continued, cooled = summary.lineage
    assert continued == pytest.approx(kimg) and cooled is not None and cooled > kimg
    final = load_checkpoint(tmp_path / "final" / "checkpoint.pt")
    assert final["continued_from"] == state["step"] and final["step"] * batch == 1600  # its whole budget
    first = final["losses"][: state["step"]]
    assert first == state["losses"]  # its first steps are the trial's, loss for loss


def test_a_continued_final_run_is_planned_on_top_of_the_state_it_continues() -> None:
    speed = Speed(kimg_per_second=0.1, point_seconds=2.0)
    fresh = final_kimg(seconds=100.0, speed=speed, points=5, trial_kimg=3.0)
    continued = final_kimg(seconds=100.0, speed=speed, points=5, trial_kimg=3.0, already=2.4)
    assert (fresh, continued) == (9.0, 11.4)  # the same seconds buy the same kimg, after the trial's 2.4
    assert final_kimg(seconds=1.0, speed=speed, points=0, trial_kimg=3.0, already=2.4) == 3.0  # never below a trial


def test_the_cooldown_starts_when_its_steps_at_the_measured_speed_would_reach_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(ends_module.time, "time", lambda: now[0])
    clock = CooldownClock(at=1100.0, margin=1.0)
    assert not clock(0, 50)  # the first call starts the clock
    now[0] = 1020.0
    assert not clock(40, 50)  # 0.5 s a step: 50 steps end at 1045
    now[0] = 1080.0
    assert clock(160, 50)  # ... at 1105, past the deadline: cool now
    assert Ends(None).cool_when() is None and isinstance(Ends(Deadline(1100.0)).cool_when(), CooldownClock)


def test_a_final_run_cut_by_the_deadline_after_its_cooldown_says_where_it_cooled() -> None:
    curve = {"1": {"kimg": 5.0}, "2": {"kimg": 8.0}}
    summary = TrialRecord({"curve": curve, "lineage": {"continued_from_kimg": 2.4, "cooldown_kimg": 6.4}})
    assert what_trained(summary, 10.0) == (8.0, "the deadline (its cooldown from 6.4 kimg)")


def test_an_hpo_run_plan_says_when_each_run_cools_down_and_that_the_final_run_continues() -> None:
    from hpo.run.phases.plan import schedule_words

    words = schedule_words("wsd", 2.0, 20.0)
    assert "a trial cools from 1.6 kimg" in words and "continues the winner's state at 1.6 kimg" in words
    assert "cools from ~16 kimg" in words and "never cut at full lr" in words


def test_a_continued_run_spreads_its_points_so_the_planned_count_falls_after_the_state_it_continues() -> None:
    from hpo.run.phases.final import spread_points

    assert spread_points(4, 10.0, 0.0) == 4
    assert spread_points(4, 10.0, 5.0) == 8  # points at every 1.25 kimg: 4 of them after 5 kimg
    assert spread_points(4, 3.0, 2.4) == 20


def test_a_workers_resolved_device_continues_under_a_specs_auto() -> None:
    """A worker stores the device it resolved (``cpu``); the final run's spec says ``auto``."""
    from hpo.spec.typed import to_plain
    from hpo.training.lineage import differing_fields
    from tests.conftest import tiny_config

    written = to_plain(tiny_config(device="cpu", lr_schedule="wsd"))
    here = "cuda" if torch.cuda.is_available() else "cpu"
    assert differing_fields(written, tiny_config(device="auto", lr_schedule="wsd")) == (
        set() if here == "cpu" else {"device"}
    )


def test_a_wsd_runs_deadline_cuts_only_a_late_run_not_one_whose_next_interval_would_pass_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(ends_module.time, "time", lambda: now[0])
    ends = Ends(Deadline(1100.0, last=1000.0))
    cosine, wsd = ends.rule({}, None), ends.rule({}, None, cooled=True)
    assert cosine is not None and wsd is not None
    now[0] = 1060.0
    assert cosine() and not wsd()  # one more 60 s interval would pass the deadline: only cosine stops
    now[0] = 1101.0
    assert wsd()
