"""What pruning buys: the same 12 trials (drawn once from the digits search space and enqueued, so
every study trains identical configurations with identical seeds) run without pruning and with each
pruner. Prints each study's training compute (kimg trained and seconds), its best classifier-FID, and
the compute ratio against no pruning; then retrains the unpruned study's best configuration with 2
other seeds, so each best FID can be read against the seed-to-seed spread.

    .venv/bin/python benchmarks/pruning_savings.py [--trials 12] [--kimg 8]

Goal: at least 2× less compute at a best FID within the seed-to-seed spread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from optuna.trial import TrialState

sys.path.insert(0, str(Path(__file__).parent.parent))

from benchmarks.common import DIGITS, best_value, draw_configurations, quiet, run_study, spec_with, trained_kimg

PRUNERS: dict[str, dict[str, Any]] = {
    "none": {"name": "none"},
    "median": {"name": "median", "startup_trials": 3, "warmup_evals": 1},
    "hyperband": {"name": "hyperband", "min_resource": 1, "reduction_factor": 3},
    "successive_halving": {"name": "successive_halving", "min_resource": 1, "reduction_factor": 3},
}


def base(trials: int, kimg: float) -> dict[str, Any]:
    return spec_with(
        DIGITS,
        merge_train={"kimg": kimg},
        sampling={"guidance_scale": 2.0, "ddim_steps": 20},
        sampler={"name": "random", "seed": 0},
        baselines=[],
        study={**DIGITS["study"], "n_trials": trials},
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--kimg", type=float, default=8.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    quiet()
    torch.set_num_threads(args.threads)
    configs = draw_configurations(args.trials, lr_exponents=(-4, -1.5))
    rows: dict[str, tuple[float, float, float, int, int]] = {}
    winner: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, pruner in PRUNERS.items():
            raw = spec_with(base(args.trials, args.kimg), pruner=pruner, merge_study={"name": f"prune-{name}"})
            study, _ = run_study(raw, Path(tmp) / name, enqueue=configs)
            trials = study.get_trials(deepcopy=False)
            kimg = sum(trained_kimg(t) for t in trials)
            seconds = sum(
                float(t.user_attrs.get("train_seconds", 0.0)) for t in trials if t.state == TrialState.COMPLETE
            )
            seconds += sum(kimg_seconds(t, trials) for t in trials if t.state == TrialState.PRUNED)
            pruned = sum(1 for t in trials if t.state == TrialState.PRUNED)
            rows[name] = (kimg, seconds, best_value(study), pruned, len(trials))
            if name == "none":
                winner = dict(study.best_trial.params)
        seeds = [rows["none"][2]]
        with_seed = {**DIGITS["search"], "seed": {"type": "categorical", "choices": [0, 1, 2]}}
        for seed in (1, 2):
            raw = spec_with(
                base(1, args.kimg), pruner={"name": "none"}, search=with_seed, merge_study={"name": f"seed-{seed}"}
            )
            study, _ = run_study(raw, Path(tmp) / f"seed{seed}", enqueue=[{**winner, "seed": seed}])
            seeds.append(best_value(study))
    spread = statistics.stdev(seeds)
    print(f"{args.trials} enqueued trials, digits 16 px, {args.kimg:g} kimg each, 4 evaluation points")
    print(f"{'pruner':>20} {'pruned':>7} {'kimg trained':>13} {'train s':>8} {'compute ratio':>14} {'best FID':>9}")
    for name, (kimg, seconds, best, pruned, n) in rows.items():
        ratio = rows["none"][0] / kimg
        print(f"{name:>20} {pruned:>3}/{n:<3} {kimg:13.1f} {seconds:8.1f} {ratio:13.2f}x {best:9.4g}")
    print(
        f"best configuration retrained with seeds 0, 1, 2: FID {', '.join(f'{s:.4g}' for s in seeds)} (sd {spread:.3g})"
    )
    for name, (_, _, best, _, _) in rows.items():
        gap = best - rows["none"][2]
        verdict = "within" if abs(gap) <= 2 * spread else "outside"
        print(f"{name:>20}: best FID {gap:+.3g} from no pruning, {verdict} 2 sd of the seed-to-seed spread")


def kimg_seconds(t: Any, trials: list[Any]) -> float:
    """A pruned trial's training seconds, from the seconds per kimg of complete trials at its batch size."""
    same = [
        u for u in trials if u.state == TrialState.COMPLETE and u.params.get("batch_size") == t.params.get("batch_size")
    ]
    if not same:
        return 0.0
    per_kimg = statistics.fmean(float(u.user_attrs["train_seconds"]) / float(u.user_attrs["budget_kimg"]) for u in same)
    return per_kimg * trained_kimg(t)


if __name__ == "__main__":
    main()
