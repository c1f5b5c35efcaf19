"""What pruning buys: the same trials (drawn once from the digits search space and enqueued, so every
study trains identical configurations with identical seeds, on digits or on photographs the replay
tables never saw) run without pruning and with the median
pruner, for real. Training is deterministic, so a pruned trial's curve is its unpruned curve cut
short: every pruner (median, Hyperband, successive halving) is also replayed on the unpruned study's
curves with the real Optuna pruner, and the median replay must agree exactly with the real median
run — the check that the replays of the others are faithful. Prints each pruner's training compute,
best classifier-FID and compute ratio against no pruning; then retrains the unpruned study's best
configuration with 2 other seeds, so each best FID is read against the seed-to-seed spread.

    .venv/bin/python -m benchmarks.pruning_savings [--trials 10] [--kimg 6] [--real median]
        [--num-evals 4] [--spacing even] [--dataset digits]

``--real`` names the pruner run for real (its replay must prune exactly the same trials);
``--num-evals`` and ``--spacing`` place the evaluation points of every study (docs/spec.md);
``--dataset photos`` trains on scikit-learn's two photographs cut in patches (``common.photo_folder``):
a search space held out from the tabular replay, which measured digits and shapes.

Goal: at least 2x less compute at a best FID within the seed-to-seed spread.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.trial import FrozenTrial, TrialState

from benchmarks.common import (
    DIGITS,
    best_value,
    draw_configurations,
    photo_folder,
    quiet,
    run_study,
    spec_with,
    trained_kimg,
    write_result,
)
from benchmarks.tabular import NUM_EVALS, Measured, View, replay_trial
from benchmarks.tabular import replay_rung as rung_outcomes
from hpo.files import JsonObject
from hpo.records import PRUNING_METRIC, TrialRecord
from hpo.service.pruning import make_pruner
from hpo.service.trials import continued_numbers
from hpo.spec.spec import spec_from_dict

PRUNERS: dict[str, JsonObject] = {
    "median": {"name": "median", "startup_trials": 3, "warmup_evals": 1},
    "hyperband": {"name": "hyperband", "min_resource": 1, "reduction_factor": 3},
    "successive_halving": {"name": "successive_halving", "min_resource": 1, "reduction_factor": 3},
    "halving2_guarded": {"name": "successive_halving", "min_resource": 1, "reduction_factor": 2,
                         "spare_until_complete": 4},
    "rung": {"name": "rung", "min_resource": 2},  # at 5 doubling points: every trial paused at 1/8
}  # fmt: skip
Outcome = list[tuple[int, float | None]]  # per trial: evaluation points trained, final FID (None if pruned)


POINTS = View(NUM_EVALS)  # every study's evaluation points (the replays take all of them as trained to the end)
PHOTOS = Path("/tmp/hpo-bench-cache")  # where the photographs' patches are cut once
DATASETS: dict[str, Callable[[], JsonObject]] = {
    "digits": lambda: {"source": "digits"},
    "photos": lambda: {"source": "folder", "path": str(photo_folder(PHOTOS))},
}


def base(
    trials: int,
    kimg: float,
    name: str,
    pruner: JsonObject,
    points: View = POINTS,
    data: JsonObject | None = None,
) -> JsonObject:
    """The study's spec at ``points`` on ``data`` (digits by default), so the real runs and the replays agree."""
    return spec_with(
        DIGITS,
        merge_data=data or {},
        merge_train={"kimg": kimg, "num_evals": points.num_evals, "eval_spacing": points.spacing},
        sampling={"guidance_scale": 2.0, "steps": 20},
        sampler={"name": "random", "seed": 0},
        pruner=pruner,
        baselines=[],
        study={**DIGITS["study"], "n_trials": trials, "name": name},
    )


def outcome(trials: list[FrozenTrial], evals: int) -> Outcome:
    """Per trial: the evaluation points it trained (all ``evals`` when complete) and its value; a
    trial paused at the rung and continued (pruner: rung) is its continuation's, in its own place."""
    continuation = {n: t for t in trials if (n := TrialRecord.of(t).continues) is not None}
    out: Outcome = []
    for t in sorted(trials, key=lambda t: t.number):
        if TrialRecord.of(t).continues is not None:
            continue
        t = continuation.get(t.number, t)
        curve = TrialRecord.of(t).curve
        reached = max(map(int, curve)) if curve else 0
        out.append((evals if t.state == TrialState.COMPLETE else reached, t.value))
    return out


def measured(t: FrozenTrial, evals: int) -> Measured:
    """A recorded trial as the tabular replay reads one: its pruning metric at evaluation points
    1..``evals`` and its final score (inf without one)."""
    curve = TrialRecord.of(t).curve
    points = tuple(curve[str(k)][PRUNING_METRIC] for k in range(1, evals + 1) if str(k) in curve)
    return Measured(math.inf if t.value is None else t.value, points)


def replay(raw: JsonObject, unpruned: list[FrozenTrial]) -> Outcome:
    """The pruner of ``raw`` deciding on the unpruned trials' recorded curves, in the same order and
    under the same study name (Hyperband assigns brackets by it)."""
    spec = spec_from_dict(raw)
    evals = spec.train.num_evals
    ordered = sorted(unpruned, key=lambda t: t.number)
    if spec.pruner.name == "rung":
        rung = rung_outcomes(spec, [measured(t, evals) for t in ordered], spec.study.name)
        return [(points, value if math.isfinite(value) else None) for points, value in rung]
    study = optuna.create_study(study_name=spec.study.name, pruner=make_pruner(spec))
    out: Outcome = []
    for t in sorted(unpruned, key=lambda t: t.number):
        value, trained = replay_trial(study, study.ask(), measured(t, evals), evals)
        out.append((trained, value if math.isfinite(value) else None))
    return out


def summary(out: Outcome, kimg: float, points: View) -> tuple[float, float, int]:
    """(kimg trained, best FID, trials pruned)."""
    trained = sum(kimg * points.fractions[k - 1] for k, _ in out if k)
    finals = [v for _, v in out if v is not None]
    return trained, min(finals), sum(1 for _, v in out if v is None)


def table(unpruned: Outcome, replays: dict[str, Outcome], kimg: float, points: View) -> list[dict[str, Any]]:
    """One row per pruner, no pruning first: trials pruned, kimg trained, compute ratio against no
    pruning, best FID and its difference to no pruning's."""
    base_kimg, base_best, _ = summary(unpruned, kimg, points)
    rows: list[dict[str, Any]] = [
        {"pruner": "none", "pruned": 0, "kimg_trained": base_kimg, "compute_ratio": 1.0, "best_fid": base_best,
         "vs_none": 0.0},
    ]  # fmt: skip
    for name, out in replays.items():
        trained, best, pruned = summary(out, kimg, points)
        rows.append({"pruner": name, "pruned": pruned, "kimg_trained": trained, "compute_ratio": base_kimg / trained,
                     "best_fid": best, "vs_none": best - base_best})  # fmt: skip
    return rows


def seed_scores(unpruned: optuna.Study, kimg: float, folder: Path, data: JsonObject) -> list[float]:
    """The unpruned study's best FID, then its best configuration's retrained with seeds 1 and 2."""
    winner = dict(unpruned.best_trial.params)
    seeds = [best_value(unpruned)]
    with_seed = {**DIGITS["search"], "seed": {"type": "categorical", "choices": [0, 1, 2]}}
    for seed in (1, 2):
        raw = spec_with(base(1, kimg, f"seed-{seed}", {"name": "none"}, data=data), search=with_seed)
        study, _ = run_study(raw, folder / f"s{seed}", enqueue=[{**winner, "seed": seed}])
        seeds.append(best_value(study))
    return seeds


def measure(
    trials: int, kimg: float, real_name: str = "median", points: View = POINTS, dataset: str = "digits"
) -> dict[str, Any]:
    """Run the studies and replays; the figures ``show`` prints, by name."""
    configs = draw_configurations(trials, lr_exponents=(-4, -1.5))
    evals = points.num_evals
    data = DATASETS[dataset]()
    with tempfile.TemporaryDirectory() as tmp:
        none_raw = base(trials, kimg, "prune-none", {"name": "none"}, points, data)
        none, _ = run_study(none_raw, Path(tmp) / "n", enqueue=configs)
        real_raw = base(trials, kimg, f"prune-{real_name}", PRUNERS[real_name], points, data)
        real_study, _ = run_study(real_raw, Path(tmp) / "m", enqueue=configs)
        unpruned = none.get_trials(deepcopy=False)
        real = outcome(real_study.get_trials(deepcopy=False), evals)
        replays = {
            name: replay(base(trials, kimg, f"prune-{name}", p, points, data), unpruned) for name, p in PRUNERS.items()
        }
        assert [k for k, _ in replays[real_name]] == [k for k, _ in real], (replays[real_name], real)
        seeds = seed_scores(none, kimg, Path(tmp), data)
        eval_seconds = [TrialRecord.of(t).eval_seconds for t in unpruned]
        train_seconds = [TrialRecord.of(t).train_seconds for t in unpruned]
    return {
        "dataset": dataset, "image_size": DIGITS["data"]["image_size"], "trials": trials,
        "kimg": kimg, "num_evals": evals, "eval_spacing": points.spacing, "real": real_name,
        "real_kimg": real_kimg(real_study.get_trials(deepcopy=False)),
        "pruners": table(outcome(unpruned, evals), replays, kimg, points),
        "seed_scores": seeds, "seed_sd": statistics.stdev(seeds),
        "eval_share_of_training": sum(eval_seconds) / sum(train_seconds),
    }  # fmt: skip


def real_kimg(trials: list[FrozenTrial]) -> float:
    """Images the real study trained on: a paused trial that was continued is counted by its
    continuation's whole budget (it resumed the paused one's checkpoint)."""
    continued = continued_numbers(trials)
    return sum(trained_kimg(t) for t in trials if t.number not in continued)


def show(r: dict[str, Any]) -> None:
    trials = r["trials"]
    print(
        f"{trials} enqueued trials, {r['dataset']} {r['image_size']} px, {r['kimg']:g} kimg each, "
        f"{r['num_evals']} evaluation points "
        f"({r['eval_spacing']}: {r['eval_share_of_training']:.1%} of the unpruned trials' training time)"
    )
    print(
        f"real {r['real']} run: {r['real_kimg']:.1f} kimg trained; "
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
    parser.add_argument("--real", default="median", choices=sorted(PRUNERS))
    parser.add_argument("--num-evals", type=int, default=NUM_EVALS)
    parser.add_argument("--spacing", default="even", choices=["even", "doubling"])
    parser.add_argument("--dataset", default="digits", choices=sorted(DATASETS))
    args = parser.parse_args()
    quiet()
    torch.set_num_threads(2)
    result = measure(args.trials, args.kimg, args.real, View(args.num_evals, args.spacing), args.dataset)
    show(result)
    name = "pruning_savings" if args.dataset == "digits" else f"pruning_savings_{args.dataset}"
    write_result(name + ("_rung" if args.real == "rung" else ""), result)  # beside the other pruners' records


if __name__ == "__main__":
    main()
