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
import statistics
import tempfile
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.trial import FrozenTrial, TrialState

from benchmarks.common import DIGITS, best_value, draw_configurations, quiet, run_study, spec_with, trained_kimg
from hpo.analysis.record import PRUNING_METRIC
from hpo.service.pruning import make_pruner
from hpo.spec.spec import spec_from_dict

PRUNERS: dict[str, dict[str, Any]] = {
    "median": {"name": "median", "startup_trials": 3, "warmup_evals": 1},
    "hyperband": {"name": "hyperband", "min_resource": 1, "reduction_factor": 3},
    "successive_halving": {"name": "successive_halving", "min_resource": 1, "reduction_factor": 3},
}
Outcome = list[tuple[int, float | None]]  # per trial: evaluation points trained, final FID (None if pruned)


def base(trials: int, kimg: float, name: str, pruner: dict[str, Any]) -> dict[str, Any]:
    return spec_with(
        DIGITS,
        merge_train={"kimg": kimg},
        sampling={"guidance_scale": 2.0, "ddim_steps": 20},
        sampler={"name": "random", "seed": 0},
        pruner=pruner,
        baselines=[],
        study={**DIGITS["study"], "n_trials": trials, "name": name},
    )


def outcome(trials: list[FrozenTrial], evals: int) -> Outcome:
    out: Outcome = []
    for t in sorted(trials, key=lambda t: t.number):
        reached = max(map(int, t.user_attrs["curve"])) if t.user_attrs.get("curve") else 0
        out.append((evals if t.state == TrialState.COMPLETE else reached, t.value))
    return out


def replay(raw: dict[str, Any], unpruned: list[FrozenTrial]) -> Outcome:
    """The pruner of ``raw`` deciding on the unpruned trials' recorded curves, in the same order and
    under the same study name (Hyperband assigns brackets by it)."""
    spec = spec_from_dict(raw)
    study = optuna.create_study(study_name=spec.study.name, pruner=make_pruner(spec))
    out: Outcome = []
    for t in sorted(unpruned, key=lambda t: t.number):
        trial = study.ask()
        curve = t.user_attrs["curve"]
        for k in range(1, spec.train.num_evals + 1):
            trial.report(curve[str(k)][PRUNING_METRIC], step=k)
            if trial.should_prune():
                study.tell(trial, state=TrialState.PRUNED)
                out.append((k, None))
                break
        else:
            study.tell(trial, t.value)
            out.append((spec.train.num_evals, t.value))
    return out


def summary(out: Outcome, kimg: float, evals: int) -> tuple[float, float, int]:
    """(kimg trained, best FID, trials pruned)."""
    trained = sum(kimg * k / evals for k, _ in out)
    finals = [v for _, v in out if v is not None]
    return trained, min(finals), sum(1 for _, v in out if v is None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--kimg", type=float, default=6.0)
    args = parser.parse_args()
    quiet()
    torch.set_num_threads(2)
    configs = draw_configurations(args.trials, lr_exponents=(-4, -1.5))
    evals = int(DIGITS["train"]["num_evals"])
    with tempfile.TemporaryDirectory() as tmp:
        none, _ = run_study(
            base(args.trials, args.kimg, "prune-none", {"name": "none"}), Path(tmp) / "n", enqueue=configs
        )
        real_median, _ = run_study(base(args.trials, args.kimg, "prune-median", PRUNERS["median"]), Path(tmp) / "m",
                                   enqueue=configs)  # fmt: skip
        unpruned = none.get_trials(deepcopy=False)
        real = outcome(real_median.get_trials(deepcopy=False), evals)
        replays = {
            name: replay(base(args.trials, args.kimg, f"prune-{name}", p), unpruned) for name, p in PRUNERS.items()
        }
        assert [k for k, _ in replays["median"]] == [k for k, _ in real], (replays["median"], real)
        winner = dict(none.best_trial.params)
        seeds = [best_value(none)]
        with_seed = {**DIGITS["search"], "seed": {"type": "categorical", "choices": [0, 1, 2]}}
        for seed in (1, 2):
            raw = spec_with(base(1, args.kimg, f"seed-{seed}", {"name": "none"}), search=with_seed)
            study, _ = run_study(raw, Path(tmp) / f"s{seed}", enqueue=[{**winner, "seed": seed}])
            seeds.append(best_value(study))
    real_kimg = sum(trained_kimg(t) for t in real_median.get_trials(deepcopy=False))
    spread = statistics.stdev(seeds)
    base_kimg, base_best, _ = summary(outcome(unpruned, evals), args.kimg, evals)
    print(f"{args.trials} enqueued trials, digits 16 px, {args.kimg:g} kimg each, {evals} evaluation points")
    print(f"real median run: {real_kimg:.1f} kimg trained; its replay on the unpruned curves prunes the same trials")
    print(f"{'pruner':>20} {'pruned':>7} {'kimg trained':>13} {'compute ratio':>14} {'best FID':>9} {'vs none':>8}")
    print(f"{'none':>20} {0:>3}/{args.trials:<3} {base_kimg:13.1f} {1.0:13.2f}x {base_best:9.4g} {0.0:+8.3g}")
    for name, out in replays.items():
        kimg, best, pruned = summary(out, args.kimg, evals)
        ratio = base_kimg / kimg
        print(
            f"{name:>20} {pruned:>3}/{args.trials:<3} {kimg:13.1f} {ratio:13.2f}x {best:9.4g} {best - base_best:+8.3g}"
        )
    print(f"best configuration retrained with seeds 0, 1, 2: {', '.join(f'{s:.4g}' for s in seeds)} (sd {spread:.3g})")


if __name__ == "__main__":
    main()
