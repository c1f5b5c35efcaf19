"""Samplers that propose with running trials in mind, under parallel workers and pruning: the search
as ``docker compose up workers`` runs it, replayed on the tabular benchmark (``tabular.py``: every
categorical combination of the digits search space trained for real at 6 learning rates, 4 kimg,
8 px, the pruning metric at 16 points, classifier-FID of 128 samples) on digits and shapes.

``pruning_replay.py`` replays one trial after another, so a sampler there never sees a running
trial; this simulates ``--workers`` workers on one shared study, each with the sampler and pruner the
service builds for it (``make_sampler(spec, worker_index)``: the seed offset per worker; TPE with
constant liar, as the service sets it; GP, which in Optuna 5 conditions on running trials), the
spec's baseline enqueued first as ``hpo launch`` does. A trial takes one unit of time per budget; it
reports its evaluation points at their share of the budget, in time order across workers, to the
pruner, exactly as workers report them; a stopped trial frees its worker at once. Per dataset and
candidate (sampler × pruner × workers), over ``--seeds`` sampler seeds at ``--trials`` trials:
budgets trained (all trials together; "saved" against the same sampler and workers unpruned), the
wall time in budgets, the best complete score's gap to the table's best cell in training-seed sd
(mean ± se over seeds), the share of studies more than 1 seed sd behind the reference candidate's
mean, and the complete trials.

    .venv/bin/python -m benchmarks.parallel_search [--seeds 30] [--trials 30] [--workers 1,4] [--only rung]

Issue 61 asks what TPE with constant liar and GPSampler do for parallel workers; a sequential replay
cannot show it.
"""

from __future__ import annotations

import argparse
import heapq
import math
import re
import statistics
import time
from dataclasses import dataclass, field

import optuna
from optuna.trial import Trial, TrialState

from benchmarks.common import DIGITS, quiet, spec_with, write_result
from benchmarks.tabular import POINTS, Measured, Table, View, add_table_arguments, tables_of
from hpo.files import JsonObject
from hpo.service.pruning import make_pruner
from hpo.service.rung import decide
from hpo.service.space import suggest
from hpo.service.study import enqueue_baseline, make_sampler
from hpo.service.trials import PAUSED, mark_ended
from hpo.spec.spec import Spec, spec_from_dict

SAMPLERS: dict[str, JsonObject] = {
    "random": {"name": "random"},
    "tpe (constant liar)": {"name": "tpe", "n_startup_trials": 10},
    "gp": {"name": "gp", "n_startup_trials": 10},
}
PRUNERS: dict[str, tuple[View, JsonObject]] = {
    "none": (View(4), {"name": "none"}),
    "median 2/0, 4 even (default)": (View(4), {"name": "median", "startup_trials": 2, "warmup_evals": 0}),
    "halving 2+guard, 5 doubling": (
        View(5, "doubling"),
        {"name": "successive_halving", "min_resource": 1, "reduction_factor": 2, "spare_until_complete": 4},
    ),
    "rung at 1/8, 5 doubling": (View(5, "doubling"), {"name": "rung", "min_resource": 2}),
}
REFERENCE = ("tpe (constant liar)", "median 2/0, 4 even (default)")  # the spec's `auto` beside a pruner


def spec_for(sampler: JsonObject, pruner: tuple[View, JsonObject], seed: int, trials: int) -> Spec:
    view, settings = pruner
    raw = spec_with(
        DIGITS, sampler={**sampler, "seed": seed}, study={**DIGITS["study"], "n_trials": trials}, pruner=settings,
        merge_train={"num_evals": view.num_evals, "eval_spacing": view.spacing},
    )  # fmt: skip
    return spec_from_dict(raw, file="parallel_search")


@dataclass(order=True)
class Event:
    time: float
    order: int
    worker: int = field(compare=False)
    trial: Trial = field(compare=False)
    run: Measured = field(compare=False)
    point: int = field(compare=False)  # 1-based index into run.curve of the point reported at ``time``
    started: float = field(compare=False)  # when the run would have begun: its points fall at their shares
    paid_from: float = field(compare=False)  # when this worker began it (later for a resumed continuation)


@dataclass(frozen=True)
class Outcome:
    best: float  # best complete score (inf when none)
    trained: float  # budgets trained, all trials together
    wall: float  # time until the last trial ended, in budgets
    complete: int
    completions: tuple[tuple[float, float], ...] = ()  # (when its sweep ended, score) of each complete trial


def simulate(table: Table, spec: Spec, view: View, trials: int, workers: int, sweep: float = 0.0) -> Outcome:
    """One study served by ``workers`` simulated workers, each with its own sampler and pruner on the
    shared storage, in time order. Under ``pruner: rung`` a trial stopped at the rung is paused; a
    worker with nothing to ask waits; once every trial has reached the rung the service's own decision
    (``service/rung.py``) queues the continuations, and the waiting workers take them: each reports
    the points before the rung from its checkpoint at no cost and trains on from there. A complete
    trial then holds its worker ``sweep`` budgets more (its sampling sweep; its score is told at once)."""
    storage = optuna.storages.InMemoryStorage()
    name = "parallel"
    optuna.create_study(storage=storage, study_name=name)
    studies = [
        optuna.load_study(study_name=name, storage=storage, sampler=make_sampler(spec, i), pruner=make_pruner(spec))
        for i in range(workers)
    ]
    for i, params in enumerate(spec.baselines):
        enqueue_baseline(studies[0], dict(params), name=spec.baseline_name(i))
    events: list[Event] = []
    counter = iter(range(10**9))
    asked = 0
    rung = spec.pruner.min_resource if spec.pruner.name == "rung" else 0
    idle: list[tuple[int, float]] = []  # workers with nothing to ask, and since when

    def queued() -> bool:
        return bool(studies[0].get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def start(worker: int, now: float) -> None:
        nonlocal asked
        resumed = rung > 0 and queued() and asked >= trials
        if asked >= trials and not resumed:
            idle.append((worker, now))
            return
        asked += 0 if resumed else 1
        study = studies[worker]
        trial = study.ask()
        run = table.at(suggest(trial, spec.search)).seen(view)
        if resumed:  # the points before the rung, replayed from its checkpoint
            for k in range(1, min(rung, len(run.curve)) + 1):
                trial.report(run.curve[k - 1], step=k)
        first = rung + 1 if resumed else 1
        if len(run.curve) < first:  # diverged before its first point to train: stopped at once
            study.tell(trial, state=TrialState.PRUNED)
            start(worker, now + 1 / POINTS)
            return
        began = now - (view.indices[rung - 1] / POINTS if resumed else 0.0)
        at = began + view.indices[first - 1] / POINTS
        heapq.heappush(events, Event(at, next(counter), worker, trial, run, first, began, now))

    for w in range(workers):
        start(w, 0.0)
    trained, wall, best, complete = 0.0, 0.0, math.inf, 0
    completions: list[tuple[float, float]] = []
    while events:
        e = heapq.heappop(events)
        study = studies[e.worker]
        e.trial.report(e.run.curve[e.point - 1], step=e.point)
        finished = e.point == len(e.run.curve)
        diverged = len(e.run.curve) < view.num_evals or not math.isfinite(e.run.score)
        stopped = e.trial.should_prune()
        if stopped or (finished and diverged):
            if stopped and e.point == rung:  # pruner: rung pauses every trial there
                mark_ended(e.trial, PAUSED)
            study.tell(e.trial, state=TrialState.PRUNED)
        elif finished:
            study.tell(e.trial, e.run.score)
            best, complete = min(best, e.run.score), complete + 1
            completions.append((e.time + sweep, e.run.score))
        else:
            nxt = e.started + view.indices[e.point] / POINTS
            heapq.heappush(
                events, Event(nxt, next(counter), e.worker, e.trial, e.run, e.point + 1, e.started, e.paid_from)
            )
            continue
        trained += e.time - e.paid_from
        free = e.time + (sweep if finished and not stopped and not diverged else 0.0)
        wall = max(wall, free)
        start(e.worker, free)
        if rung and decide(study, spec, study.get_trials(deepcopy=False)):
            waiting, idle[:] = idle[:], []
            for worker, since in waiting:
                start(worker, max(since, e.time))
    return Outcome(best, trained, wall, complete, tuple(completions))


def report(table: Table, seeds: int, trials: int, workers: list[int], only: str | None = None) -> JsonObject:
    sd, top = table.seed_sd, table.best()
    print(
        f"\n## {table.dataset}: {trials} trials, {seeds} sampler seeds; training seed sd {sd:.3g}; best cell {top:.4g}"
    )
    print(
        f"{'workers':>7} {'sampler':>20} {'pruner':>30} {'budgets':>8} {'saved':>6} {'wall':>6} {'gap (sd)':>14} "
        f"{'> ref+1sd':>9} {'complete':>8} {'s/ask':>6}"
    )
    rows: list[JsonObject] = []
    for w in workers:
        unpruned: dict[str, float] = {}
        gaps: dict[tuple[str, str], list[float]] = {}
        for sampler_label, sampler in SAMPLERS.items():
            for pruner_label, pruner in PRUNERS.items():
                if (
                    only is not None
                    and pruner_label not in ("none", REFERENCE[1])
                    and not re.search(only, pruner_label)
                ):
                    continue
                started = time.perf_counter()
                specs = [spec_for(sampler, pruner, s, trials) for s in range(seeds)]
                out = [simulate(table, spec, pruner[0], trials, w) for spec in specs]
                per_ask = (time.perf_counter() - started) / (seeds * trials)
                gap = [min(o.best - top, 10 * sd) / sd for o in out]
                gaps[(sampler_label, pruner_label)] = gap
                budgets = statistics.fmean(o.trained for o in out)
                if pruner_label == "none":
                    unpruned[sampler_label] = budgets
                row: JsonObject = {
                    "workers": w, "sampler": sampler_label, "pruner": pruner_label, "budgets": budgets,
                    "saved": unpruned[sampler_label] / budgets, "wall": statistics.fmean(o.wall for o in out),
                    "gap_sd": statistics.fmean(gap), "gap_se": statistics.stdev(gap) / math.sqrt(len(gap)),
                    "complete": statistics.fmean(o.complete for o in out), "seconds_per_trial": per_ask,
                }  # fmt: skip
                rows.append(row)
        ref = statistics.fmean(gaps[REFERENCE])
        for row in rows:
            if row["workers"] != w:
                continue
            gap = gaps[(str(row["sampler"]), str(row["pruner"]))]
            row["share_over_ref_plus_1sd"] = sum(g > ref + 1 for g in gap) / len(gap)
            print(
                f"{w:>7} {row['sampler']:>20} {row['pruner']:>30} {row['budgets']:>8.1f} {row['saved']:>5.2f}x "
                f"{row['wall']:>6.1f} {row['gap_sd']:>7.2f} ± {row['gap_se']:.2f} "
                f"{row['share_over_ref_plus_1sd']:>9.0%} "
                f"{row['complete']:>8.1f} {row['seconds_per_trial']:>6.2f}",
                flush=True,
            )
    return {"dataset": table.dataset, "seed_sd": sd, "best_cell": top, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--workers", default="1,4")
    parser.add_argument("--only", help="only the pruners whose names match this regular expression (and none, ref.)")
    add_table_arguments(parser)
    args = parser.parse_args()
    quiet()
    started = time.perf_counter()
    workers = [int(w) for w in args.workers.split(",")]
    datasets = [report(t, args.seeds, args.trials, workers, args.only) for t in tables_of(args)]
    seconds = time.perf_counter() - started
    print(f"\ntotal {seconds:.0f} s")
    result = {
        "seeds": args.seeds, "trials": args.trials, "workers": workers, "kimg": args.kimg, "datasets": datasets,
        "total_seconds": seconds,
    }  # fmt: skip
    write_result("parallel_search" if args.only is None else "parallel_search_only", result)  # a subset: its own file


if __name__ == "__main__":
    main()
