"""Does the validation metric at an early evaluation point rank trials the way their final FID does?

Runs an unpruned study (random sampler, 12 trials: lr, batch size, T, schedule and prediction type
all vary) on two datasets (digits, and procedurally generated RGB shapes), then prints, for every
evaluation point k, the Spearman rank correlation between each candidate metric at k and the final
classifier-FID over the complete trials. Candidates are built from the per-level values each trial
stores: the mean v-space error (``val_loss``), its log-mean, the mean without the noisiest level,
the error ratio to a per-pixel Wiener denoiser (arithmetic and geometric mean: ``val_rel``), each
level alone, and the training loss.

    .venv/bin/python -m benchmarks.pruning_signal [--trials 12] [--kimg 8]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from optuna.trial import TrialState
from scipy.stats import spearmanr

from benchmarks.common import DIGITS, quiet, run_study, spec_with, write_result
from hpo.analysis.ranking import score_of
from hpo.records import TrialRecord

Metrics = dict[str, float]
NUM_EVALS = 4


def levels(m: Metrics, kind: str) -> list[tuple[float, float]]:
    return sorted((float(k.split("@")[1]), v) for k, v in m.items() if k.startswith(f"{kind}@"))


CANDIDATES: dict[str, Callable[[Metrics], float]] = {
    "val_loss (mean MSE)": lambda m: m["val_loss"],
    "log-mean MSE": lambda m: math.exp(statistics.fmean(math.log(v) for _, v in levels(m, "val_loss"))),
    "mean MSE without -6": lambda m: statistics.fmean(v for lam, v in levels(m, "val_loss") if lam > -6),
    "val_rel (geo. mean ratio)": lambda m: m["val_rel"],
    "mean ratio": lambda m: statistics.fmean(v for _, v in levels(m, "val_rel")),
    "mean ratio without -6": lambda m: statistics.fmean(v for lam, v in levels(m, "val_rel") if lam > -6),
    "train_loss (not comparable)": lambda m: m["train_loss"],
}


def study_spec(name: str, data: dict[str, Any], trials: int, kimg: float) -> dict[str, Any]:
    return spec_with(
        DIGITS,
        study={**DIGITS["study"], "name": name, "n_trials": trials},
        data=data,
        merge_train={"kimg": kimg, "num_evals": NUM_EVALS, "val_images": 128},
        sampling={"guidance_scale": 1.0, "steps": 20},
        search={**DIGITS["search"], "prediction": {"type": "categorical", "choices": ["eps", "v"]}},
        sampler={"name": "random", "seed": 0},
        pruner={"name": "none"},
        baselines=[],
    )


def level_value(kind: str, lam: float) -> Callable[[Metrics], float]:
    return lambda m: dict(levels(m, kind))[lam]


def correlations(curves: list[dict[str, Metrics]], finals: list[float]) -> dict[str, list[float]]:
    """{candidate: [Spearman at k for k = 1..K]}, candidates including each level alone."""
    names = dict(CANDIDATES)
    for kind in ("val_loss", "val_rel"):
        for lam, _ in levels(curves[0]["1"], kind):
            names[f"{kind}@{lam:+.0f} alone"] = level_value(kind, lam)
    ks = sorted(curves[0], key=int)
    return {
        name: [float(spearmanr([f(c[k]) for c in curves], finals).statistic) for k in ks] for name, f in names.items()
    }


def show(name: str, table: dict[str, list[float]], n: int, wall: float) -> dict[str, Any]:
    """Print one dataset's correlations, best mean first; its figures, by name."""
    print(f"\n{name}: {n} complete trials ({wall / 60:.1f} min)")
    print(f"{'metric':>28} " + " ".join(f"{'k=' + str(k):>6}" for k in range(1, NUM_EVALS + 1)))
    ranked = sorted(table.items(), key=lambda kv: -statistics.fmean(kv[1]))
    for metric, row in ranked:
        print(f"{metric:>28} " + " ".join(f"{r:6.2f}" for r in row))
    spearman = [{"metric": metric, "by_eval": row} for metric, row in ranked]
    return {"dataset": name, "complete_trials": n, "wall_seconds": wall, "spearman": spearman}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--kimg", type=float, default=8.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--save", type=Path, help="write every trial's curve and final FID here (JSON)")
    args = parser.parse_args()
    quiet()
    torch.set_num_threads(args.threads)
    datasets = {
        "digits": {"source": "digits", "image_size": 16, "val_fraction": 0.15},
        "shapes": {"source": "shapes", "image_size": 16, "num_images": 2000, "val_fraction": 0.15},
    }
    tables = {}
    saved: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in datasets.items():
            study, wall = run_study(study_spec(name, data, args.trials, args.kimg), Path(tmp) / name)
            done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]
            curves = [TrialRecord.of(t).curve for t in done]
            saved[name] = [
                {"params": t.params, "curve": curve, "fid": t.value} for t, curve in zip(done, curves, strict=True)
            ]
            tables[name] = (correlations(curves, [score_of(t) for t in done]), len(done), wall)
    if args.save is not None:
        args.save.write_text(json.dumps(saved, indent=1))
    print(
        "Spearman rank correlation of each metric at evaluation k with the final classifier-FID "
        f"({args.trials} random trials per dataset, {args.kimg:g} kimg, {NUM_EVALS} evaluation points, no pruning)"
    )
    shown = [show(name, table, n, wall) for name, (table, n, wall) in tables.items()]
    result = {"trials": args.trials, "kimg": args.kimg, "num_evals": NUM_EVALS, "data": datasets, "datasets": shown}
    write_result("pruning_signal", result)


if __name__ == "__main__":
    main()
