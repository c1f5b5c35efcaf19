"""What pruning buys: the same trials (drawn once from the digits search space and enqueued, so every
study trains identical configurations with identical seeds) run without pruning and with the median
pruner, for real. Training is deterministic, so a pruned trial's curve is its unpruned curve cut
short: every pruner (median, Hyperband, successive halving) is also replayed on the unpruned study's
curves with the real Optuna pruner, and the median replay must agree exactly with the real median
run — the check that the replays of the others are faithful. Prints each pruner's training compute,
best classifier-FID and compute ratio against no pruning; then retrains the unpruned study's best
configuration with 2 other seeds, so each best FID is read against the seed-to-seed spread.

    .venv/bin/python -m benchmarks.pruning_savings [--trials 10] [--kimg 6]

Goal: at least 2x less compute at a best FID within the seed-to-seed spread.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.trial import FrozenTrial, TrialState

from benchmarks.common import (
    DIGITS,
    best_value,
    draw_configurations,
    quiet,
    run_study,
    spec_with,
    trained_kimg,
    write_result,
)
from benchmarks.tabular import NUM_EVALS, Measured, replay_trial
from hpo.analysis.record import PRUNING_METRIC, TrialRecord
from hpo.service.pruning import make_pruner
from hpo.spec.spec import spec_from_dict

PRUNERS: dict[str, dict[str, Any]] = {
    "median": {"name": "median", "startup_trials": 3, "warmup_evals": 1},
    "hyperband": {"name": "hyperband", "min_resource": 1, "reduction_factor": 3},
    "successive_halving": {"name": "successive_halving", "min_resource": 1, "reduction_factor": 3},
}
Outcome = list[tuple[int, float | None]]  # per trial: evaluation points trained, final FID (None if pruned)


def base(trials: int, kimg: float, name: str, pruner: dict[str, Any]) -> dict[str, Any]:
    """The study's spec; its evaluation points are the replay's budget (``tabular.NUM_EVALS``, what
    ``replay_trial`` takes for a trial trained to the end), so the real runs and the replays agree."""
    return spec_with(
        DIGITS,
        merge_train={"kimg": kimg, "num_evals": NUM_EVALS},
        sampling={"guidance_scale": 2.0, "steps": 20},
        sampler={"name": "random", "seed": 0},
        pruner=pruner,
        baselines=[],
        study={**DIGITS["study"], "n_trials": trials, "name": name},
    )


def outcome(trials: list[FrozenTrial], evals: int) -> Outcome:
    out: Outcome = []
    for t in sorted(trials, key=lambda t: t.number):
        curve = TrialRecord.of(t).curve
        reached = max(map(int, curve)) if curve else 0
        out.append((evals if t.state == TrialState.COMPLETE else reached, t.value))
    return out


def measured(t: FrozenTrial) -> Measured:
    """A recorded trial as the tabular replay reads one: its pruning metric at evaluation points
    1..NUM_EVALS and its final score (inf without one)."""
    curve = TrialRecord.of(t).curve
    points = tuple(curve[str(k)][PRUNING_METRIC] for k in range(1, NUM_EVALS + 1) if str(k) in curve)
    return Measured(math.inf if t.value is None else t.value, points)


def replay(raw: dict[str, Any], unpruned: list[FrozenTrial]) -> Outcome:
    """The pruner of ``raw`` deciding on the unpruned trials' recorded curves, in the same order and
    under the same study name (Hyperband assigns brackets by it)."""
    spec = spec_from_dict(raw)
    assert spec.train.num_evals == NUM_EVALS, "replay_trial takes a trial of NUM_EVALS points as trained to the end"
    study = optuna.create_study(study_name=spec.study.name, pruner=make_pruner(spec))
    out: Outcome = []
    for t in sorted(unpruned, key=lambda t: t.number):
        value, trained = replay_trial(study, study.ask(), measured(t))
        out.append((trained, value if math.isfinite(value) else None))
    return out


def summary(out: Outcome, kimg: float, evals: int) -> tuple[float, float, int]:
    """(kimg trained, best FID, trials pruned)."""
    trained = sum(kimg * k / evals for k, _ in out)
    finals = [v for _, v in out if v is not None]
    return trained, min(finals), sum(1 for _, v in out if v is None)


def table(unpruned: Outcome, replays: dict[str, Outcome], kimg: float) -> list[dict[str, Any]]:
    """One row per pruner, no pruning first: trials pruned, kimg trained, compute ratio against no
    pruning, best FID and its difference to no pruning's."""
    base_kimg, base_best, _ = summary(unpruned, kimg, NUM_EVALS)
    rows: list[dict[str, Any]] = [
        {"pruner": "none", "pruned": 0, "kimg_trained": base_kimg, "compute_ratio": 1.0, "best_fid": base_best,
         "vs_none": 0.0},
    ]  # fmt: skip
    for name, out in replays.items():
        trained, best, pruned = summary(out, kimg, NUM_EVALS)
        rows.append({"pruner": name, "pruned": pruned, "kimg_trained": trained, "compute_ratio": base_kimg / trained,
                     "best_fid": best, "vs_none": best - base_best})  # fmt: skip
    return rows


def seed_scores(unpruned: optuna.Study, kimg: float, folder: Path) -> list[float]:
    """The unpruned study's best FID, then its best configuration's retrained with seeds 1 and 2."""
    winner = dict(unpruned.best_trial.params)
    seeds = [best_value(unpruned)]
    with_seed = {**DIGITS["search"], "seed": {"type": "categorical", "choices": [0, 1, 2]}}
    for seed in (1, 2):
        raw = spec_with(base(1, kimg, f"seed-{seed}", {"name": "none"}), search=with_seed)
        study, _ = run_study(raw, folder / f"s{seed}", enqueue=[{**winner, "seed": seed}])
        seeds.append(best_value(study))
    return seeds


def measure(trials: int, kimg: float) -> dict[str, Any]:
    """Run the studies and replays; the figures ``show`` prints, by name."""
    configs = draw_configurations(trials, lr_exponents=(-4, -1.5))
    with tempfile.TemporaryDirectory() as tmp:
        none, _ = run_study(base(trials, kimg, "prune-none", {"name": "none"}), Path(tmp) / "n", enqueue=configs)
        real_median, _ = run_study(base(trials, kimg, "prune-median", PRUNERS["median"]), Path(tmp) / "m",
                                   enqueue=configs)  # fmt: skip
        unpruned = none.get_trials(deepcopy=False)
        real = outcome(real_median.get_trials(deepcopy=False), NUM_EVALS)
        replays = {name: replay(base(trials, kimg, f"prune-{name}", p), unpruned) for name, p in PRUNERS.items()}
        assert [k for k, _ in replays["median"]] == [k for k, _ in real], (replays["median"], real)
        seeds = seed_scores(none, kimg, Path(tmp))
    return {
        "dataset": DIGITS["data"]["source"], "image_size": DIGITS["data"]["image_size"], "trials": trials,
        "kimg": kimg, "num_evals": NUM_EVALS,
        "real_median_kimg": sum(trained_kimg(t) for t in real_median.get_trials(deepcopy=False)),
        "pruners": table(outcome(unpruned, NUM_EVALS), replays, kimg),
        "seed_scores": seeds, "seed_sd": statistics.stdev(seeds),
    }  # fmt: skip


def show(r: dict[str, Any]) -> None:
    trials = r["trials"]
    print(f"{trials} enqueued trials, digits 16 px, {r['kimg']:g} kimg each, {r['num_evals']} evaluation points")
    print(
        f"real median run: {r['real_median_kimg']:.1f} kimg trained; "
        "its replay on the unpruned curves prunes the same trials"
    )
    print(f"{'pruner':>20} {'pruned':>7} {'kimg trained':>13} {'compute ratio':>14} {'best FID':>9} {'vs none':>8}")
    for row in r["pruners"]:
        print(
            f"{row['pruner']:>20} {row['pruned']:>3}/{trials:<3} {row['kimg_trained']:13.1f} "
            f"{row['compute_ratio']:13.2f}x {row['best_fid']:9.4g} {row['vs_none']:+8.3g}"
        )
    seeds = ", ".join(f"{s:.4g}" for s in r["seed_scores"])
    print(f"best configuration retrained with seeds 0, 1, 2: {seeds} (sd {r['seed_sd']:.3g})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--kimg", type=float, default=6.0)
    args = parser.parse_args()
    quiet()
    torch.set_num_threads(2)
    result = measure(args.trials, args.kimg)
    show(result)
    write_result("pruning_savings", result)


if __name__ == "__main__":
    main()
