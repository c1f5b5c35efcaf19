"""Does a ranking made on short runs hold at 16× the budget, and which lr schedule makes it hold best?

The same configurations (the digits quickstart's baseline and draws from its search space) are
trained on two datasets with each lr schedule. Per configuration and schedule: one run to 16× the
base budget, scored at budgets 1, 2, 4, 8, 16× (the best-known sampling of the quickstart: guidance 1,
DDIM 10 steps, classifier-FID at a fixed sample count); with a decaying schedule the scores at each budget of
that run are points of a run that decays over 16×, so the 1× score of a *complete* short run comes
from its own run at 1× (with constant lr the two are the same run). Prints, per dataset and
schedule, the Spearman correlation (with a bootstrap interval over configurations) and the top-1
agreement between the complete 1× ranking and the complete 16× ranking, and the budget-by-budget
correlations of the constant schedule; the score noise (two sample sets of the same weights) says
which differences are real.

    .venv/bin/python -m benchmarks.budget_transfer [--configs 8] [--base-kimg 4] [--threads 1]

Scaled to this CPU: 8 px images and a small UNet (base 16 channels), so a 16× run is 64 kimg.
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
from scipy.stats import spearmanr

from benchmarks.common import DIGITS, draw_configurations, quiet, write_result
from hpo.scoring.progress import ProgressProbe
from hpo.scoring.score import make_scorer
from hpo.spec.config import DataConfig, ScoreConfig, TrainConfig
from hpo.spec.sampling import SamplingConfig
from hpo.training.data import ImageData, load_data
from hpo.training.trainer import EvalPoint, TrainingAborted, train

MULTIPLES = (1, 2, 4, 8, 16)
SAMPLING = SamplingConfig(guidance_scale=1.0, steps=10, eta=0.0)
VARIANTS: dict[str, dict[str, Any]] = {
    "constant": {"lr_schedule": "constant"},
    "cosine": {"lr_schedule": "cosine"},
    "linear": {"lr_schedule": "linear"},
    "constant-ema2": {"lr_schedule": "constant", "ema_halflife_kimg": 2.0},
}
NET = dict(base_channels=16, channel_mult=(1, 2), num_res_blocks=1, dropout=0.0, device="cpu", val_images=64)


def budget_scores(
    cfg: TrainConfig, data: ImageData, probe: ProgressProbe, multiples: tuple[int, ...]
) -> dict[int, float]:
    """Train ``cfg`` (num_evals = the largest multiple) and score it at each multiple's evaluation point."""
    scores: dict[int, float] = {}

    def on_eval(point: EvalPoint, ema: Any) -> None:
        if point.index in multiples:
            scores[point.index] = probe.measure(ema, SAMPLING, class_frequencies=data.class_frequencies()).score

    with contextlib.suppress(TrainingAborted):
        train(cfg, data, on_eval=on_eval)
    return {r: scores.get(r, math.inf) for r in multiples}  # a run that diverged ranks last


def spearman_with_interval(a: list[float], b: list[float], draws: int = 1000) -> tuple[float, float, float]:
    x, y = np.array(a), np.array(b)
    rho = float(spearmanr(x, y).statistic)
    rng = np.random.default_rng(0)
    boot = []
    for _ in range(draws):
        idx = rng.integers(0, len(x), len(x))
        if len(set(idx)) > 2:
            value = spearmanr(x[idx], y[idx]).statistic
            if math.isfinite(value):
                boot.append(value)
    return rho, float(np.quantile(boot, 0.1)), float(np.quantile(boot, 0.9))


def finite(values: list[float]) -> list[float]:
    top = max((v for v in values if math.isfinite(v)), default=0.0)
    return [v if math.isfinite(v) else top + 1.0 for v in values]


def run_variant(
    variant: str, data: ImageData, configs: list[dict[str, Any]], probe: ProgressProbe, base_kimg: float
) -> tuple[dict[str, Any], list[float]]:
    """Train every configuration with ``variant``'s changes and print its line; (its figures, the
    16× scores per configuration)."""
    changes = VARIANTS[variant]
    top = MULTIPLES[-1]
    started = time.perf_counter()
    long_runs, short = [], []
    for c in configs:
        cfg = TrainConfig(**{**NET, **c, **changes, "kimg": base_kimg * top, "num_evals": top})
        long_runs.append(budget_scores(cfg, data, probe, MULTIPLES))
        if changes["lr_schedule"] == "constant":
            short.append(long_runs[-1][1])
        else:
            one = cfg.replace(kimg=base_kimg, num_evals=1)
            short.append(budget_scores(one, data, probe, (1,))[1])
    final = finite([r[top] for r in long_runs])
    rho, lo, hi = spearman_with_interval(finite(short), final)
    top1 = int(np.argmin(finite(short)) == np.argmin(final))
    ladder = {r: float(spearmanr(finite([x[r] for x in long_runs]), final).statistic) for r in MULTIPLES[:-1]}
    seconds = time.perf_counter() - started
    print(
        f"{variant:>22}: Spearman(1× complete, 16×) {rho:+.2f} (80 % interval {lo:+.2f}..{hi:+.2f}), "
        f"top-1 agrees {top1}/1, best at 16× {min(final):.3g}; budgets of the 16× run vs its end: "
        f"{'  '.join(f'{r}×: {v:+.2f}' for r, v in ladder.items())} [{seconds:.0f} s]",
        flush=True,
    )
    figures = {
        "variant": variant, "spearman": rho, "interval_80": [lo, hi], "top1_agrees": top1, "best_at_16x": min(final),
        "rungs_vs_end": [{"rung": r, "spearman": v} for r, v in ladder.items()], "seconds": seconds,
    }  # fmt: skip
    return figures, final


def score_noise(config: dict[str, Any], variant: str, data: ImageData, probe: ProgressProbe, base_kimg: float) -> float:
    """Train ``config`` to 16× with ``variant`` and score it on two sample sets; print the score's sd."""
    cfg = TrainConfig(**{**NET, **config, **VARIANTS[variant], "kimg": base_kimg * MULTIPLES[-1], "num_evals": 1})
    model = train(cfg, data).model
    pair = [probe.measure(model, SAMPLING, seed=s).score for s in (0, 1)]
    noise = abs(pair[0] - pair[1]) / math.sqrt(2)
    print(f"{'':>22}  score noise (two sample sets of the best 16× model): sd {noise:.3g}")
    return noise


def run_dataset(
    name: str, data: ImageData, configs: list[dict[str, Any]], *, base_kimg: float, variants: list[str], cache: Path
) -> dict[str, Any]:
    """Every variant on one dataset (the score noise on the first variant's best configuration); the figures."""
    scorer = make_scorer(
        ScoreConfig(features="classifier", num_samples=256, batch_size=256), data, device=torch.device("cpu"),
        cache_dir=cache / "scoring",
    )  # fmt: skip
    probe = ProgressProbe(scorer, data)
    print(
        f"\n## {name}: {len(configs)} configurations, base budget {base_kimg:g} kimg, budgets {MULTIPLES}×", flush=True
    )
    print(f"real held-out images score {probe.floor.score:.3g} ± {probe.floor.score_sd:.2g} (the floor)")
    rows: list[dict[str, Any]] = []
    noise = None
    for variant in variants:
        row, final = run_variant(variant, data, configs, probe, base_kimg)
        rows.append(row)
        if noise is None:
            noise = score_noise(configs[int(np.argmin(final))], variant, data, probe, base_kimg)
    return {
        "dataset": name, "floor_score": probe.floor.score, "floor_sd": probe.floor.score_sd, "variants": rows,
        "score_noise_sd": noise, "score_noise_variant": variants[0],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=8)
    parser.add_argument("--base-kimg", type=float, default=4.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--datasets", default="digits,shapes")
    choices = ", ".join(VARIANTS)
    parser.add_argument("--variants", default="constant,cosine,linear", help=f"of {choices} (ema2: half-life 2 kimg)")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/hpo-bench-cache"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    quiet()
    baseline = dict(DIGITS["baselines"][0])
    configs = [baseline, *draw_configurations(args.configs - 1, seed=7, lr_exponents=(-4, -2))]
    for c in configs:
        c.update(warmup_kimg=0.5, conditional=True, p_uncond=0.1)
    started = time.perf_counter()
    datasets, variants = [], args.variants.split(",")
    for name in args.datasets.split(","):
        data = load_data(DataConfig(source=name, image_size=8, cache_dir=str(args.cache)))
        datasets.append(run_dataset(name, data, configs, base_kimg=args.base_kimg, variants=variants, cache=args.cache))
    seconds = time.perf_counter() - started
    print(f"\ntotal {seconds:.0f} s")
    result = {
        "num_configs": args.configs, "base_kimg": args.base_kimg, "threads": args.threads, "image_size": 8,
        "rungs": MULTIPLES, "network": NET, "sampling": SAMPLING.as_dict(), "configurations": configs,
        "datasets": datasets, "seconds": seconds,
    }  # fmt: skip
    write_result("budget_transfer", result)


if __name__ == "__main__":
    main()
