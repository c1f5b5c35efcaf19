"""pruner: rung, the freeze-thaw rule the replay's bound describes (docs/benchmarks.md "Pruners"):
every trial pauses at one evaluation point with its checkpoint kept, and once all n_trials have
reached it the best ``keep`` there are continued from their checkpoints to the end."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from hpo.errors import ConfigError, HpoError
from hpo.records import BASELINE_ATTR, TrialRecord
from hpo.report.data import best_vs_baseline, failure_groups, summarise_study
from hpo.service.pruning import PauseAtRung, make_pruner, rung_keep
from hpo.service.rung import continue_trial, decide
from hpo.service.status_view import progress_line
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume, progress, stored_spec
from hpo.service.trials import PAUSED, fail_reason, mark_ended, retry_history, root_number
from hpo.service.worker import Worker, WorkerOptions
from hpo.spec.loading import load_spec
from hpo.spec.spec import Spec
from tests.cli import hpo_in_process
from tests.service_helpers import write_spec

RUNG: dict[str, Any] = {"name": "rung", "min_resource": 1}


def rung_spec(tmp_path: Path, n_trials: int = 5, **pruner: Any) -> Spec:
    return load_spec(
        write_spec(tmp_path, study={"name": "rung", "n_trials": n_trials, "max_retries": 2}, pruner={**RUNG, **pruner})
    )


def paused_trial(study: optuna.Study, metric: float, step: int = 1) -> int:
    """A trial stopped at the rung as the objective stops it."""
    trial = study.ask({"lr": FloatDistribution(1e-4, 1e-2, log=True)})
    trial.report(metric, step=step)
    mark_ended(trial, PAUSED)
    study.tell(trial, state=TrialState.PRUNED)
    return trial.number


@pytest.mark.parametrize(("n_trials", "keep"), [(10, 4), (30, 7), (100, 23)])
def test_the_rung_at_one_eighth_continues_the_most_trials_that_still_save_three_times(
    tmp_path: Path, n_trials: int, keep: int
) -> None:
    """Doubling points 1/16, 1/8, 1/4, 1/2, 1; the rung at 1/8: n/8 + keep * 7/8 <= n/3, and never
    fewer than 4 (at 10 trials that costs 10/4.75 = 2.1x, not 3x: a report needs complete trials)."""
    s = load_spec(
        write_spec(
            tmp_path,
            study={"n_trials": n_trials},
            train={"kimg": 3.2, "num_evals": 5, "eval_spacing": "doubling"},
            pruner={**RUNG, "min_resource": 2},
        )
    )
    assert rung_keep(s) == keep
    cost = n_trials / 8 + keep * 7 / 8
    assert n_trials / cost >= 3.0 or keep == 4
    explicit = load_spec(write_spec(tmp_path, study={"n_trials": n_trials}, pruner={**RUNG, "keep": 3}))
    assert rung_keep(explicit) == 3


def test_a_rung_at_the_last_point_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"pruner.min_resource.*must come before the last of train.num_evals=2"):
        load_spec(write_spec(tmp_path, pruner={**RUNG, "min_resource": 2}))


def test_the_rung_pauses_every_trial_there_but_never_a_continuation(tmp_path: Path) -> None:
    pruner = make_pruner(rung_spec(tmp_path))
    assert isinstance(pruner, PauseAtRung)
    study = optuna.create_study(pruner=pruner)
    first = study.ask()
    first.report(0.5, step=1)
    assert first.should_prune()  # however good: the decision waits for the others
    continuation = study.ask()
    continuation.set_user_attr("continues", 0)
    continuation.report(0.5, step=1)
    assert not continuation.should_prune()


def test_the_rung_decides_once_all_trials_reached_it_and_queues_the_best_exactly_once(tmp_path: Path) -> None:
    spec = rung_spec(tmp_path, n_trials=5, keep=2)
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    study, _ = create_or_resume(spec, open_storage(url))
    for metric in (0.9, 0.3, 0.7, 0.2):
        paused_trial(study, metric)
    running = study.ask({"lr": FloatDistribution(1e-4, 1e-2, log=True)})
    assert decide(study, spec, study.get_trials()) == []  # one trial has not reached the rung
    p = progress(study, 5)
    assert p.undecided == 4 and not p.done
    running.report(0.25, step=1)
    mark_ended(running, PAUSED)
    study.tell(running, state=TrialState.PRUNED)
    p = progress(study, 5)
    assert p.finished == 5 and p.undecided == 5 and not p.done  # all paused: done only after the decision

    assert decide(study, spec, study.get_trials()) == [3, 4]  # 0.2 and 0.25 at the rung
    assert decide(study, spec, study.get_trials()) == []  # idempotent: a second worker queues nothing
    continuations = [t for t in study.get_trials() if t.state == TrialState.WAITING]
    assert [TrialRecord.of(t).continues for t in continuations] == [3, 4]
    assert [root_number(t) for t in continuations] == [3, 4]  # so each resumes its paused trial's checkpoint
    assert [retry_history(t) for t in continuations] == [[3], [4]]
    assert all(fail_reason(t) is None for t in continuations)
    p = progress(study, 5)
    assert (p.pruned, p.continued, p.undecided, p.waiting, p.done) == (3, 2, 0, 2, False)


def test_a_baseline_outside_the_best_at_the_rung_is_stopped_and_the_report_says_so(tmp_path: Path) -> None:
    """The baseline ranks like any trial (kept whatever its rank, it cost the 10-trial replay 0.215
    seed sd of regret against 0.086): stopped, the report says why it has nothing to compare with."""
    spec = rung_spec(tmp_path, n_trials=3, keep=1)
    study, _ = create_or_resume(spec, open_storage(f"sqlite:///{tmp_path / 'hpo.db'}"))
    study.enqueue_trial({"lr": 1e-3}, user_attrs={BASELINE_ATTR: True})
    for metric in (0.9, 0.3, 0.7):  # the baseline (trial 0) is last at the rung
        paused_trial(study, metric)
    assert decide(study, spec, study.get_trials()) == [1]
    continuation = study.ask()
    study.tell(continuation, 3.5)
    summary = summarise_study(study, study.get_trials())
    assert best_vs_baseline(summary) == (
        "The baseline (trial #0) was stopped by the pruner (paused_at_rung), so there is no complete baseline to "
        "compare with."
    )


def test_a_study_that_took_its_rung_decision_refuses_a_new_n_trials_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    spec = rung_spec(tmp_path, n_trials=3, keep=1)
    study, _ = create_or_resume(spec, open_storage(url))
    for metric in (0.3, 0.2):
        paused_trial(study, metric)
    grown = rung_spec(tmp_path, n_trials=4, keep=1)
    create_or_resume(grown, open_storage(url))  # before the decision a study may still grow
    for metric in (0.5, 0.4):
        paused_trial(study, metric)
    assert decide(study, grown, study.get_trials()) == [1]
    with pytest.raises(HpoError, match=r"rung decision at n_trials=4 .* launch with --name NAME") as err:
        create_or_resume(rung_spec(tmp_path, n_trials=6, keep=1), open_storage(url))
    assert "\n" not in str(err.value)
    create_or_resume(grown, open_storage(url))  # the same count resumes


def test_hpo_launch_of_a_grown_rung_study_after_its_decision_says_so_in_one_line_and_keeps_it(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    spec = rung_spec(tmp_path, n_trials=3, keep=1)
    study, _ = create_or_resume(spec, open_storage(url))
    for metric in (0.3, 0.2, 0.4):
        paused_trial(study, metric)
    assert decide(study, spec, study.get_trials()) == [1]
    before = [(t.number, t.state) for t in study.get_trials()]
    grown = write_spec(
        tmp_path, "grown.yaml", study={"name": "rung", "n_trials": 6, "max_retries": 2}, pruner={**RUNG, "keep": 1}
    )
    done = hpo_in_process("launch", str(grown), "--workers", "0", "--skip-doctor", url=url, cwd=tmp_path)
    assert done.returncode != 0
    assert "rung decision at n_trials=3" in done.stderr and "--name NAME" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    after = optuna.load_study(study_name="rung", storage=url)
    assert [(t.number, t.state) for t in after.get_trials()] == before
    kept = stored_spec(after)
    assert kept is not None and kept.study.n_trials == 3


def test_a_decision_cut_short_by_a_killed_worker_is_finished_by_the_next(tmp_path: Path) -> None:
    spec = rung_spec(tmp_path, n_trials=4, keep=3)
    study, _ = create_or_resume(spec, open_storage(f"sqlite:///{tmp_path / 'hpo.db'}"))
    for metric in (0.4, 0.1, 0.3, 0.2):
        paused_trial(study, metric)
    continue_trial(study, study.get_trials()[1])  # the first worker queued one continuation, then died
    assert decide(study, spec, study.get_trials()) == [3, 2]
    continued = sorted(TrialRecord.of(t).continues or -1 for t in study.get_trials() if t.state == TrialState.WAITING)
    assert continued == [1, 2, 3]


def test_a_real_study_pauses_every_trial_and_continues_the_best_from_their_checkpoints(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Real training (the tiny spec's two evaluation points, the rung at the first) through a worker:
    five trials pause, the best two by the metric there resume from their checkpoints and complete,
    the other three checkpoints are removed, and the study is done."""
    spec = rung_spec(tmp_path, n_trials=5, keep=2)
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    study, _ = create_or_resume(spec, open_storage(url))
    artifacts = tmp_path / "art"
    opts = WorkerOptions(url=url, study="rung", exit_when_idle=True, artifact_dir=artifacts, poll_seconds=0.1)
    with caplog.at_level(logging.INFO):
        assert Worker(opts).serve() == 7
    trials = study.get_trials()
    paused = [t for t in trials if fail_reason(t) == PAUSED]
    assert len(paused) == 5 and all(t.state == TrialState.PRUNED and t.last_step == 1 for t in paused)
    best = sorted(paused, key=lambda t: t.intermediate_values[1])[:2]
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert sorted(TrialRecord.of(t).continues or -1 for t in done) == sorted(t.number for t in best)
    assert all(t.last_step == 2 and t.value is not None for t in done)
    assert caplog.text.count("resumed from") == 2  # from the paused trial's checkpoint, not from scratch
    assert not list((artifacts / "checkpoints").rglob("*.pt"))  # the others' removed, the continued ones' done
    p = progress(study, 5)
    assert p.done and (p.complete, p.pruned, p.continued) == (2, 3, 2)
    stopped = sorted(t.number for t in paused if t not in best)
    (group,) = failure_groups(trials)  # the report's "why trials stopped": the continued two are not there
    assert (group.reason, group.trials) == (PAUSED, stopped)
    summary = summarise_study(study, trials)
    assert summary.counts["continued"] == 2 and summary.saved_seconds > 0  # the three stopped at the rung
    assert (
        progress_line(p)
        == "5/5 finished: 2 complete, 3 pruned, 2 continued from the rung, 0 failed, 0 running | best FID "
        + f"{p.best:.4g}"
    )
