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

    .venv/bin/python -m benchmarks.sampler_efficiency [--seeds 20] [--trials 30] [--kimg 4]

Goal (issue 21): the default reaches random's best-of-30 in at most 15 trials on both datasets.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from benchmarks.common import DIGITS, quiet, spec_with
from benchmarks.tabular import NUM_EVALS, Table, build, replay_trial
from hpo.service.pruning import make_pruner
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


def spec_for(sampler: dict[str, Any], seed: int, trials: int, pruner: dict[str, Any] | None = None) -> Spec:
    raw = spec_with(
        DIGITS, sampler={**sampler, "seed": seed}, study={**DIGITS["study"], "n_trials": trials},
        pruner=pruner or {"name": "none"}, merge_train={"num_evals": NUM_EVALS},
    )  # fmt: skip
    return spec_from_dict(raw, file="sampler_efficiency")


@dataclass(frozen=True)
class Run:
    best: list[float]  # the best score after each trial
    seconds: float  # the sampler's mean seconds per proposal
    points: list[int]  # evaluation points trained after each trial, all trials together
    distinct: int  # distinct configurations proposed

    def best_within(self, points: int) -> float:
        """The best score found before the study had trained more than ``points`` evaluation points."""
        return min((b for b, p in zip(self.best, self.points, strict=True) if p <= points), default=math.inf)


def run_study(table: Table, spec: Spec, trials: int) -> Run:
    """One study driven by the service's sampler and pruner on ``table``."""
    study = optuna.create_study(sampler=make_sampler(spec), pruner=make_pruner(spec))
    best, out, spent, points, seen = math.inf, [], 0.0, [0], set()
    for _ in range(trials):
        started = time.perf_counter()
        trial = study.ask()
        params = suggest(trial, spec.search)
        spent += time.perf_counter() - started
        value, trained = replay_trial(study, trial, table.at(params))
        best = min(best, value)
        points.append(points[-1] + trained)
        seen.add(tuple(sorted(params.items())))
        out.append(best)
    return Run(out, spent / trials, points[1:], len(seen))


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
        replay_trial(study, trial, table.at(params))
    return out


def trials_to_reach(curve: list[float], target: float) -> int | None:
    return next((i + 1 for i, v in enumerate(curve) if v <= target), None)


def report(table: Table, seeds: int, trials: int) -> None:
    print(
        f"\n## {table.dataset}: {seeds} seeds × {trials} trials per sampler; table of {len(table.cells)} cells at "
        f"{table.kimg:g} kimg (best cell {table.best():.4g}, median cell {table.quantile(0.5):.4g}); "
        f"training seed sd {table.seed_sd:.3g} (best {len(table.replicates)} cells × 3 seeds)"
    )
    target = math.nan
    for pruner in ({"name": "none"}, DIGITS["pruner"]):
        runs = {
            label: [run_study(table, spec_for(sampler, seed, trials, pruner), trials) for seed in range(seeds)]
            for label, sampler in SAMPLERS.items()
        }
        if pruner["name"] == "none":
            target = statistics.median(r.best[-1] for r in runs["random"])
            print(f"random's best-of-{trials} without pruning (median over seeds): {target:.4g}")
        auto = spec_for(SAMPLERS["auto"], 0, trials, pruner)
        print(f"\npruner: {pruner}; auto is {sampler_name(auto)} with {startup_trials(auto)} start-up trials here")
        head = "".join(f"{f'best@{k}':>16}" for k in CHECKPOINTS if k <= trials) + f"{'best@½compute':>16}"
        print(f"{'sampler':>18}{head}{'trials to reach':>18}{'reached':>9}{'compute':>8}{'distinct':>9}{'s/prop.':>8}")
        for label, studies in runs.items():
            print(f"{label:>18}{row(studies, target, trials)}")


def row(studies: list[Run], target: float, trials: int) -> str:
    """best@k (mean ± sd over seeds), the best within half the unpruned study's compute, trials to
    reach ``target`` (median, quartiles, seeds that reach it), compute (share of the unpruned
    budget), distinct configurations and seconds per proposal."""
    cells = ""
    for k in (k for k in CHECKPOINTS if k <= trials):
        at = [r.best[k - 1] for r in studies]
        cells += f"{statistics.mean(at):>9.4g} ± {statistics.stdev(at):<4.2g}"
    needed = [trials_to_reach(r.best, target) or math.inf for r in studies]  # never reaching counts as never
    median = statistics.median(needed)
    quart = "–".join(f"{q:.0f}" if math.isfinite(q) else "never" for q in np.quantile(needed, [0.25, 0.75]))
    median_text = f"{median:g} ({quart})" if math.isfinite(median) else f"never ({quart})"
    hit = sum(1 for n in needed if math.isfinite(n))
    compute = statistics.mean(r.points[-1] for r in studies) / (trials * NUM_EVALS)
    half = [r.best_within(trials * NUM_EVALS // 2) for r in studies]
    cells += f"{statistics.mean(half):>9.4g} ± {statistics.stdev(half):<4.2g}"
    distinct = statistics.mean(r.distinct for r in studies)
    seconds = statistics.mean(r.seconds for r in studies)
    return f"{cells}{median_text:>18}{hit:>5}/{len(studies):<3}{compute:>8.0%}{distinct:>9.1f}{seconds:>8.3f}"


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
