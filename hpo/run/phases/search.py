"""The preflight (``hpo doctor --fast``), the search and the decision: studies served by local workers
(:mod:`hpo.service.local`) until they are done or their phase's time is up; the decision retrains the
best configurations on fresh seeds (the confirmation companion) when the budget affords it."""

from __future__ import annotations

import time
from dataclasses import dataclass

import optuna

from hpo.analysis.ranking import best_first
from hpo.analysis.tables import duration
from hpo.companions.base import Request
from hpo.companions.confirm import CONFIRM, ConfirmReading
from hpo.doctor.preflight import preflight_doctor
from hpo.errors import HpoError
from hpo.records import TrialRecord
from hpo.run.options import worker_count
from hpo.run.sizing import complete_seconds
from hpo.run.split import decide_runs
from hpo.run.state import SPEC_FILE, Run, publish, run_spec, search_study
from hpo.service.local import LocalWorkers, follow, host_fault, start_workers, stop_workers
from hpo.service.study import progress, require_spec
from hpo.service.trials import own_trials


@dataclass(frozen=True)
class Choice:
    """The decision: the trial the final run trains, and why it (the ledger keeps both)."""

    winner: int
    why: str


def preflight(run: Run) -> None:
    run.start("preflight")
    if not run.opts.doctor:
        run.ledger.finish("preflight", state="skipped", note="--skip-doctor")
        return
    print(f"[preflight] hpo doctor --fast on {run.out / SPEC_FILE}")
    preflight_doctor(run_spec(run), run.artifacts, worker_count(run.opts))
    run.ledger.finish("preflight", note="hpo doctor --fast passed")


def serve(run: Run, study: optuna.Study, phase: str) -> None:
    """Local workers on ``study`` until it is done or ``phase``'s time is up (what the budget leaves
    after the phases planned later); workers still running then are stopped (their trials queued)."""
    opts, spec = run.opts, require_spec(study)
    plan = LocalWorkers(worker_count(opts), threads=opts.threads, gpus=opts.gpus).plan(run.url)
    seconds = max(0.0, run.ledger.left() - run.ledger.planned_after(phase))
    run.ledger.phase(phase).planned_s = round(run.ledger.phase(phase).spent_now() + seconds, 1)
    print(f"[{phase}] {len(plan)} local worker(s) on study {study.study_name!r} for at most {duration(seconds)}")
    procs = start_workers(run.url, study.study_name, plan, threads=opts.threads, artifacts=run.artifacts, detach=False)
    try:
        follow(study, spec.study, spec.score.metric_name, procs, until=time.monotonic() + seconds,
               prefix=f"[{phase}] ")  # fmt: skip
    finally:
        stop_workers(procs)  # SIGTERM: a running trial is queued for retry
    fault = host_fault(procs, f"{phase} phase")
    if fault is not None:
        raise fault


def search(run: Run) -> None:
    study, _ = search_study(run)
    run.start("search")
    publish(run, study)
    serve(run, study, "search")
    p = progress(study, run.ledger.decisions.n_trials or 0)
    if p.complete == 0:
        raise HpoError(
            f"the search completed no trial in {duration(run.ledger.phase('search').spent_now())} (`hpo status "
            f"{study.study_name} --storage {run.url}` says why); a larger --budget gives it more time"
        )
    best = f"; best {p.best:.4g}" if p.best is not None else ""
    run.ledger.finish("search", note=f"{p.complete} complete, {p.pruned} pruned, {p.failed} failed{best}")
    publish(run, study)


def decide(run: Run) -> None:
    """Retrain the best configurations on fresh seeds (``hpo confirm``) when the budget affords it; the
    winner is the best mean over fresh seeds, else the search's best."""
    study, store = search_study(run)
    ledger, decisions = run.ledger, run.ledger.decisions
    run.start("decide")
    ranked = best_first(own_trials(study))
    if decisions.confirm_top is None:
        seconds = (ledger.left() - ledger.planned_after("decide")) * worker_count(run.opts)  # workers side by side
        decisions.confirm_top, decisions.confirm_seeds = decide_runs(seconds, complete_seconds(ranked), len(ranked))
        run.save()
    if not decisions.confirm_top:
        decisions.winner = ranked[0].number
        decisions.winner_why = f"the search's best ({numbered(ranked[0])}, {ranked[0].value:.4g})"
        ledger.finish("decide", state="skipped", note="no room for 2 configurations and their baseline on fresh seeds")
        print(f"[decide] skipped: {ledger.phase('decide').note}; the final run trains {decisions.winner_why}")
        return
    request = Request(top=decisions.confirm_top, seeds=decisions.confirm_seeds or 1)
    companion = CONFIRM.create(study, store, request)
    serve(run, companion, "decide")
    reading = CONFIRM.read(study, companion, require_spec(study).score.metric_name)
    choice = chosen(ranked, reading)
    decisions.winner, decisions.winner_why = choice.winner, choice.why
    ledger.finish("decide", note=decisions.winner_why)
    publish(run, study)


def numbered(t: optuna.trial.FrozenTrial) -> str:
    """``#1 (known start)`` for an enqueued start, ``#7`` for any other trial."""
    start = TrialRecord.of(t).baseline_label
    return f"#{t.number}" + (f" ({start})" if start else "")


def chosen(ranked: list[optuna.trial.FrozenTrial], reading: ConfirmReading) -> Choice:
    """The best mean over fresh seeds among the retrained configurations, else the search's best."""
    scored = [c for c in reading.verdict.configs if c.values]
    if not scored:
        return Choice(ranked[0].number, "the search's best (no fresh seed finished)")
    best = min(scored, key=lambda c: c.mean)
    who = next((numbered(t) for t in ranked if t.number == best.trial), f"#{best.trial}")
    return Choice(
        best.trial,
        f"{who}: {best.mean:.4g} over {len(best.values)} fresh seed(s), the best of {len(scored)} "
        f"retrained; {reading.verdict.text}",
    )
