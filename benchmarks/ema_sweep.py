"""Is a swept EMA length worth it? Post-hoc EMA against today's single EMA, on the same trained weights.

Each configuration (the digits quickstart's baseline and draws from its search space, with the
quickstart's network, budget, sampling sweep and scoring) is trained once on each dataset, tracking
the two power EMAs (σ_rel 0.05, 0.10) with their snapshots. The same weights are then scored two ways:
today's sweep (guidance × DDIM steps on the run's own EMA, half-life ``ema_halflife_kimg``) and the
post-hoc sweep (the same combinations × each EMA length in ``--lengths``, rebuilt from the
snapshots), both with the spec's screening. Per configuration: both best scores and the paired
difference; the score noise (each best scored again with an independent sample set, pooled) gives
the tie margin that says which differences are real. Cost: training with and without the tracked
profiles (on the first ``--overhead`` configurations), each sweep's seconds, and the study ratio
(train + score, post-hoc / today); disk: the snapshots per trial.

    .venv/bin/python -m benchmarks.ema_sweep [--configs 8] [--threads 1] [--datasets digits,shapes]
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import DIGITS, draw_configurations, quiet, write_result
from hpo.analysis.noise import Noise, pair_sd, pooled
from hpo.analysis.sweep import SweepResult, best_ema_by_guidance, ema_sentence
from hpo.files import JsonObject, JsonValue
from hpo.records import ComboScore
from hpo.scoring.score import make_scorer, score
from hpo.scoring.sweep import run_sweep
from hpo.spec.config import POSTHOC_PROFILES, DataConfig, ScoreConfig, TrainConfig
from hpo.spec.sampling import SamplingConfig, build_sweep
from hpo.training.data import ImageData, load_data
from hpo.training.model import DiffusionModel
from hpo.training.posthoc_ema import PosthocEma
from hpo.training.trainer import TrainingAborted, train

SPEC_TRAIN = {k: (tuple(v) if isinstance(v, list) else v) for k, v in DIGITS["train"].items()}
SWEEP = build_sweep(DIGITS["sampling"])


def best_again(scorer: Any, model: DiffusionModel, sweep: SweepResult, data: ImageData) -> float:
    """The best combination scored with an independent sample set (seed 1): the score's noise."""
    best = sweep.best
    again = score(scorer, model, best.sampling, class_frequencies=data.class_frequencies(), seed=1).fid
    return pair_sd(again, best.score)


def sweep(scorer: Any, base: DiffusionModel, combos: list[SamplingConfig], data: ImageData, ema: Any) -> SweepResult:
    return run_sweep(
        scorer, base, combos, screen_samples=SWEEP.screen_samples, rescore_top=SWEEP.rescore_top,
        class_frequencies=data.class_frequencies(), ema=ema,
    )  # fmt: skip


@dataclass(frozen=True)
class ConfigRun:
    """One configuration trained once with the tracked EMA profiles and swept today's way and post-hoc."""

    today: ComboScore  # the best of today's sweep (the trained EMA)
    posthoc: ComboScore  # the best of the post-hoc sweep (EMA length as an axis)
    noise: list[float]  # each best scored again on other samples: one pair's sd each
    train_with: float  # seconds, with the tracked profiles
    train_without: float | None  # seconds without them (measured for the first few configurations)
    today_seconds: float
    posthoc_seconds: float
    disk_mb: float
    snapshots: int
    sentence: str | None
    ema_by_guidance: dict[float, float]
    residual: float  # the worst profile fit over the swept lengths


def run_config(
    params: dict[str, Any], data: ImageData, scorer: Any, lengths: list[float], folder: Path, measure_overhead: bool
) -> ConfigRun | None:
    cfg = TrainConfig(**{**SPEC_TRAIN, **params, "device": "cpu", "ema_profiles": POSTHOC_PROFILES})
    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    try:
        result = train(cfg, data, snapshot_dir=folder)
    except TrainingAborted:
        return None
    train_with = time.perf_counter() - started
    train_without = None
    if measure_overhead:
        started = time.perf_counter()
        train(cfg.replace(ema_profiles=()), data)
        train_without = time.perf_counter() - started
    today_combos = SWEEP.combinations()
    posthoc_combos = [
        SamplingConfig(c.guidance_scale, c.steps, c.eta, sigma) for c in today_combos for sigma in lengths
    ]
    ema = PosthocEma(result.model, folder)
    started = time.perf_counter()
    today = sweep(scorer, result.model, today_combos, data, None)
    today_seconds = time.perf_counter() - started
    started = time.perf_counter()
    posthoc = sweep(scorer, result.model, posthoc_combos, data, ema)
    posthoc_seconds = time.perf_counter() - started
    noise = [
        best_again(scorer, result.model, today, data),
        best_again(scorer, ema.model(posthoc.best.sampling.ema_sigma_rel), posthoc, data),
    ]
    return ConfigRun(
        today.best, posthoc.best, noise, train_with, train_without, today_seconds, posthoc_seconds,
        ema.disk_bytes / 2**20, len(ema.snapshots), ema_sentence(posthoc.scores), best_ema_by_guidance(posthoc.scores),
        max(ema.fit(s).residual for s in lengths),
    )  # fmt: skip


def config_line(i: int, row: ConfigRun | None) -> JsonObject:
    """Print configuration ``i``'s line of the table (``row``: ``run_config``'s, None if it diverged); its figures."""
    if row is None:
        print(f"{i:>6} diverged", flush=True)
        return {"config": i, "diverged": True}
    t, p = row.today, row.posthoc
    delta = p.score - t.score
    print(
        f"{i:>6} {t.score:8.3g} {p.score:8.3g} {delta:+7.3g}  "
        f"{p.sampling.label} ({t.sampling.label})  "
        f"[{row.train_with:.0f}, {row.today_seconds:.0f}/{row.posthoc_seconds:.0f}]  "
        f"{row.sentence}",
        flush=True,
    )
    return {
        "config": i, "diverged": False, "today": t.score, "posthoc": p.score, "delta": delta,
        "posthoc_best": p.sampling.as_dict(), "today_best": t.sampling.as_dict(), "train_seconds": row.train_with,
        "today_sweep_seconds": row.today_seconds, "posthoc_sweep_seconds": row.posthoc_seconds,
        "best_ema_by_guidance": [{"guidance_scale": w, "ema_sigma_rel": v} for w, v in row.ema_by_guidance.items()],
    }  # fmt: skip


def comparison(rows: list[ConfigRun]) -> JsonObject:
    """Print post-hoc − today over the configurations against the score noise; the figures."""
    noise: Noise = pooled([v for r in rows for v in r.noise])
    deltas = [r.posthoc.score - r.today.score for r in rows]
    margin = noise.tie_margin if noise.sd is not None else math.nan
    better = sum(d < -margin for d in deltas)
    worse = sum(d > margin for d in deltas)
    tied = len(deltas) - better - worse
    mean, sd = statistics.fmean(deltas), statistics.stdev(deltas) if len(deltas) > 1 else math.nan
    print(
        f"post-hoc − today: mean {mean:+.3g} (sd {sd:.3g} over {len(deltas)} configurations); "
        f"score noise sd {noise.sd:.3g} ({noise.pairs} pairs), tie margin {margin:.3g}: post-hoc better in {better}, "
        f"worse in {worse}, tied in {tied}"
    )
    return {
        "delta_mean": mean, "delta_sd": sd, "compared": len(deltas), "noise_sd": noise.sd, "noise_pairs": noise.pairs,
        "tie_margin": margin, "posthoc_better": better, "posthoc_worse": worse, "tied": tied,
    }  # fmt: skip


def cost(rows: list[ConfigRun]) -> JsonObject:
    """Print training with/without the tracked profiles, the sweeps' seconds and the study's ratio; the figures."""
    measured = [(r.train_with, r.train_without) for r in rows if r.train_without is not None]
    overhead = sum(w for w, _ in measured) / sum(wo for _, wo in measured)
    train_with = sum(r.train_with for r in rows)
    today, posthoc = sum(r.today_seconds for r in rows), sum(r.posthoc_seconds for r in rows)
    study_today, study_posthoc = train_with / overhead + today, train_with + posthoc
    print(
        f"cost: training with the two tracked profiles {overhead:.3f}× without ({len(measured)} runs); sweeps "
        f"{today:.0f} s today, {posthoc:.0f} s post-hoc; the whole study (train + score) "
        f"{study_posthoc / study_today:.2f}× today's ({study_today:.0f} s → {study_posthoc:.0f} s)"
    )
    return {
        "training_overhead": overhead, "overhead_runs": len(measured), "today_sweep_seconds": today,
        "posthoc_sweep_seconds": posthoc, "study_ratio": study_posthoc / study_today,
        "study_today_seconds": study_today, "study_posthoc_seconds": study_posthoc,
    }  # fmt: skip


def disk(rows: list[ConfigRun]) -> JsonObject:
    """Print the snapshots' count and size per trial and the worst profile fit; the figures."""
    mb, residual = statistics.fmean(r.disk_mb for r in rows), max(r.residual for r in rows)
    print(
        f"disk: {rows[0].snapshots} snapshots, {mb:.2f} MB per trial (fp16); worst profile residual over the "
        f"lengths {residual:.3f}"
    )
    return {"snapshots": rows[0].snapshots, "mb_per_trial": mb, "worst_residual": residual}


def run_dataset(name: str, configs: list[dict[str, Any]], lengths: list[float], args: argparse.Namespace) -> JsonObject:
    """Every configuration on one dataset, then (unless all diverged) the comparison, cost and disk; the figures."""
    data = load_data(DataConfig(source=name, image_size=16, val_fraction=0.15, cache_dir=str(args.cache)))
    scorer = make_scorer(
        ScoreConfig(**DIGITS["score"]), data, device=torch.device("cpu"), cache_dir=args.cache / "scoring"
    )
    print(f"\n## {name}: {len(configs)} configurations, {SPEC_TRAIN['kimg']} kimg each, EMA lengths {lengths}")
    print(f"{'config':>6} {'today':>8} {'post-hoc':>8} {'Δ':>7}  post-hoc best (today's best)  [train s, sweep s]")
    rows: list[ConfigRun] = []
    table: list[JsonValue] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, params in enumerate(configs):
            row = run_config(params, data, scorer, lengths, Path(tmp) / "ema", i < args.overhead)
            table.append(config_line(i, row))
            if row is not None:
                rows.append(row)
    if not rows:
        return {"dataset": name, "table": table}
    return {"dataset": name, "table": table, "comparison": comparison(rows), "cost": cost(rows), "disk": disk(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--datasets", default="digits,shapes")
    parser.add_argument("--lengths", default="0.05,0.1,0.2", help="EMA σ_rel values of the post-hoc sweep")
    parser.add_argument("--overhead", type=int, default=2, help="configurations also trained without profiles")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/hpo-bench-cache"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    quiet()
    configs = [dict(DIGITS["baselines"][0]), *draw_configurations(args.configs - 1, seed=11, lr_exponents=(-4, -2.5))]
    lengths = [float(v) for v in args.lengths.split(",")]
    started = time.perf_counter()
    datasets = [run_dataset(name, configs, lengths, args) for name in args.datasets.split(",")]
    seconds = time.perf_counter() - started
    print(f"\ntotal {seconds:.0f} s")
    result = {
        "num_configs": args.configs, "threads": args.threads, "lengths": lengths, "overhead_configs": args.overhead,
        "image_size": 16, "train": SPEC_TRAIN, "configurations": configs, "datasets": datasets, "seconds": seconds,
    }  # fmt: skip
    write_result("ema_sweep", result)


if __name__ == "__main__":
    main()
