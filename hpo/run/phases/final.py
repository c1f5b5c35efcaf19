"""The final run and its sweep: ``hpo train --from STUDY:WINNER`` (:mod:`hpo.run.train`) at the budget
that is left, resumed from its checkpoint after a stop; its sweep is the final sweep."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import optuna

from hpo.analysis.noise import Noise
from hpo.analysis.stopping import forecast, points_from_curve
from hpo.analysis.tables import duration
from hpo.records import TrialRecord
from hpo.run.scored_run import CHECKPOINT
from hpo.run.sizing import final_speed, final_train, what_trained
from hpo.run.split import SWEEP_MARGIN, final_kimg, final_num_evals
from hpo.run.state import FINAL, Run, publish, run_spec, search_study
from hpo.run.train import train_run
from hpo.service.study import require_spec


def final_plan(run: Run, study: optuna.Study) -> None:
    """The final run's budget, fixed once (a resumed run must train the same configuration): what the
    budget leaves after the final sweep and the export, at the winner's measured speed, its own
    evaluation points paid for first."""
    ledger, decisions = run.ledger, run.ledger.decisions
    trial = study.trials[decisions.winner or 0]
    record = TrialRecord.of(trial)
    kimg = record.budget_kimg or run_spec(run).train.kimg
    branch = lineage_of(run, record)
    decisions.continued_kimg = branch[1] if branch is not None else None
    ledger.phase("sweep").planned_s = round(SWEEP_MARGIN * record.score_seconds, 1)
    seconds = ledger.left() - ledger.planned_after("final")
    ledger.phase("final").planned_s = round(seconds, 1)
    speed = final_speed(record)
    points = final_num_evals(seconds, ledger.budget_s, speed.point_seconds)
    decisions.final_kimg = final_kimg(seconds=seconds, speed=speed, points=points, trial_kimg=kimg,
                                      already=decisions.continued_kimg or 0.0)  # fmt: skip
    decisions.final_num_evals = spread_points(points, decisions.final_kimg, decisions.continued_kimg or 0.0)
    run.save()


def spread_points(points: int, kimg: float, already: float) -> int:
    """Evaluation points over the whole of a run of ``kimg`` (they are evenly spaced) such that ``points``
    of them fall after the ``already`` trained kimg it continues: the ones before it are not run."""
    return math.ceil(points * kimg / (kimg - already)) if kimg > already else points


def replan_without_branch(run: Run, study: optuna.Study) -> None:
    """A final run planned on a branch state that is gone (removed between a stop and the re-run) and
    that has no checkpoint of its own yet is planned again, from scratch, rather than trained short."""
    decisions = run.ledger.decisions
    if decisions.continued_kimg is None or (run.out / FINAL / CHECKPOINT).exists():
        return
    if lineage_of(run, TrialRecord.of(study.trials[decisions.winner or 0])) is None:
        print(f"[final] the winner's state at {decisions.continued_kimg:g} kimg is gone: planning the final run again")
        decisions.final_kimg = decisions.continued_kimg = None


def drop_other_branches(run: Run, keep: Path | None) -> None:
    """The stable-phase states the final run does not continue (every other trial's, the decision's
    retrainings'): nothing else continues them, and each is a checkpoint's size on disk."""
    for path in (run.artifacts / "checkpoints").glob("*/trial-*-branch.pt"):
        if keep is None or path != keep:
            path.unlink(missing_ok=True)


def lineage_of(run: Run, record: TrialRecord) -> tuple[Path, float] | None:
    """The winner's stable-phase state (its path, its kimg) when it kept one (``lr_schedule: wsd``) and
    it is on this host: the final run continues it; else None, and the final run starts from scratch."""
    branch = record.branch
    if branch is None or not (run.artifacts / branch[0]).exists():
        return None
    return run.artifacts / branch[0], branch[1]


def summary_of(run: Run) -> TrialRecord:
    return TrialRecord(json.loads((run.out / FINAL / "summary.json").read_text(encoding="utf-8")))


def final(run: Run) -> None:
    """``hpo train --from STUDY:WINNER`` at the final budget into the run's ``final/`` (resumed from its
    checkpoint after a stop), which sweeps every sampling combination on the final weights."""
    study, _ = search_study(run)
    ledger, decisions = run.ledger, run.ledger.decisions
    run.start("final")
    replan_without_branch(run, study)
    if decisions.final_kimg is None:
        final_plan(run, study)
    branch = lineage_of(run, TrialRecord.of(study.trials[decisions.winner or 0]))
    drop_other_branches(run, branch[0] if branch is not None else None)
    start = (f"continuing its {decisions.continued_kimg:g} kimg" if decisions.continued_kimg is not None
             else "from scratch")  # fmt: skip
    print(f"[final] trial #{decisions.winner} at {decisions.final_kimg:g} kimg ({start}), {decisions.final_num_evals} "
          f"checkpoints, for ~{duration(ledger.phase('final').planned_s)}")  # fmt: skip
    fixed = final_train(decisions)
    deadline = time.time() + ledger.left() - ledger.planned_after("final")
    continue_from = branch[0] if branch is not None and decisions.continued_kimg is not None else None
    summary_json = train_run(None, fixed.overrides(), run.out / FINAL, source=f"{study.study_name}:{decisions.winner}",
                             storage=run.url, deadline=deadline, stop_when_copying=True,
                             continue_from=continue_from)  # fmt: skip
    print(json.dumps(summary_json))
    summary = summary_of(run)
    ledger.tick()
    sweep_s = min(summary.score_seconds, ledger.phase("final").spent_s)
    ledger.phase("final").spent_s -= sweep_s
    ledger.phase("sweep").spent_s += sweep_s
    decisions.value, decisions.metric = summary.run_value, require_metric(study)
    decisions.trained_kimg, decisions.ended_by = what_trained(summary, fixed.kimg)
    decisions.floor = summary.floor.score if summary.floor is not None else float("nan")
    decisions.stop = summary.stop.text if summary.stop is not None else ""
    decisions.bigger = bigger_budget(summary, decisions.metric)
    decisions.cooldown_kimg = summary.lineage[1]
    stop_kind = summary.stop.kind if summary.stop is not None else ""
    ledger.finish("final", note=f"#{decisions.winner} {decisions.trained()}; stop verdict: {stop_kind}")
    words = summary.sampling.words if summary.sampling else "?"
    combos = summary.combinations
    ledger.finish("sweep", note=f"{combos} combinations: {decisions.score_words()}, sampled at {words}")
    publish(run, study)


def bigger_budget(summary: TrialRecord, metric: str) -> str:
    """What a budget that trains twice as long would buy: the final run's own curve, power law fitted
    and forecast at twice its kimg. Optimistic: its earlier points were at a learning rate the cosine
    schedule had not yet decayed, so the fit is steeper than a ladder of separate runs measures."""
    points = points_from_curve(summary.points)
    if not points:
        return "no forecast: the final run scored no evaluation point"
    last, twice = points[-1], 2 * points[-1].kimg
    ahead = forecast(points, twice)
    if ahead.value is None:
        return ahead.text
    fitted = (f"{metric} {ahead.value:.3g} (80 % interval {ahead.low:.3g}–{ahead.high:.3g}) from its own curve of "
              f"{len(points)} points")  # fmt: skip
    noise = Noise(summary.curve_noise, 1)
    if last.score - ahead.value <= noise.tie_margin:  # within what re-scoring the same weights can move
        return (f"twice the final run's training ({twice:g} kimg) forecasts no gain beyond the noise: {fitted}, "
                f"against {last.score:.3g} at its last point (tie margin {noise.tie_margin:.2g})")  # fmt: skip
    return (f"twice the final run's training ({twice:g} kimg): {fitted}; optimistic, its earlier points trained at "
            "a higher learning rate (`hpo confirm --budgets` measures it)")  # fmt: skip


def require_metric(study: optuna.Study) -> str:
    return require_spec(study).score.metric_name


def sweep(run: Run) -> None:
    """The final sweep runs inside the final run's call; alone it is only reached after a stop between
    the two ledger writes, and the final run's summary already holds it."""
    run.ledger.finish("sweep")
