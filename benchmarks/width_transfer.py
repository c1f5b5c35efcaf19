"""Does the learning rate found on a narrow network hold on a wide one?

Per dataset and parameterisation: the same UNet at base channels 8 / 16 / 32 / 64, each trained at a
log-spaced lr grid with several seeds, at the budget ladder's fidelity (8 px images, classifier-FID
of 256 samples at guidance 1 / 10 DDIM steps). ``hpo.analysis.transfer`` then places the lr optimum
per width (with the grid interval the seeds cannot separate from it), fits lr_opt ∝ width^α and
prices the narrowest width's best lr at the widest width against the seeds' noise. Peer: the widest
width's own best lr (the regret column).

    .venv/bin/python -m benchmarks.width_transfer [--kimg 4] [--seeds 2] [--lrs 6] [--widths 8,16,32,64]

2,280 s here for both datasets and both parameterisations (2 threads, empty cache).

Parameterisations: ``standard`` and ``mup`` (``--parameterizations standard,mup``); the default follows from this.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import write_result
from hpo.analysis.transfer import Transfer, TransferRun, transfer
from hpo.scoring.progress import ProgressProbe
from hpo.scoring.score import make_scorer
from hpo.spec.config import DataConfig, ScoreConfig, TrainConfig
from hpo.spec.sampling import SamplingConfig
from hpo.training.data import ImageData, load_data
from hpo.training.trainer import TrainingAborted, train

SAMPLING = SamplingConfig(guidance_scale=1.0, steps=10, eta=0.0)  # budget_transfer.py's fidelity
NET: dict[str, Any] = dict(
    channel_mult=(1, 2), num_res_blocks=1, dropout=0.0, device="cpu", val_images=64, batch_size=32
)
MUP_BASE = 16  # µP's base width: the lr is tuned for base channels 16 (any width in the grid would do)
PARAMETERISATIONS: dict[str, dict[str, object]] = {
    "standard": {},
    "mup": {"parameterization": "mup", "mup_base_channels": MUP_BASE},
}


def score_run(cfg: TrainConfig, data: ImageData, probe: ProgressProbe) -> float:
    """The run's classifier-FID at the end; infinite when training diverged (it ranks last)."""
    with contextlib.suppress(TrainingAborted):
        model = train(cfg, data).model
        return float(probe.measure(model, SAMPLING, class_frequencies=data.class_frequencies()).score)
    return math.inf


def run_grid(
    data: ImageData,
    probe: ProgressProbe,
    *,
    widths: list[int],
    lrs: list[float],
    seeds: int,
    kimg: float,
    changes: dict[str, object],
) -> tuple[list[TransferRun], list[dict[str, float]]]:
    """The grid's runs, and per width the runs' count and the seconds they took (as printed)."""
    runs, timings = [], []
    for width in widths:
        started = time.perf_counter()
        for lr in lrs:
            for seed in range(seeds):
                cfg = TrainConfig(base_channels=width, lr=lr, seed=seed, kimg=kimg, **NET).replace(**changes)
                runs.append(TransferRun(width, lr, seed, score_run(cfg, data, probe)))
        seconds = time.perf_counter() - started
        timings.append({"width": width, "runs": len(lrs) * seeds, "seconds": seconds})
        print(f"  width {width:3d}: {len(lrs) * seeds} runs in {seconds:.0f} s", flush=True)
    return runs, timings


def print_transfer(result: Transfer) -> None:
    print(
        f"  {'width':>5} {'optimum lr':>10} {'grid best':>9} {'tied lrs':>17} {'score':>7} {'seed sd':>7} {'on fit':>6}"
    )
    for o, residual in zip(result.optima, result.residuals, strict=True):
        best, sd = o.best, o.best.spread
        edge = f" ({o.edge} edge)" if o.edge else ""
        print(
            f"  {o.width:5d} {o.lr:10.3g} {o.grid_lr:9.3g} {o.low:8.3g}..{o.high:<8.3g} {best.mean:7.3g} {sd:7.2g} "
            f"×{residual:<5.2g}{edge}"
        )
    print(f"  α = {result.alpha:+.2f}; regret {result.regret:.3g} ± {result.regret_se:.2g} (SE); {result.state}")
    print(f"  {result.text}", flush=True)


def transfer_figures(result: Transfer) -> dict[str, Any]:
    """What :func:`print_transfer` prints, by name (and the optima's spread across widths, which its text cites)."""
    optima = [
        {
            "width": o.width, "optimum_lr": o.lr, "grid_best_lr": o.grid_lr, "tied_lr_low": o.low,
            "tied_lr_high": o.high, "score": o.best.mean, "seed_sd": o.best.spread, "on_fit": residual, "edge": o.edge,
        }
        for o, residual in zip(result.optima, result.residuals, strict=True)
    ]  # fmt: skip
    return {
        "optima": optima, "alpha": result.alpha, "lr_spread": result.spread, "regret": result.regret,
        "regret_se": result.regret_se, "state": result.state, "text": result.text,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kimg", type=float, default=4.0)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--lrs", type=int, default=6, help="learning rates, log-spaced over 4e-4..4e-2")
    parser.add_argument("--widths", default="8,16,32,64")
    parser.add_argument("--datasets", default="digits,shapes")
    parser.add_argument("--parameterizations", default="standard,mup")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/hpo-bench-cache"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    widths = [int(w) for w in args.widths.split(",")]
    lrs = [float(v) for v in np.geomspace(4e-4, 4e-2, args.lrs)]
    datasets, parameterizations = args.datasets.split(","), args.parameterizations.split(",")
    started = time.perf_counter()
    grids: list[dict[str, Any]] = []
    for source in datasets:
        data = load_data(DataConfig(source=source, image_size=8, cache_dir=str(args.cache)))
        scorer = make_scorer(
            ScoreConfig(features="classifier", num_samples=256, batch_size=256), data, device=torch.device("cpu"),
            cache_dir=args.cache / "scoring",
        )  # fmt: skip
        probe = ProgressProbe(scorer, data)
        for name in parameterizations:
            changes = PARAMETERISATIONS[name]
            print(
                f"\n## {source}, {name}: widths {widths}, {len(lrs)} lrs, {args.seeds} seeds, {args.kimg:g} kimg",
                flush=True,
            )
            runs, timings = run_grid(
                data, probe, widths=widths, lrs=lrs, seeds=args.seeds, kimg=args.kimg, changes=changes
            )
            result = transfer(runs)
            print_transfer(result)
            grids.append({"dataset": source, "parameterization": name, "timings": timings, **transfer_figures(result)})
    seconds = time.perf_counter() - started
    print(f"\n{seconds:.0f} s in all ({args.threads} thread(s))")
    write_result("width_transfer", {
        "datasets": datasets, "parameterizations": parameterizations, "widths": widths, "lrs": lrs, "seeds": args.seeds,
        "kimg": args.kimg, "threads": args.threads, "grids": grids, "seconds": seconds,
    })  # fmt: skip


if __name__ == "__main__":
    main()
