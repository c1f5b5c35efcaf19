"""Which sampler finds a good configuration in fewest trials: random, TPE and GP (each with 4 and 10
start-up trials) and ``auto``, each built by the service's own ``make_sampler`` from a spec, run on
the tabular benchmark of the digits search space (``tabular.py``: every categorical combination
trained for real at 6 learning rates, 4 kimg, 8 px, classifier-FID of 128 samples) on digits and
shapes, ``--seeds`` sampler seeds each, ``--trials`` trials per study.

Prints, per dataset and sampler: the best score after 5, 10, 15 and 30 trials (mean over seeds ±
their sd), and how many trials the sampler needs to reach random search's best-of-30 (the median of
random's best over the seeds): the median over seeds (a seed that never reaches it counts as never),
its quartiles, and how many seeds reach it at all. The seed
spread of training itself (the best cells retrained with 2 other seeds) is printed beside, so a
difference smaller than it is not read as a win.

    .venv/bin/python benchmarks/sampler_efficiency.py [--seeds 20] [--trials 30] [--kimg 4]

Goal (issue 21): the default reaches random's best-of-30 in at most 15 trials on both datasets.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

sys.path.insert(0, str(Path(__file__).parent.parent))

from benchmarks.common import DIGITS, quiet, spec_with
from benchmarks.tabular import Table, build
from hpo.service.space import suggest
from hpo.service.study import make_sampler, sampler_name, startup_trials
from hpo.spec.spec import Spec, spec_from_dict

SAMPLERS: dict[str, dict[str, Any]] = {
    "random": {"name": "random"},
    "tpe, 4 start-up": {"name": "tpe", "n_startup_trials": 4},
    "tpe, 10 start-up": {"name": "tpe", "n_startup_trials": 10},
    "gp, 4 start-up": {"name": "gp", "n_startup_trials": 4},
    "gp, 10 start-up": {"name": "gp", "n_startup_trials": 10},
    "auto": {"name": "auto"},
}
CHECKPOINTS = (5, 10, 15, 30)


def spec_for(sampler: dict[str, Any], seed: int, trials: int) -> Spec:
    raw = spec_with(DIGITS, sampler={**sampler, "seed": seed}, study={**DIGITS["study"], "n_trials": trials})
    return spec_from_dict(raw, file="sampler_efficiency")


def evaluate(study: optuna.Study, trial: optuna.Trial, table: Table, params: dict[str, Any]) -> float:
    """Tell ``study`` the table's score of ``params``; a diverged cell is pruned, as the objective prunes it."""
    value = table.score(params["lr"], params["batch_size"], params["timesteps"], params["schedule"])
    if math.isfinite(value):
        study.tell(trial, value)
    else:
        study.tell(trial, state=TrialState.PRUNED)
    return value


def best_so_far(table: Table, spec: Spec, trials: int) -> tuple[list[float], float]:
    """One study driven by the service's sampler on ``table``: the best score after each trial, and
    the sampler's mean seconds per proposal."""
    study = optuna.create_study(sampler=make_sampler(spec))
    best, out, spent = math.inf, [], 0.0
    for _ in range(trials):
        started = time.perf_counter()
        trial = study.ask()
        params = suggest(trial, spec.search)
        spent += time.perf_counter() - started
        best = min(best, evaluate(study, trial, table, params))
        out.append(best)
    return out, spent / trials


def proposal_cost(table: Table, sizes: tuple[int, ...]) -> dict[int, float]:
    """Seconds GP takes to propose the n-th trial, for each n in ``sizes``: what bounds ``auto``'s rule."""
    spec = spec_for({"name": "gp", "n_startup_trials": 4}, 0, max(sizes))
    study = optuna.create_study(sampler=make_sampler(spec))
    out: dict[int, float] = {}
    for n in range(1, max(sizes) + 1):
        started = time.perf_counter()
        trial = study.ask()
        params = suggest(trial, spec.search)
        if n in sizes:
            out[n] = time.perf_counter() - started
        evaluate(study, trial, table, params)
    return out


def trials_to_reach(curve: list[float], target: float) -> int | None:
    return next((i + 1 for i, v in enumerate(curve) if v <= target), None)


def report(table: Table, seeds: int, trials: int) -> None:
    curves: dict[str, list[list[float]]] = {}
    cost: dict[str, float] = {}
    auto = spec_for(SAMPLERS["auto"], 0, trials)
    resolved = f"{sampler_name(auto)} with {startup_trials(auto)} start-up trials"
    for label, sampler in SAMPLERS.items():
        studies = [best_so_far(table, spec_for(sampler, seed, trials), trials) for seed in range(seeds)]
        curves[label] = [c for c, _ in studies]
        cost[label] = statistics.mean(s for _, s in studies)
    target = statistics.median(c[-1] for c in curves["random"])
    print(
        f"\n## {table.dataset}: {seeds} seeds × {trials} trials per sampler; table of {len(table.cells)} cells at "
        f"{table.kimg:g} kimg (best cell {table.best():.4g}, median cell {table.quantile(0.5):.4g}); "
        f"training seed sd {table.seed_sd:.3g} (best {len(table.replicates)} cells × 3 seeds)"
    )
    print(f"random's best-of-{trials} (median over seeds): {target:.4g}; auto is {resolved} at {trials} trials")
    head = "".join(f"{f'best@{k}':>16}" for k in CHECKPOINTS if k <= trials)
    print(f"{'sampler':>18}{head}{'trials to reach':>18}{'reached':>9}{'s/proposal':>11}")
    for label, runs in curves.items():
        cells = ""
        for k in (k for k in CHECKPOINTS if k <= trials):
            at = [c[k - 1] for c in runs]
            cells += f"{statistics.mean(at):>9.4g} ± {statistics.stdev(at):<4.2g}"
        reach = [trials_to_reach(c, target) for c in runs]
        needed = [math.inf if r is None else r for r in reach]  # a seed that never reaches it counts as never
        median = statistics.median(needed)
        quart = "–".join(f"{q:.0f}" if math.isfinite(q) else "never" for q in np.quantile(needed, [0.25, 0.75]))
        hit = [r for r in reach if r is not None]
        median_text = f"{median:g} ({quart})" if math.isfinite(median) else f"never ({quart})"
        print(f"{label:>18}{cells}{median_text:>18}{len(hit):>5}/{len(reach):<3}{cost[label]:>11.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--kimg", type=float, default=4.0)
    parser.add_argument("--datasets", default="digits,shapes")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/hpo-bench-cache"))
    parser.add_argument("--cost-at", default="30,100,200", help="trial counts at which GP's proposal is timed")
    args = parser.parse_args()
    quiet()
    started = time.perf_counter()
    for name in args.datasets.split(","):
        table = build(name, args.kimg, args.cache)
        report(table, args.seeds, args.trials)
    sizes = tuple(int(n) for n in args.cost_at.split(","))
    cost = proposal_cost(table, sizes)
    print("\nGP's proposal of the n-th trial: " + ", ".join(f"n = {n}: {s:.2f} s" for n, s in cost.items()))
    print(f"\ntotal {time.perf_counter() - started:.0f} s (tables' training and scoring: measured once, cached)")


if __name__ == "__main__":
    main()
