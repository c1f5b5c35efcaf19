"""The phases of ``hpo run``, each an existing part: the planner of ``hpo init`` (timed here, sized to
the budget by :mod:`hpo.run.split`), the preflight doctor of ``hpo launch``, the study and its local
workers, the confirmation companion of ``hpo confirm``, ``hpo train --from STUDY:TRIAL`` at the budget
that is left (its sweep is the final sweep), and ``hpo export``'s files. Each reads what the phases
before it left in the ledger and the run's folder, so a phase can be run again after a stop."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from hpo.analysis.ranking import best_first
from hpo.commands.outputs import write_output
from hpo.errors import HpoError
from hpo.records import RUN_ATTR, VALUE_ATTR, TrialRecord
from hpo.run.budget import duration
from hpo.run.ledger import Decisions, Ledger
from hpo.run.split import (
    SWEEP_MARGIN,
    Costs,
    SearchPlan,
    Speed,
    Split,
    decide_runs,
    final_kimg,
    final_num_evals,
    plan_search,
)
from hpo.service.trials import own_trials
from hpo.spec.rules import min_eval_steps

if TYPE_CHECKING:
    from hpo.commands.launch import LocalWorker
    from hpo.commands.run import Run, RunOptions
    from hpo.planning.plan import Plan
    from hpo.spec.spec import Spec

SPEC_FILE = "spec.yaml"
FINAL, MODEL, REPORT = "final", "model", "report.html"
PREFLIGHT_SECONDS = 60.0  # planned for `hpo doctor --fast` (measured ~20-40 s on 2 CPU cores at 16-32 px)


def new_ledger(opts: RunOptions, budget_s: float) -> Ledger:
    return Ledger(folder=str(opts.images.resolve()), budget_s=budget_s, study="", image_size=opts.image_size)


# --- plan ---------------------------------------------------------------------------------------------


def first_plan(opts: RunOptions) -> Plan:
    """``hpo init``'s plan for the folder on this machine (its survey, network, batch sizes, scoring)."""
    from hpo.commands.init import default_name, this_machine, weights_here
    from hpo.doctor.survey import survey_folder
    from hpo.planning.plan import choose_image_size, plan_spec
    from hpo.spec.rules import check_study_name

    survey = survey_folder(opts.images)
    name = default_name(opts.images, choose_image_size(survey, opts.image_size))
    check_study_name(name, key="the folder's name")
    return plan_spec(survey, this_machine(None), name=name, image_size=opts.image_size, weights_present=weights_here())


def measure(spec: Spec, plan: Plan) -> Costs:
    """A trial of ``spec`` timed here as ``hpo init`` times it: two training steps at the smallest batch
    size, two sampling passes at the score's batch, on random images of the folder's shape."""
    from hpo.doctor.model_checks import stand_in_data, trial_cost, trial_seconds
    from hpo.doctor.run import base_config, batch_size_configs
    from hpo.training.runtime import resolve_device

    cfg = base_config(spec)
    device = resolve_device(cfg.device)
    configs = batch_size_configs(spec, cfg.replace(device=str(device)))
    smallest, largest = configs[0], max(c.batch_size for c in configs)
    data = stand_in_data(smallest.batch_size, plan.image_size, max(plan.survey.num_classes, 1))
    cost = trial_cost(
        spec.sampling, spec.score, smallest, data, device, train_seconds=trial_seconds(smallest, data, device)
    )
    min_kimg = min_eval_steps(smallest.num_evals, smallest.eval_spacing) * largest / 1000
    first = smallest.eval_fractions()[0]
    return Costs(smallest.kimg, cost.train_seconds, cost.sweep_seconds, first, min_kimg)


def sized_plan(plan: Plan, search: SearchPlan) -> Plan:
    """``plan`` with the trial budget and count the budget buys, and the final run's forecast as target."""
    per_second = search.trial.kimg / search.trial.train_s
    target = round(max(search.trial.kimg, search.shares.final_s * per_second), 1)
    budget = dataclasses.replace(plan.budget, kimg=search.trial.kimg, target_kimg=target)
    return dataclasses.replace(plan, n_trials=search.n_trials, budget=budget)


def make_plan(opts: RunOptions, budget_s: float, spent_s: float) -> tuple[Plan, SearchPlan, Costs, str]:
    """Plan, time a trial of the planned spec, size the search to the budget; the sized spec's text
    (loaded and validated, written nowhere). Refused in one line when the budget is below the minimum."""
    from hpo.planning.spec_yaml import plan_yaml
    from hpo.spec.loading import load_spec

    plan = dataclasses.replace(first_plan(opts), seed=opts.seed)
    data_path = str(opts.images.resolve())
    with tempfile.TemporaryDirectory() as tmp:
        path = write_output(Path(tmp) / SPEC_FILE, plan_yaml(plan, data_path))
        costs = measure(load_spec(path), plan)
        overhead = spent_s + PREFLIGHT_SECONDS
        search = plan_search(costs, opts.split, left_s=budget_s - overhead, budget_s=budget_s, overhead_s=overhead,
                             workers=worker_count(opts))  # fmt: skip
        plan = sized_plan(plan, search)
        text = plan_yaml(plan, data_path)
        load_spec(write_output(path, text))  # what will be written loads and validates
    return plan, search, costs, text


def plan_lines(plan: Plan, search: SearchPlan, costs: Costs, ledger: Ledger) -> list[str]:
    trial = search.trial
    return [
        f"[plan] {plan.survey.words()}",
        f"  {plan.image_size} px, {plan.network.parameters / 1e6:.1f}M parameters, batch sizes "
        f"{', '.join(map(str, plan.search.batch_sizes))}, {plan.scoring.features} FID on {plan.scoring.num_samples} "
        "samples",
        f"  a trial: {trial.kimg:g} kimg ({costs.kimg:g} planned by hpo init), timed here at "
        f"{duration(trial.complete_s)} complete ({duration(trial.train_s)} training, {duration(trial.sweep_s)} "
        f"sampling sweep); {search.n_trials} trials at most",
        f"  the final run: ~{plan.budget.target_kimg:g} kimg in {duration(search.shares.final_s)}, re-planned from "
        "the winner's measured speed",
        f"  {plan.data_words()}",
        *ledger.lines(),
    ]


def plan_run(opts: RunOptions, budget_s: float) -> tuple[Ledger, str, list[str]]:
    """The plan phase of a new run, in memory (a refusal leaves nothing behind): the ledger with every
    phase planned, the spec's text, and the lines that say what was planned."""
    ledger = new_ledger(opts, budget_s)
    ledger.start("plan")
    plan, search, costs, text = make_plan(opts, budget_s, 0.0)
    ledger.tick()
    plan_planned(ledger, ledger.phase("plan").spent_s, search)
    ledger.study = plan.name
    ledger.decisions.trial_kimg, ledger.decisions.n_trials = search.trial.kimg, search.n_trials
    ledger.finish("plan", note=f"{search.n_trials} trials of {search.trial.kimg:g} kimg")
    return ledger, text, plan_lines(plan, search, costs, ledger)


def plan_only(opts: RunOptions, budget_s: float, out: Path) -> list[str]:
    """What ``--plan-only`` prints: the plan and the ledger it would start with; nothing is written."""
    _, _, lines = plan_run(opts, budget_s)
    return [*lines, f"run it: {command_line(opts, budget_s, out)}"]


def command_line(opts: RunOptions, budget_s: float, out: Path) -> str:
    """The ``hpo run`` command that runs (or continues) this run: every option that shapes the plan."""
    given = {
        "--image-size": opts.image_size, "--storage": opts.storage, "--workers": opts.workers,
        "--per-gpu": None if opts.per_gpu == 1 else opts.per_gpu,
        "--threads": opts.threads, "--gpus": None if opts.gpus == "all" else opts.gpus,
        "--seed": opts.seed or None, "--split": None if opts.split == Split() else opts.split.words(),
    }  # fmt: skip
    options = "".join(f" {k} {v}" for k, v in given.items() if v is not None)
    skip = "" if opts.doctor else " --skip-doctor"
    return f"hpo run {opts.images} --budget {duration(budget_s)} -o {out}{options}{skip}"


def plan_planned(ledger: Ledger, plan_s: float, search: SearchPlan) -> None:
    planned = {
        "plan": plan_s, "preflight": PREFLIGHT_SECONDS, "search": search.shares.search_s,
        "decide": search.shares.decide_s, "final": search.shares.final_s, "sweep": search.shares.sweep_s,
        "export": search.shares.export_s,
    }  # fmt: skip
    for name, seconds in planned.items():
        ledger.phase(name).planned_s = round(seconds, 1)


# --- preflight ----------------------------------------------------------------------------------------


def run_spec(run: Run) -> Spec:
    from hpo.spec.loading import load_spec

    return load_spec(run.out / SPEC_FILE)


def preflight(run: Run) -> None:
    from hpo.commands.launch import preflight_doctor

    run.start("preflight")
    if not run.opts.doctor:
        run.ledger.finish("preflight", state="skipped", note="--skip-doctor")
        return
    print(f"[preflight] hpo doctor --fast on {run.out / SPEC_FILE}")
    preflight_doctor(run_spec(run))
    run.ledger.finish("preflight", note="hpo doctor --fast passed")


# --- search and decide: studies served by local workers ----------------------------------------------


def search_study(run: Run) -> tuple[optuna.Study, Any]:
    from hpo.service.storage import open_storage
    from hpo.service.study import create_or_resume

    store = open_storage(run.url)
    study, _ = create_or_resume(run_spec(run), store, name=run.ledger.study)
    return study, store


def publish(run: Run, study: optuna.Study) -> None:
    """The ledger on the search study, for ``hpo status``."""
    with run.lock:
        study.set_user_attr(RUN_ATTR, run.ledger.to_dict())


def serve(run: Run, study: optuna.Study, phase: str) -> None:
    """Local workers on ``study`` until it is done or ``phase``'s time is up (what the budget leaves
    after the phases planned later); workers still running then are stopped (their trials queued)."""
    from hpo.commands.launch import LocalWorkers, follow, start_workers
    from hpo.service.study import require_spec

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
        stop(procs)


def worker_count(opts: RunOptions) -> int:
    """``--workers``, else ``--per-gpu`` on each GPU ``--gpus`` names, else 1 (the CPU), whatever the
    storage: a run serves its own study, other hosts' ``hpo worker`` may join it."""
    from hpo.commands.worker import parse_gpus

    if opts.workers is not None:
        return opts.workers
    return opts.per_gpu * max(1, len(parse_gpus(opts.gpus)))


def stop(procs: list[LocalWorker]) -> None:
    for w in procs:
        if w.proc.poll() is None:
            w.proc.terminate()  # SIGTERM: a running trial is queued for retry
    for w in procs:
        w.proc.wait()


def search(run: Run) -> None:
    from hpo.service.study import progress

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


def complete_seconds(ranked: list[optuna.trial.FrozenTrial]) -> float:
    """What a retrained configuration costs on this machine: training and sweep as measured in the search,
    the most of the best 3 (the ones the decision retrains; their batch sizes set their speed)."""
    return max(
        TrialRecord.of(t).number("train_seconds") + TrialRecord.of(t).number("score_seconds") for t in ranked[:3]
    )


def decide(run: Run) -> None:
    """Retrain the best configurations on fresh seeds (``hpo confirm``) when the budget affords it; the
    winner is the best mean over fresh seeds, else the search's best."""
    from hpo.companions.base import Request
    from hpo.companions.confirm import CONFIRM
    from hpo.service.study import require_spec

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
        decisions.winner_why = f"the search's best (#{ranked[0].number}, {ranked[0].value:.4g})"
        ledger.finish("decide", state="skipped", note="no room for 2 configurations and their baseline on fresh seeds")
        print(f"[decide] skipped: {ledger.phase('decide').note}; the final run trains {decisions.winner_why}")
        return
    request = Request(top=decisions.confirm_top, seeds=decisions.confirm_seeds or 1)
    companion = CONFIRM.create(study, store, request)
    serve(run, companion, "decide")
    reading = CONFIRM.read(study, companion, require_spec(study).score.metric_name)
    scored = [c for c in reading.verdict.configs if c.values]
    if not scored:
        decisions.winner, decisions.winner_why = ranked[0].number, "the search's best (no fresh seed finished)"
    else:
        best = min(scored, key=lambda c: c.mean)
        decisions.winner = best.trial
        decisions.winner_why = (
            f"#{best.trial}: {best.mean:.4g} over {len(best.values)} fresh seed(s), the best of {len(scored)} "
            f"retrained; {reading.verdict.text}"
        )
    ledger.finish("decide", note=decisions.winner_why)
    publish(run, study)


# --- the final run and its sweep -----------------------------------------------------------------------


def final_plan(run: Run, study: optuna.Study) -> None:
    """The final run's budget, fixed once (a resumed run must train the same configuration): what the
    budget leaves after the final sweep and the export, at the winner's measured speed, its own
    evaluation points paid for first."""
    ledger, decisions = run.ledger, run.ledger.decisions
    trial = study.trials[decisions.winner or 0]
    record = TrialRecord.of(trial)
    kimg = record.budget_kimg or run_spec(run).train.kimg
    ledger.phase("sweep").planned_s = round(SWEEP_MARGIN * record.number("score_seconds"), 1)
    seconds = ledger.left() - ledger.planned_after("final")
    ledger.phase("final").planned_s = round(seconds, 1)
    speed = final_speed(record)
    decisions.final_num_evals = final_num_evals(seconds, ledger.budget_s, speed.point_seconds)
    decisions.final_kimg = final_kimg(seconds=seconds, speed=speed, points=decisions.final_num_evals, trial_kimg=kimg)
    run.save()


def speed_of(record: TrialRecord) -> Speed:
    """How fast a trial's or an ``hpo train`` run's configuration trained (its ``RunRecord`` keys)."""
    return Speed.measured(
        seconds=record.number("train_seconds"), images_per_second=record.number("images_per_second"),
        eval_seconds=record.number("eval_seconds"), eval_points=int(record.number("eval_points")),
    )  # fmt: skip


def final_speed(trial: TrialRecord) -> Speed:
    """The speed of a final run of ``trial``'s configuration: its training rate, and points that cost
    the trial's own plus scoring its best combination at the full count, which a final run does at
    each point (the watched score and the copy check) and a trial does not. On shapes at 16 px a
    trial's point took 2.3 s and the final run's 9.3 s; sized by the trial's, the final run was cut by
    its deadline at 78 % of its kimg, before its learning rate had decayed."""
    speed = speed_of(trial)
    return Speed(speed.kimg_per_second, speed.point_seconds + trial.combination_seconds(trial.sampling))


def final_train(decisions: Decisions) -> dict[str, float | str]:
    """The final run's budget as planned, and the warm-up and EMA half-life the planner gives a run of
    that budget: the trial's (1/20 of a trial's kimg) would average a tenfold longer run over too little."""
    from hpo.planning.spec_yaml import ema_halflife_kimg, warmup_kimg

    kimg, num_evals = decisions.final_kimg, decisions.final_num_evals
    if kimg is None or num_evals is None:
        raise HpoError("the ledger holds no final run's budget yet; its final phase plans one when it starts")
    return {
        "kimg": kimg,
        "num_evals": num_evals,
        "eval_spacing": "even",
        "warmup_kimg": warmup_kimg(kimg),
        "ema_halflife_kimg": ema_halflife_kimg(kimg),
    }  # fmt: skip (checkpoints at even intervals)


def summary_of(run: Run) -> TrialRecord:
    return TrialRecord(json.loads((run.out / FINAL / "summary.json").read_text(encoding="utf-8")))


def final(run: Run) -> None:
    """``hpo train --from STUDY:WINNER`` at the final budget into the run's ``final/`` (resumed from its
    checkpoint after a stop), which sweeps every sampling combination on the final weights."""
    from hpo.commands.train import run_train

    study, _ = search_study(run)
    ledger, decisions = run.ledger, run.ledger.decisions
    run.start("final")
    if decisions.final_kimg is None:
        final_plan(run, study)
    print(f"[final] trial #{decisions.winner} at {decisions.final_kimg:g} kimg, {decisions.final_num_evals} "
          f"checkpoints, for ~{duration(ledger.phase('final').planned_s)}")  # fmt: skip
    fixed = final_train(decisions)
    overrides = [f"train.{k}={v}" for k, v in fixed.items()]
    deadline = time.time() + ledger.left() - ledger.planned_after("final")
    run_train(None, overrides, run.out / FINAL, source=f"{study.study_name}:{decisions.winner}", storage=run.url,
              deadline=deadline, stop_when_copying=True)  # fmt: skip
    summary = summary_of(run)
    ledger.tick()
    sweep_s = min(summary.number("score_seconds"), ledger.phase("final").spent_s)
    ledger.phase("final").spent_s -= sweep_s
    ledger.phase("sweep").spent_s += sweep_s
    decisions.value, decisions.metric = summary.number(VALUE_ATTR), require_metric(study)
    decisions.floor = summary.floor.score if summary.floor is not None else float("nan")
    decisions.stop = summary.stop.text if summary.stop is not None else ""
    decisions.bigger = bigger_budget(summary, decisions.metric)
    stop_kind = summary.stop.kind if summary.stop is not None else ""
    ledger.finish("final", note=f"#{decisions.winner} {trained_words(summary, float(fixed['kimg']))}; stop verdict: "
                                f"{stop_kind}")  # fmt: skip
    words = summary.sampling.words if summary.sampling else "?"
    combos = int(summary.number("combinations"))
    ledger.finish("sweep", note=f"{combos} combinations: {decisions.metric} {decisions.value:.4g} at {words}")
    publish(run, study)


def trained_words(summary: TrialRecord, planned_kimg: float) -> str:
    """``at 45.7 kimg``, or what ended it where: ``ended by the deadline at 30.2 of 45.7 kimg``, or
    ``ended by the stop verdict (copying since 12 kimg) at 20.4 of 45.7 kimg``."""
    reached = summary.last_point("kimg") or planned_kimg
    if reached >= planned_kimg * 0.999:
        return f"at {planned_kimg:g} kimg"
    stop = summary.stop
    if stop is not None and stop.kind == "copying":
        why = f"the stop verdict (copying since {stop.since_kimg or 0.0:.3g} kimg)"
    else:
        why = "the deadline"
    return f"ended by {why} at {reached:g} of {planned_kimg:g} kimg"


def bigger_budget(summary: TrialRecord, metric: str) -> str:
    """What a budget that trains twice as long would buy: the final run's own curve, power law fitted
    and forecast at twice its kimg. Optimistic: its earlier points were at a learning rate the cosine
    schedule had not yet decayed, so the fit is steeper than a ladder of separate runs measures."""
    from hpo.analysis.noise import Noise
    from hpo.analysis.stopping import forecast, points_from_curve

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
    from hpo.service.study import require_spec

    return require_spec(study).score.metric_name


def sweep(run: Run) -> None:
    """The final sweep runs inside the final run's call; alone it is only reached after a stop between
    the two ledger writes, and the final run's summary already holds it."""
    run.ledger.finish("sweep")


# --- export -------------------------------------------------------------------------------------------


def export(run: Run) -> None:
    """``hpo export``'s three files from the final run, its sample grid, the ledger beside them, and the
    search study's report."""
    from hpo.commands.export import Winner, fixed_spec, network_info, write_export
    from hpo.commands.train import BEST_WEIGHTS
    from hpo.report.render import write_report
    from hpo.service.study import require_spec
    from hpo.spec.spec import spec_from_dict
    from hpo.training.checkpoint import load_checkpoint

    study, store = search_study(run)
    ledger, decisions = run.ledger, run.ledger.decisions
    run.start("export")
    summary, trial = summary_of(run), study.trials[decisions.winner or 0]
    sampling = summary.sampling
    if sampling is None:
        raise HpoError(f"{run.out / FINAL / 'summary.json'} names no best sampling; remove {run.out / FINAL} and "
                       "re-run to train the final model again")  # fmt: skip
    params = {**trial.params, **final_train(decisions)}
    spec = spec_from_dict(fixed_spec(require_spec(study), params, sampling), file=f"study {study.study_name}")
    provenance = {"study": study.study_name, "trial": trial.number, VALUE_ATTR: decisions.value,
                  "metric_name": decisions.metric, "run": str(run.out)}  # fmt: skip
    winner = Winner(spec, sampling, network_info(study, spec), provenance)
    model = run.out / MODEL
    write_export(model, winner, load_checkpoint(run.out / FINAL / BEST_WEIGHTS),
                 written_by=f"`hpo run {run.opts.images}`: trial #{trial.number} trained at {decisions.final_kimg:g} "
                            f"kimg, its best sampling combination ({sampling.words})")  # fmt: skip
    shutil.copyfile(run.out / FINAL / "samples.png", model / "samples.png")
    decisions.model = str(model)
    ledger.finish("export", note=f"{model}, and the report {run.out / REPORT}")
    write_output(model / "ledger.json", json.dumps(ledger.to_dict(), indent=2) + "\n")
    publish(run, study)
    write_report(study, store, run.out / REPORT, artifact_dir=run.artifacts)  # after the ledger is complete


def closing_lines(run: Run) -> list[str]:
    d = run.ledger.decisions
    return [
        f"model: {d.model} ({d.metric} {d.value:.4g}; real held-out images {d.floor:.4g}, the floor)",
        f"winner: {d.winner_why}",
        f"stop verdict: {d.stop}",
        f"a bigger budget: {d.bigger}",
        "ledger:",
        *run.ledger.lines(),
        f"report: {run.out / REPORT}",
        f"sample it with `hpo sample {d.model}`",
    ]


PHASE_FUNCTIONS: dict[str, Callable[[Run], None]] = {
    "preflight": preflight, "search": search, "decide": decide, "final": final, "sweep": sweep,
    "export": export,
}  # fmt: skip
