"""Which pruner, at which evaluation points, saves most compute at an equal best: every candidate
built by the service's own ``make_pruner`` from a spec, replayed on unpruned trials of two datasets.

The trials are the tabular benchmark's cells (``tabular.py``: 216 configurations of the digits search
space per dataset, each trained to the end with the pruning metric at 16 evenly spaced points, then
scored). A candidate is a pruner and the evaluation points its spec asks for (``num_evals`` and
``eval_spacing``: 4 even points are 4/16, 8/16, 12/16, 16/16 of the budget; 5 doubling ones 1/16, 1/8,
1/4, 1/2, 1), seen as a subset of the table's. A replayed study starts with the spec's baseline (as the
service enqueues it), draws the other ``--trials`` - 1 of them in random order (random search) and lets
the pruner decide at each of its points, exactly as a worker reports them; a trial it stops costs the
share of the budget it trained. Repeated ``--repeats`` times per study size. Prints per dataset: the
rank correlation of each measured point with the final score (do early points rank like the end?),
then per study size and candidate: the compute saved against no pruning, the best score's regret (the
best trial kept against the best of the same draw) as a mean in training-seed sd and the share of
studies that lost more than one seed sd, the complete trials (what a report can rank) and the share
of studies with fewer than 4, and the evaluation points reported per trial (each costs a probe).

    .venv/bin/python -m benchmarks.pruning_replay [--repeats 300] [--sizes 10,30,100]

Goal (issue 61): at least 3x less compute at 30 trials, mean regret <= 0.1 seed sd, <= 2 % of studies
losing more than 1 seed sd, on both datasets; >= 4 complete trials at 10.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from benchmarks.common import DIGITS, quiet, spec_with, write_result
from benchmarks.tabular import (
    POINTS,
    Measured,
    Table,
    View,
    add_table_arguments,
    cell_key,
    replay_trial,
    tables_of,
)
from benchmarks.tabular import replay_rung as rung_outcomes
from hpo.records import BASELINE_ATTR
from hpo.service.pruning import SpareAheadOfBaseline, make_pruner
from hpo.spec.rules import eval_fractions
from hpo.spec.spec import Spec, spec_from_dict

GUARD = {"spare_until_complete": 4}  # the shipped guard: keep one ahead of the baseline until 4 complete
UNGUARDED = {"spare_until_complete": 0}
EVEN4, EVEN8, EVEN16, DOUBLING5 = View(4), View(8), View(16), View(5, "doubling")


def median(startup: int, warmup: int, **extra: Any) -> dict[str, Any]:
    return {"name": "median", "startup_trials": startup, "warmup_evals": warmup, **GUARD, **extra}


def halving(factor: int, **extra: Any) -> dict[str, Any]:
    """Successive halving from the first point (``min_resource``: the first rung's point index)."""
    return {"name": "successive_halving", "min_resource": 1, "reduction_factor": factor, **UNGUARDED, **extra}


class Forecast(BasePruner):
    """A learning-curve rule (not shipped; measured here): from its second point on, a trial's
    improvement per doubling of the budget is read off its last two points, doubled (optimism), and
    carried to the end of the budget as a power law; the trial stops when even that forecast cannot
    beat the best complete trial's final value. Acts once ``startup`` trials are complete."""

    def __init__(self, fractions: tuple[float, ...], startup: int = 2) -> None:
        self.fractions, self.startup = fractions, startup

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step, values = trial.last_step, trial.intermediate_values
        if step is None or step < 2 or step - 1 not in values:
            return False
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        finals = [
            t.intermediate_values[len(self.fractions)] for t in complete if len(self.fractions) in t.intermediate_values
        ]
        if len(finals) < self.startup:
            return False
        now, before = values[step], values[step - 1]
        at, then = self.fractions[step - 1], self.fractions[step - 2]
        per_doubling = min(1.0, now / before) ** (1.0 / math.log2(at / then)) if before > 0 else 1.0
        forecast = now * (per_doubling**2) ** math.log2(1.0 / at)
        return forecast > min(finals)


@dataclass(frozen=True)
class Candidate:
    view: View
    pruner: dict[str, Any]
    forecast: bool = False  # the learning-curve rule above instead of a spec's pruner


CANDIDATES: dict[str, Candidate] = {
    "none": Candidate(EVEN4, {"name": "none"}),
    "median 2/0, 4 even (shipped)": Candidate(EVEN4, median(2, 0)),
    "median 2/1, 8 even": Candidate(EVEN8, median(2, 1)),
    "median 2/0, 8 even": Candidate(EVEN8, median(2, 0)),
    "median 2/0, 16 even": Candidate(EVEN16, median(2, 0)),
    "median 2/0, 5 doubling": Candidate(DOUBLING5, median(2, 0)),
    "median 2/1, 5 doubling": Candidate(DOUBLING5, median(2, 1)),
    "median 3/1, 5 doubling": Candidate(DOUBLING5, median(3, 1)),
    "pctl 33 2/0, 5 doubling": Candidate(DOUBLING5, {**median(2, 0), "name": "percentile", "percentile": 33.0}),
    "pctl 33 2/1, 5 doubling": Candidate(DOUBLING5, {**median(2, 1), "name": "percentile", "percentile": 33.0}),
    "succ. halving 2, 16 even": Candidate(EVEN16, halving(2)),
    "succ. halving 2+guard, 16 even": Candidate(EVEN16, halving(2, **GUARD)),
    "succ. halving 3, 16 even": Candidate(EVEN16, halving(3)),
    "succ. halving 2, 5 doubling": Candidate(DOUBLING5, halving(2)),
    "succ. halving 2+guard, 5 doubling": Candidate(DOUBLING5, halving(2, **GUARD)),
    "succ. halving 2 from 1/8, 5 doubling": Candidate(DOUBLING5, halving(2, min_resource=2)),
    "s. halving 2 from 1/8+guard, 5 doubl.": Candidate(DOUBLING5, halving(2, min_resource=2, **GUARD)),
    "s. halving 3 from 1/8+guard, 5 doubl.": Candidate(DOUBLING5, halving(3, min_resource=2, **GUARD)),
    "s. halving 4 from 1/8+guard, 5 doubl.": Candidate(DOUBLING5, halving(4, min_resource=2, **GUARD)),
    "s. halving 5 from 1/8+guard, 5 doubl.": Candidate(DOUBLING5, halving(5, min_resource=2, **GUARD)),
    "s. halving 6 from 1/8+guard, 5 doubl.": Candidate(DOUBLING5, halving(6, min_resource=2, **GUARD)),
    "s. halving 4 from 1/8, 5 doubl.": Candidate(DOUBLING5, halving(4, min_resource=2)),
    # the oracle (--oracle) meets the bar at 30 trials keeping the best 7 by the metric at 1/8: these try it
    "pctl 25 2/1, 5 doubling": Candidate(DOUBLING5, {**median(2, 1), "name": "percentile", "percentile": 25.0}),
    "pctl 25 3/1, 5 doubling": Candidate(DOUBLING5, {**median(3, 1), "name": "percentile", "percentile": 25.0}),
    "pctl 20 3/1, 5 doubling": Candidate(DOUBLING5, {**median(3, 1), "name": "percentile", "percentile": 20.0}),
    "hyperband 3, 16 even": Candidate(EVEN16, {"name": "hyperband", "min_resource": 1, "reduction_factor": 3}),
    "forecast, 5 doubling": Candidate(DOUBLING5, {}, forecast=True),
    "forecast+guard, 5 doubling": Candidate(DOUBLING5, GUARD, forecast=True),
    # freeze-thaw: every trial paused at 1/8 until all reached it, the most that save 3x continued (>= 4)
    "rung at 1/8, 5 doubling": Candidate(DOUBLING5, {"name": "rung", "min_resource": 2}),
}
REFERENCE = "median 2/0, 4 even (shipped)"  # each row's regret is also given as its paired difference to this one
# Every replayed study starts with the digits spec's baseline (lr 4e-4, batch 32, T 500, linear), as
# the service enqueues it; its nearest cell has lr 10^-3.5 = 3.2e-4.
BASELINE = cell_key((-3.5, 32, 500, "linear"))


@dataclass(frozen=True)
class Replay:
    trained: float  # budgets trained, all trials together (a trial to the end is 1)
    reported: int  # evaluation points reported, all trials together
    best_kept: float  # best score among the trials trained to the end
    best_drawn: float  # best score among all drawn trials (what no pruning finds)
    complete: int  # trials trained to the end: what the report's score-based sections rank


def candidate_spec(candidate: Candidate, n_trials: int, name: str) -> Spec:
    """The digits spec with the candidate's pruner and evaluation points, for a study of ``n_trials``."""
    view = candidate.view
    train = {"num_evals": view.num_evals, "eval_spacing": view.spacing}
    raw = spec_with(DIGITS, pruner={} if candidate.forecast else candidate.pruner, merge_train=train)
    raw["study"] = {**raw["study"], "n_trials": n_trials}
    return spec_from_dict(raw, file=name)


def outcomes(candidate: Candidate, trials: list[Measured], name: str) -> list[tuple[int, float]]:
    """The candidate deciding on ``trials``' curves in order, the first one the baseline, in a study
    named ``name`` (Hyperband assigns brackets by it). Per trial, in order: (evaluation points
    trained, the score or inf when stopped). pruner: rung goes through the service's own pauses and
    decision (``tabular.replay_rung``)."""
    view = candidate.view
    spec = candidate_spec(candidate, len(trials), name)
    if spec.pruner.name == "rung":
        return rung_outcomes(spec, [m.seen(view) for m in trials], name)
    study = optuna.create_study(study_name=name, pruner=pruner_of(candidate, spec))
    out = []
    for i, m in enumerate(trials):
        trial = study.ask()
        if i == 0:
            trial.set_user_attr(BASELINE_ATTR, True)
        value, seen = replay_trial(study, trial, m.seen(view), view.num_evals)
        out.append((seen, value))
    return out


def replay(candidate: Candidate, trials: list[Measured], name: str) -> Replay:
    """What the candidate trained, reported and kept on ``trials`` (:func:`outcomes`)."""
    out = outcomes(candidate, trials, name)
    trained = sum(m.share_trained(points, candidate.view) for m, (points, _) in zip(trials, out, strict=True))
    finite = [m.score for m in trials if math.isfinite(m.score) and len(m.curve) == POINTS]
    kept = [value for _, value in out]
    done = sum(1 for v in kept if math.isfinite(v))
    return Replay(trained, sum(p for p, _ in out), min(kept, default=math.inf), min(finite, default=math.inf), done)


def pruner_of(candidate: Candidate, spec: Spec) -> BasePruner:
    if not candidate.forecast:
        return make_pruner(spec)
    rule = Forecast(eval_fractions(spec.train.num_evals, spec.train.eval_spacing))
    until = candidate.pruner.get("spare_until_complete", 0)
    return SpareAheadOfBaseline(rule, until) if until else rule


def rank_correlations(table: Table) -> list[float]:
    """Spearman's rho of the pruning metric at each measured point with the final score, over the
    cells that trained to the end with a finite score."""
    done = [m for m in table.cells.values() if math.isfinite(m.score) and len(m.curve) == POINTS]
    final = _ranks([m.score for m in done])
    return [float(np.corrcoef(_ranks([m.curve[k] for m in done]), final)[0, 1]) for k in range(POINTS)]


def _ranks(values: list[float]) -> np.ndarray:
    order = np.argsort(np.asarray(values), kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    return ranks


def figures(out: list[Replay], sd: float, base: float) -> dict[str, float]:
    """One row of the table: what a candidate did over the draws ``out`` (``base``: budgets trained
    without pruning over the same draws)."""
    repeats = len(out)
    regret = [o.best_kept - o.best_drawn for o in out]
    return {
        "compute_saved": base / sum(o.trained for o in out),
        "mean_regret": statistics.mean(min(x, 10 * sd) for x in regret),  # a lost-everything study counts 10 sd
        "mean_regret_sd": statistics.mean(min(x, 10 * sd) for x in regret) / sd,
        "share_regret_over_1_sd": sum(1 for x in regret if x > sd) / repeats,
        "share_best_kept": sum(1 for x in regret if x == 0) / repeats,
        "mean_complete": statistics.mean(o.complete for o in out),
        "share_under_4_complete": sum(1 for o in out if o.complete < 4) / repeats,
    }


TARGET_SAVED = 3.0  # the bar: at least this much compute saved at 30 trials ...
TARGET_REGRET_SD, TARGET_LOST = 0.1, 0.02  # ... for a mean regret and a share losing > 1 seed sd no larger


def oracle_bound(table: Table, size: int, repeats: int, point: int) -> dict[str, float]:
    """What any rule that stops trials by the pruning metric at ``point`` (of 16) could reach at best:
    one that knows every drawn trial's metric there in advance, for free, trains to the end the ``kept``
    trials whose metric there is best and stops the others at ``point``. ``kept`` is the most trials that
    still save TARGET_SAVED over the same draws as :func:`report`'s (at a point too late to save that
    much, one: the row cannot meet the bar); regret as there. A real rule that stops trials at that one
    point decides one trial at a time, before it has seen the others: it can only do worse. Rules
    with several rungs are not bounded by it."""
    draws = studies_of(table, size, repeats)
    full = View(POINTS)
    base = sum(m.share_trained(POINTS, full) for d in draws for m in d)

    def outcome(draw: list[Measured], kept: int) -> tuple[float, float]:
        ranked = sorted(
            range(len(draw)), key=lambda i: draw[i].curve[point - 1] if len(draw[i].curve) >= point else math.inf
        )
        alive = {i for i in ranked[:kept] if len(draw[i].curve) >= point}
        shares = [m.share_trained(POINTS, full) for m in draw]
        cost = sum(s if i in alive else min(point / POINTS, s) for i, s in enumerate(shares))
        drawn = [m.score for m in draw if math.isfinite(m.score) and len(m.curve) == POINTS]
        return cost, min((draw[i].score for i in alive), default=math.inf) - min(drawn, default=math.inf)

    kept = size
    while kept > 1 and base / sum(outcome(d, kept)[0] for d in draws) < TARGET_SAVED:
        kept -= 1
    results = [outcome(d, kept) for d in draws]
    regret = [min(r, 10 * table.seed_sd) / table.seed_sd for _, r in results]
    return {
        "point": point, "kept": kept, "compute_saved": base / sum(c for c, _ in results),
        "mean_regret_sd": statistics.mean(regret), "share_regret_over_1_sd": sum(r > 1 for r in regret) / repeats,
    }  # fmt: skip


def print_oracle(table: Table, sizes: list[int], repeats: int) -> list[dict[str, float]]:
    print(f"\n## {table.dataset}: the best a rule reading the pruning metric at one point could do ({repeats} draws)")
    print(f"{'trials':>6} {'point':>6} {'kept':>5} {'saved':>7} {'regret (sd)':>11} {'> 1 sd':>7}  meets the bar")
    rows = []
    for size in sizes:
        for point in (1, 2, 4, 8):
            b = oracle_bound(table, size, repeats, point)
            meets = (
                b["compute_saved"] >= TARGET_SAVED
                and b["mean_regret_sd"] <= TARGET_REGRET_SD
                and b["share_regret_over_1_sd"] <= TARGET_LOST
            )
            print(
                f"{size:>6} {point:>4}/{POINTS} {b['kept']:>5.0f} {b['compute_saved']:>6.2f}x "
                f"{b['mean_regret_sd']:>11.3f} {b['share_regret_over_1_sd']:>7.0%}  {'yes' if meets else 'no'}"
            )
            rows.append({"trials": size, **b})
    return rows


def studies_of(table: Table, size: int, repeats: int) -> list[list[Measured]]:
    """``repeats`` replayed studies of ``size`` trials: the baseline first, as the service enqueues
    it, then the other cells in random order (draw r is seeded r: every candidate sees the same)."""
    baseline = table.cells[BASELINE]
    cells = [m for key, m in table.cells.items() if key != BASELINE]
    return [[baseline, *random.Random(r).sample(cells, size - 1)] for r in range(repeats)]


def report(table: Table, sizes: list[int], repeats: int, only: str | None = None) -> dict[str, Any]:
    """Print the candidates' table of ``table``'s dataset; its figures, by name."""
    cells = [m for key, m in table.cells.items() if key != BASELINE]
    sd = table.seed_sd
    rho = rank_correlations(table)
    print(
        f"\n## {table.dataset}: {len(cells)} unpruned trials ({table.kimg:g} kimg, the pruning metric at {POINTS} "
        f"points); training seed sd {sd:.3g}; {repeats} random draws per study size"
    )
    print("rank correlation with the final score at k/16: " + " ".join(f"{k}:{r:.2f}" for k, r in enumerate(rho, 1)))
    print(
        f"{'trials':>6} {'candidate':>32} {'saved':>7} {'regret (sd)':>11} {'vs ref. (se)':>14} {'> 1 sd':>7} "
        f"{'best kept':>10} {'complete':>9} {'< 4 complete':>12} {'points':>7}"
    )
    rows = []
    for size in sizes:
        draws = studies_of(table, size, repeats)
        base = sum(o.trained for o in (replay(CANDIDATES["none"], d, f"none-{size}-{r}") for r, d in enumerate(draws)))
        reference: list[float] = []
        for label, candidate in CANDIDATES.items():
            if only is not None and label != REFERENCE and not re.search(only, label):
                continue
            out = [replay(candidate, d, f"replay-{size}-{r}") for r, d in enumerate(draws)]
            f = figures(out, sd, base)
            f["points_per_trial"] = sum(o.reported for o in out) / (size * repeats)
            regrets = [min(o.best_kept - o.best_drawn, 10 * sd) / sd for o in out]
            reference = regrets if label == REFERENCE else reference
            diffs = [a - b for a, b in zip(regrets, reference, strict=True)] if reference else [math.nan]
            f["regret_vs_reference_sd"] = statistics.mean(diffs)
            f["regret_vs_reference_se"] = statistics.stdev(diffs) / math.sqrt(len(diffs)) if reference else math.nan
            print(
                f"{size:>6} {label:>32} {f['compute_saved']:>6.2f}x {f['mean_regret_sd']:>11.3f} "
                f"{f['regret_vs_reference_sd']:>+7.3f} ({f['regret_vs_reference_se']:.3f}) "
                f"{f['share_regret_over_1_sd']:>7.0%} {f['share_best_kept']:>10.0%} {f['mean_complete']:>9.1f} "
                f"{f['share_under_4_complete']:>12.0%} {f['points_per_trial']:>7.1f}",
                flush=True,
            )
            view = {"num_evals": candidate.view.num_evals, "eval_spacing": candidate.view.spacing}
            rows.append({"trials": size, "candidate": label, "points": view, "pruner": candidate.pruner, **f})
    return {
        "dataset": table.dataset, "unpruned_trials": len(cells), "kimg": table.kimg, "points_measured": POINTS,
        "seed_sd": sd, "draws": repeats, "rank_correlation_with_final": rho, "rows": rows,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--sizes", default="10,30,100")
    parser.add_argument("--oracle", action="store_true", help="only the bound any metric-reading rule is under")
    parser.add_argument("--only", help="only the candidates whose names match this regular expression (and the ref.)")
    add_table_arguments(parser)
    args = parser.parse_args()
    quiet()
    started = time.perf_counter()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.oracle:
        bounds = {table.dataset: print_oracle(table, sizes, args.repeats) for table in tables_of(args)}
        write_result("pruning_oracle", {"repeats": args.repeats, "sizes": sizes, "kimg": args.kimg, "bounds": bounds})
        return
    datasets = [report(table, sizes, args.repeats, args.only) for table in tables_of(args)]
    seconds = time.perf_counter() - started
    print(f"\ntotal {seconds:.0f} s (tables' training and scoring: measured once, cached)")
    result = {
        "repeats": args.repeats, "sizes": sizes, "kimg": args.kimg, "datasets": datasets, "total_seconds": seconds,
    }  # fmt: skip
    write_result("pruning_replay" if args.only is None else "pruning_replay_only", result)  # a subset: its own file


if __name__ == "__main__":
    main()
