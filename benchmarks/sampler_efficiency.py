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
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import optuna

from benchmarks.common import DIGITS, quiet, spec_with, write_result
from benchmarks.tabular import NUM_EVALS, Table, add_table_arguments, replay_trial, tables_of
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


def report(table: Table, seeds: int, trials: int) -> dict[str, Any]:
    """Print the samplers' tables of ``table``'s dataset, without and with the spec's pruner; its figures, by name."""
    print(
        f"\n## {table.dataset}: {seeds} seeds × {trials} trials per sampler; table of {len(table.cells)} cells at "
        f"{table.kimg:g} kimg (best cell {table.best():.4g}, median cell {table.quantile(0.5):.4g}); "
        f"training seed sd {table.seed_sd:.3g} (best {len(table.replicates)} cells × 3 seeds)"
    )
    target = math.nan
    by_pruner: list[dict[str, Any]] = []
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
        rows = {label: Row.of(studies, target, trials) for label, studies in runs.items()}
        for label, r in rows.items():
            print(f"{label:>18}{r.text()}")
        by_pruner.append({
            "pruner": pruner, "auto_sampler": sampler_name(auto), "auto_startup_trials": startup_trials(auto),
            "samplers": [{"sampler": label, **r.as_dict()} for label, r in rows.items()],
        })  # fmt: skip
    return {
        "dataset": table.dataset, "cells": len(table.cells), "kimg": table.kimg, "best_cell": table.best(),
        "median_cell": table.quantile(0.5), "seed_sd": table.seed_sd,
        "replicated_cells": len(table.replicates), "random_best_median": target, "pruners": by_pruner,
    }  # fmt: skip


@dataclass(frozen=True)
class Spread:
    """Mean and sd over a sampler's seeds."""

    mean: float
    sd: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(statistics.mean(values), statistics.stdev(values))

    def text(self) -> str:
        return f"{self.mean:>9.4g} ± {self.sd:<4.2g}"


@dataclass(frozen=True)
class Row:
    """A sampler's figures over its seeds: best@k, the best within half the unpruned study's compute,
    trials to reach the target (median and quartiles; inf: never), seeds that reach it, compute
    (share of the unpruned budget), distinct configurations and seconds per proposal."""

    best_at: dict[int, Spread]
    best_at_half_compute: Spread
    trials_to_reach: float
    quartiles: tuple[float, float]
    reached: int
    seeds: int
    compute: float
    distinct: float
    seconds: float

    @classmethod
    def of(cls, studies: list[Run], target: float, trials: int) -> Row:
        needed = [trials_to_reach(r.best, target) or math.inf for r in studies]  # never reaching counts as never
        q1, q3 = (float(q) for q in np.quantile(needed, [0.25, 0.75]))
        return cls(
            best_at={k: Spread.of([r.best[k - 1] for r in studies]) for k in CHECKPOINTS if k <= trials},
            best_at_half_compute=Spread.of([r.best_within(trials * NUM_EVALS // 2) for r in studies]),
            trials_to_reach=statistics.median(needed),
            quartiles=(q1, q3),
            reached=sum(1 for n in needed if math.isfinite(n)),
            seeds=len(studies),
            compute=statistics.mean(r.points[-1] for r in studies) / (trials * NUM_EVALS),
            distinct=statistics.mean(r.distinct for r in studies),
            seconds=statistics.mean(r.seconds for r in studies),
        )

    def text(self) -> str:
        """The table's row after the sampler's name."""
        cells = "".join(s.text() for s in (*self.best_at.values(), self.best_at_half_compute))
        quart = "–".join(f"{q:.0f}" if math.isfinite(q) else "never" for q in self.quartiles)
        median = self.trials_to_reach
        median_text = f"{median:g} ({quart})" if math.isfinite(median) else f"never ({quart})"
        return (
            f"{cells}{median_text:>18}{self.reached:>5}/{self.seeds:<3}{self.compute:>8.0%}{self.distinct:>9.1f}"
            f"{self.seconds:>8.3f}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "best_at": [{"trials": k, **asdict(s)} for k, s in self.best_at.items()],
            "best_at_half_compute": asdict(self.best_at_half_compute),
            "trials_to_reach": self.trials_to_reach,
            "trials_to_reach_quartiles": self.quartiles,
            "reached": self.reached, "seeds": self.seeds, "compute": self.compute, "distinct": self.distinct,
            "seconds_per_proposal": self.seconds,
        }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=30)
    add_table_arguments(parser)
    parser.add_argument("--cost-at", default="30,100,200", help="trial counts at which GP's proposal is timed")
    args = parser.parse_args()
    quiet()
    started = time.perf_counter()
    tables = tables_of(args)
    datasets = [report(table, args.seeds, args.trials) for table in tables]
    table = tables[-1]
    sizes = tuple(int(n) for n in args.cost_at.split(","))
    cost = proposal_cost(table, sizes)
    print("\nGP's proposal of the n-th trial: " + ", ".join(f"n = {n}: {s:.2f} s" for n, s in cost.items()))
    seconds = time.perf_counter() - started
    print(f"\ntotal {seconds:.0f} s (tables' training and scoring: measured once, cached)")
    result = {
        "seeds": args.seeds, "trials": args.trials, "kimg": args.kimg, "datasets": datasets,
        "gp_proposal_seconds": [{"trials": n, "seconds": s} for n, s in cost.items()], "total_seconds": seconds,
    }  # fmt: skip
    write_result("sampler_efficiency", result)


if __name__ == "__main__":
    main()
