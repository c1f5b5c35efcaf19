"""Which pruner saves most compute at an equal best: every candidate, built by the service's own
``make_pruner`` from a spec, replayed on unpruned trials of two datasets.

The trials are the tabular benchmark's cells (``tabular.py``: 216 configurations of the digits search
space per dataset, each trained to the end with 4 evaluation points of the pruning metric, then
scored). A replayed study starts with the spec's baseline (as the service enqueues it), draws the
other ``--trials`` - 1 of them in random order (random search) and lets the pruner decide at each
evaluation point, exactly as a worker reports them; a trial it stops costs the points it trained.
Repeated ``--repeats`` times per study size. Prints per dataset, study size and pruner: the compute
saved against no pruning, the complete trials (what a report can rank), the best score's regret
(the best trial kept against the best of the same draw) as a mean and against the training seed
spread (share of studies that lost more than one seed sd), and the share of studies whose best trial
survived.

    .venv/bin/python -m benchmarks.pruning_replay [--repeats 300] [--sizes 10,30]

Goal (issue 21): at least 2x less compute at a best within the seed spread.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from benchmarks.common import DIGITS, quiet, spec_with, write_result
from benchmarks.tabular import NUM_EVALS, Measured, Table, build, cell_key, replay_trial
from hpo.analysis.record import BASELINE_ATTR
from hpo.service.pruning import make_pruner
from hpo.spec.spec import spec_from_dict

UNGUARDED = {"spare_until_complete": 0}  # the pruner alone, without the baseline guard
ALWAYS = {"spare_until_complete": 10**6}  # the guard for the whole study
MEDIAN_2_0 = {"name": "median", "startup_trials": 2, "warmup_evals": 0}
PRUNERS: dict[str, dict[str, Any]] = {
    "none": {"name": "none"},
    "median, 3 start-up, 1 warm-up": {"name": "median", "startup_trials": 3, "warmup_evals": 1, **UNGUARDED},
    "median, 2 start-up, 0 warm-up": {**MEDIAN_2_0, **UNGUARDED},
    "median 2/0, guard until 4": {**MEDIAN_2_0, "spare_until_complete": 4},
    "median 2/0, guard until 6": {**MEDIAN_2_0, "spare_until_complete": 6},
    "median 2/0, guard always": {**MEDIAN_2_0, **ALWAYS},
    "median, 4 start-up, 0 warm-up": {"name": "median", "startup_trials": 4, "warmup_evals": 0, **UNGUARDED},
    "percentile 33, 2 start-up, 0 w.": {"name": "percentile", "percentile": 33.0, "startup_trials": 2, **UNGUARDED},
    "percentile 33 2/0, guard until 4": {"name": "percentile", "percentile": 33.0, "startup_trials": 2},
    "hyperband, factor 3": {"name": "hyperband", "min_resource": 1, "reduction_factor": 3, **UNGUARDED},
    "succ. halving, factor 2": {"name": "successive_halving", "min_resource": 1, "reduction_factor": 2, **UNGUARDED},
    "succ. halving, factor 3": {"name": "successive_halving", "min_resource": 1, "reduction_factor": 3, **UNGUARDED},
    "succ. halving 3, guard until 4": {"name": "successive_halving", "min_resource": 1, "reduction_factor": 3},
}
# Every replayed study starts with the digits spec's baseline (lr 4e-4, batch 32, T 500, linear), as
# the service enqueues it; its nearest cell has lr 10^-3.5 = 3.2e-4.
BASELINE = cell_key((-3.5, 32, 500, "linear"))


@dataclass(frozen=True)
class Replay:
    points: int  # evaluation points trained, all trials together
    best_kept: float  # best score among the trials trained to the end
    best_drawn: float  # best score among all drawn trials (what no pruning finds)
    complete: int  # trials trained to the end: what the report's score-based sections rank


def replay(pruner: dict[str, Any], trials: list[Measured], name: str) -> Replay:
    """The pruner deciding on ``trials``' curves in order, the first one the baseline, in a study
    named ``name`` (Hyperband assigns brackets by it)."""
    raw = spec_with(DIGITS, pruner=pruner, merge_train={"num_evals": NUM_EVALS})
    study = optuna.create_study(study_name=name, pruner=make_pruner(spec_from_dict(raw, file=name)))
    points, kept = 0, []
    for i, m in enumerate(trials):
        trial = study.ask()
        if i == 0:
            trial.set_user_attr(BASELINE_ATTR, True)
        value, trained = replay_trial(study, trial, m)
        points += trained
        kept.append(value)
    finite = [m.score for m in trials if math.isfinite(m.score) and len(m.curve) == NUM_EVALS]
    done = sum(1 for v in kept if math.isfinite(v))
    return Replay(points, min(kept, default=math.inf), min(finite, default=math.inf), done)


def figures(out: list[Replay], sd: float, base: int) -> dict[str, float]:
    """One row of the table: what a pruner did over the draws ``out`` (``base``: points without pruning)."""
    repeats = len(out)
    regret = [o.best_kept - o.best_drawn for o in out]
    return {
        "compute_saved": base / sum(o.points for o in out),
        "mean_regret": statistics.mean(min(x, 10 * sd) for x in regret),  # a lost-everything study counts 10 sd
        "share_regret_over_1_sd": sum(1 for x in regret if x > sd) / repeats,
        "share_best_kept": sum(1 for x in regret if x == 0) / repeats,
        "mean_complete": statistics.mean(o.complete for o in out),
        "share_under_4_complete": sum(1 for o in out if o.complete < 4) / repeats,
    }


def report(table: Table, sizes: list[int], repeats: int) -> dict[str, Any]:
    """Print the pruners' table of ``table``'s dataset; its figures, by name."""
    baseline = table.cells[BASELINE]
    cells = [m for key, m in table.cells.items() if key != BASELINE]
    sd = table.seed_sd
    print(
        f"\n## {table.dataset}: {len(cells)} unpruned trials ({table.kimg:g} kimg, {NUM_EVALS} evaluation points); "
        f"training seed sd {sd:.3g}; {repeats} random draws per study size"
    )
    print(
        f"{'trials':>6} {'pruner':>30} {'compute saved':>14} {'mean regret':>12} {'> 1 sd':>7} {'best kept':>10} "
        f"{'complete':>9} {'< 4 complete':>12}"
    )
    rows = []
    for size in sizes:
        draws = [[baseline, *random.Random(r).sample(cells, size - 1)] for r in range(repeats)]
        base = sum(len(m.curve) for d in draws for m in d)
        for label, pruner in PRUNERS.items():
            f = figures([replay(pruner, d, f"replay-{size}-{r}") for r, d in enumerate(draws)], sd, base)
            print(
                f"{size:>6} {label:>30} {f['compute_saved']:>13.2f}x {f['mean_regret']:>12.3g} "
                f"{f['share_regret_over_1_sd']:>7.0%} {f['share_best_kept']:>10.0%} {f['mean_complete']:>9.1f} "
                f"{f['share_under_4_complete']:>12.0%}"
            )
            rows.append({"trials": size, "pruner": label, "settings": pruner, **f})
    return {
        "dataset": table.dataset, "unpruned_trials": len(cells), "kimg": table.kimg, "num_evals": NUM_EVALS,
        "seed_sd": sd, "draws": repeats, "rows": rows,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--sizes", default="10,30")
    parser.add_argument("--kimg", type=float, default=4.0)
    parser.add_argument("--datasets", default="digits,shapes")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/hpo-bench-cache"))
    args = parser.parse_args()
    quiet()
    started = time.perf_counter()
    sizes = [int(s) for s in args.sizes.split(",")]
    datasets = [report(build(name, args.kimg, args.cache), sizes, args.repeats) for name in args.datasets.split(",")]
    seconds = time.perf_counter() - started
    print(f"\ntotal {seconds:.0f} s (tables' training and scoring: measured once, cached)")
    result = {
        "repeats": args.repeats, "sizes": sizes, "kimg": args.kimg, "datasets": datasets, "total_seconds": seconds,
    }  # fmt: skip
    write_result("pruning_replay", result)


if __name__ == "__main__":
    main()
