"""`hpo run`'s search against its deadline: the pruner it plans (successive halving 2 from 1/16 with
the guard) or the rung at 1/8 (what `hpo init`'s GPU specs use), replayed on the tabular curves.

`hpo run` gives its search a share of the budget and sizes the number of trials to it
(``hpo.run.split.plan_search``: ``n`` trials at the expected cost of one, ``Costs.expected_s``); the
search ends at that deadline and what it leaves goes to the final run. A replayed search is one
worker (the CPU default) running a draw of ``n`` trials of the tabular tables (``pruning_replay``'s
draws: the baseline first, random search) in the order the service runs them: under halving each
trial to its stop; under the rung every trial to the rung (or where it diverged), then the
continued ones, best first as the decision queues them, to the end. Time is in trials' training to
the end (1), a complete trial adding its sampling sweep (``--sweep-share`` of that); the evaluation
points are counted in the training. The deadline is the planned search time divided by
``--slow``: the trials took that many times as long as `hpo run` timed them. A trial still running at
the deadline is stopped (its worker's trial is queued, not complete). Per study size, pruner and
slowdown: the best complete trial's regret against the best of the draw (mean, in training-seed sd;
a search with no complete trial counts 10 sd, as ``pruning_replay``'s rows), the share of searches
that lose more than 1 sd, the share with no complete trial (`hpo run` stops there: "the search
completed no trial"), complete trials, and the search time used (the rest goes to the final run).

    .venv/bin/python -m benchmarks.run_search_replay [--repeats 300] [--sizes 10,30,100] [--slow 1,1.5,2,3]

The draws above are random search. `hpo run`'s spec samples with TPE (constant liar; ``sampler: auto``
beside a pruner), which learns from the trials it has seen, so ``--tpe`` runs the same search through
``parallel_search.simulate`` (one worker, the service's sampler and pruner on one study, the sweep
holding the worker after a complete trial) over ``--repeats`` sampler seeds, and reads each
deadline off the times the complete trials ended. There is no fixed draw to take the regret against:
the cells give the best complete trial's gap to the table's best cell in training-seed sd (a search
with none counts 10 sd), mean ± se over seeds; seeds do not pair across pruners once they diverge.

    .venv/bin/python -m benchmarks.run_search_replay --tpe --repeats 50 --sizes 10,30
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass

from benchmarks import parallel_search
from benchmarks.common import quiet, write_result
from benchmarks.pruning_replay import CANDIDATES, Candidate, outcomes, studies_of
from benchmarks.tabular import POINTS, Measured, Table, add_table_arguments, tables_of
from hpo.files import JsonObject
from hpo.run.split import Costs
from hpo.spec.rules import rung_continued

PRUNERS: dict[str, Candidate] = {
    "halving 2 from 1/16 + guard (hpo run)": CANDIDATES["succ. halving 2+guard, 5 doubling"],
    "rung at 1/8": CANDIDATES["rung at 1/8, 5 doubling"],
}
# A complete trial's sampling sweep against its training, digits at a 10-minute CPU budget
# (benchmarks/results/run_budget/digits-run-50_10-600-s1.json: a trial's sweep 22.6 s, its planned final
# sweep 26 s over SWEEP_MARGIN 1.15; its 9.8 kimg of training 56.7 s at the final run's 41.0 kimg in 237 s).
SWEEP_SHARE = 0.40
RUNG_POINT = 2  # the rung's evaluation point (min_resource) of the 5 doubling ones: 1/8


@dataclass(frozen=True)
class Stretch:
    """One worker's run of one trial: how long it took, and the score it ends with (inf: stopped,
    paused or diverged)."""

    seconds: float
    value: float


def stretches(candidate: Candidate, trials: list[Measured], name: str, sweep: float) -> list[Stretch]:
    """The trials' runs in the order one worker takes them (see the module's docstring)."""
    view = candidate.view
    out = outcomes(candidate, trials, name)
    shares = [m.share_trained(points, view) for m, (points, _) in zip(trials, out, strict=True)]
    if candidate.pruner.get("name") != "rung":
        return [Stretch(s + (sweep if math.isfinite(v) else 0.0), v) for s, (_, v) in zip(shares, out, strict=True)]
    rung = view.indices[RUNG_POINT - 1] / POINTS
    paused = [Stretch(min(s, rung), math.inf) for s in shares]
    reached = [i for i, m in enumerate(trials) if len(m.seen(view).curve) >= RUNG_POINT]
    reached.sort(key=lambda i: (trials[i].seen(view).curve[RUNG_POINT - 1], i))  # service/rung.py's ranking
    continued = reached[: rung_continued(len(trials), rung)]  # those that diverge after the rung too
    assert {i for i, (_, v) in enumerate(out) if math.isfinite(v)} <= set(continued), "not the decision's choice"
    finished = [Stretch(shares[i] - rung + (sweep if math.isfinite(out[i][1]) else 0.0), out[i][1]) for i in continued]
    return paused + finished


def by_deadline(runs: list[Stretch], deadline: float) -> tuple[list[float], float]:
    """The scores of the runs that ended by ``deadline``, and the time used (at most the deadline)."""
    clock, done = 0.0, list[float]()
    for run in runs:
        if clock + run.seconds > deadline:
            return done, deadline
        clock += run.seconds
        if math.isfinite(run.value):
            done.append(run.value)
    return done, clock


def planned_search(n: int, sweep: float) -> float:
    """The search time in which `hpo run` plans ``n`` trials, in trials' training: ``n`` expected costs
    (``plan_search`` floors the count, so its search may be up to one expected cost longer: this is
    the shortest deadline that plans ``n``)."""
    first = CANDIDATES["rung at 1/8, 5 doubling"].view.fractions[0]
    return n * Costs(kimg=1.0, train_s=1.0, sweep_s=sweep, first_point=first, min_kimg=1.0).expected_s


def report(
    table: Table, sizes: list[int], repeats: int, slowdowns: list[float], sweep: float
) -> list[dict[str, float | str]]:
    sd = table.seed_sd
    print(f"\n## {table.dataset}: training seed sd {sd:.3g}; {repeats} draws per size; sweep {sweep:g} of a trial")
    print(
        f"{'trials':>6} {'pruner':>38} {'slower':>6} {'regret (sd)':>11} {'vs halving (se)':>16} {'> 1 sd':>7} "
        f"{'none complete':>13} "
        f"{'complete':>8} {'search used':>11}"
    )
    rows: list[dict[str, float | str]] = []
    for size in sizes:
        draws = studies_of(table, size, repeats)
        best = [min(m.score for m in d if math.isfinite(m.score) and len(m.curve) == POINTS) for d in draws]
        planned = planned_search(size, sweep)
        reference: dict[float, list[float]] = {}  # the first pruner's regrets (hpo run's), per slowdown
        for label, candidate in PRUNERS.items():
            runs = [stretches(candidate, d, f"run-{size}-{r}", sweep) for r, d in enumerate(draws)]
            for slow in slowdowns:
                ended = [by_deadline(r, planned / slow) for r in runs]
                regret = [
                    min(min(done, default=math.inf) - b, 10 * sd) / sd for (done, _), b in zip(ended, best, strict=True)
                ]
                diffs = [a - b for a, b in zip(regret, reference.setdefault(slow, regret), strict=True)]
                row: dict[str, float | str] = {
                    "trials": size, "pruner": label, "slower": slow,
                    "mean_regret_sd": statistics.mean(regret),
                    "regret_vs_halving_sd": statistics.mean(diffs),
                    "regret_vs_halving_se": statistics.stdev(diffs) / math.sqrt(repeats),
                    "share_regret_over_1_sd": sum(x > 1 for x in regret) / repeats,
                    "share_none_complete": sum(not done for done, _ in ended) / repeats,
                    "mean_complete": statistics.mean(len(done) for done, _ in ended),
                    "search_used": statistics.mean(used for _, used in ended) / (planned / slow),
                }  # fmt: skip
                print(
                    f"{size:>6} {label:>38} {slow:>5g}x {row['mean_regret_sd']:>11.3f} "
                    f"{row['regret_vs_halving_sd']:>+8.3f} ({row['regret_vs_halving_se']:.3f}) "
                    f"{row['share_regret_over_1_sd']:>7.0%} {row['share_none_complete']:>13.0%} "
                    f"{row['mean_complete']:>8.1f} {row['search_used']:>11.0%}",
                    flush=True,
                )
                rows.append(row)
    return rows


# GPU_TPE: the sampler of hpo init's GPU plan (spec_yaml.sampler_and_pruner)
GPU_TPE: JsonObject = {
    "name": "tpe",
    "n_startup_trials": 8,
}  # the sampler of hpo init's GPU plan (spec_yaml.sampler_and_pruner)
TPE_PRUNERS = {  # parallel_search's names of the two pruners above
    "halving 2 from 1/16 + guard (hpo run)": "halving 2+guard, 5 doubling",
    "rung at 1/8": "rung at 1/8, 5 doubling",
}


def tpe_report(
    table: Table, sizes: list[int], seeds: int, slowdowns: list[float], sweep: float
) -> list[dict[str, float | str]]:
    sd, top = table.seed_sd, table.best()
    print(f"\n## {table.dataset}, TPE: training seed sd {sd:.3g}; {seeds} sampler seeds per size; sweep {sweep:g}")
    print(f"{'trials':>6} {'pruner':>38} {'slower':>6} {'gap (sd)':>14} {'none complete':>13} {'complete':>8}")
    rows: list[dict[str, float | str]] = []
    tpe = GPU_TPE
    for size in sizes:
        planned = planned_search(size, sweep)
        for label, name in TPE_PRUNERS.items():
            pruner = parallel_search.PRUNERS[name]
            specs = [parallel_search.spec_for(tpe, pruner, s, size) for s in range(seeds)]
            out = [parallel_search.simulate(table, spec, pruner[0], size, 1, sweep) for spec in specs]
            for slow in slowdowns:
                done = [[score for end, score in o.completions if end <= planned / slow] for o in out]
                gap = [min(min(d, default=math.inf) - top, 10 * sd) / sd for d in done]
                row: dict[str, float | str] = {
                    "trials": size, "pruner": label, "slower": slow, "gap_sd": statistics.mean(gap),
                    "gap_se": statistics.stdev(gap) / math.sqrt(seeds),
                    "share_none_complete": sum(not d for d in done) / seeds,
                    "mean_complete": statistics.mean(len(d) for d in done),
                }  # fmt: skip
                print(
                    f"{size:>6} {label:>38} {slow:>5g}x {row['gap_sd']:>7.2f} ± {row['gap_se']:.2f} "
                    f"{row['share_none_complete']:>13.0%} {row['mean_complete']:>8.1f}",
                    flush=True,
                )
                rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--sizes", default="10,30,100")
    parser.add_argument("--slow", default="1,1.5,2,3", help="how many times slower the trials ran than timed")
    parser.add_argument("--sweep-share", type=float, default=SWEEP_SHARE)
    parser.add_argument(
        "--tpe", action="store_true", help="TPE's search over --repeats sampler seeds, not random draws"
    )
    add_table_arguments(parser)
    args = parser.parse_args()
    quiet()
    started = time.perf_counter()
    sizes = [int(s) for s in args.sizes.split(",")]
    slowdowns = [float(s) for s in args.slow.split(",")]
    rows = tpe_report if args.tpe else report
    datasets = {t.dataset: rows(t, sizes, args.repeats, slowdowns, args.sweep_share) for t in tables_of(args)}
    seconds = time.perf_counter() - started
    print(f"\ntotal {seconds:.0f} s")
    result = {"repeats": args.repeats, "sweep_share": args.sweep_share, "datasets": datasets, "total_seconds": seconds}
    write_result("run_search_replay_tpe" if args.tpe else "run_search_replay", result)


if __name__ == "__main__":
    main()
