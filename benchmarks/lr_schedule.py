"""Warmup-stable-decay against today's cosine at equal kimg: does a schedule whose stable-phase
checkpoints can be continued cost the trainer quality?

Each configuration (the known start the planner enqueues, the by-hand settings) is trained on digits
with the quickstart's spec at ``--kimg``, once per training seed with each schedule (the same seeds in
both arms: a paired comparison). Each model sweeps the quickstart's sampling grid at ``--sweep-samples``
per combination; its best combination is then scored at 2 048 samples on a sample seed that sweep never
used (``1000 + seed``). The comparison is the paired difference wsd − cosine per (configuration, seed):
its mean, the sd of the differences, and the standard error of the mean (sd/√n), against the goal that
wsd is no worse than cosine by more than that noise.

    .venv/bin/python -m benchmarks.lr_schedule [--kimg 12] [--seeds 0 1 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import DIGITS, quiet, write_result
from hpo.files import JsonObject
from hpo.planning.spec_yaml import QUICKSTART_LR, QUICKSTART_SCHEDULE, QUICKSTART_T
from hpo.scoring.score import Scorer, make_scorer, score
from hpo.scoring.sweep import run_sweep
from hpo.spec.config import DataConfig, ScoreConfig, TrainConfig
from hpo.spec.params import Params
from hpo.spec.sampling import SamplingConfig, build_sweep
from hpo.training.data import ImageData, load_data
from hpo.training.trainer import TrainingAborted, train

SPEC_TRAIN = {k: (tuple(v) if isinstance(v, list) else v) for k, v in DIGITS["train"].items()}
CONFIGS: dict[str, Params] = {
    "known start": {"lr": QUICKSTART_LR, "batch_size": 32, "timesteps": QUICKSTART_T, "schedule": QUICKSTART_SCHEDULE},
    "by hand": dict(DIGITS["baselines"][0]),
}
SCHEDULES = ("cosine", "wsd")


@dataclass(frozen=True)
class Context:
    """What every run shares: the data, the sampling grid, and the sweep's and the final score's scorers."""

    data: ImageData
    combos: list[SamplingConfig]
    sweep_scorer: Scorer
    final_scorer: Scorer


FINAL_SAMPLES = 2048
FRESH_SEED = 1000  # + the training seed: sample noise no sweep drew


def run_one(name: str, schedule: str, seed: int, kimg: float, ctx: Context, cooldown: float = 0.2) -> JsonObject:
    """Train one arm, sweep it, score its best combination on fresh sample noise; its record."""
    fields: Mapping[str, Any] = {**SPEC_TRAIN, **CONFIGS[name], "kimg": kimg, "seed": seed, "lr_schedule": schedule,
                                 "cooldown_share": cooldown, "device": "cpu"}  # fmt: skip
    cfg = TrainConfig(**fields)
    started = time.perf_counter()
    try:
        result = train(cfg, ctx.data)
    except TrainingAborted as err:
        return {"config": name, "schedule": schedule, "seed": seed, "aborted": str(err)}
    train_s = time.perf_counter() - started
    frequencies = ctx.data.class_frequencies()
    swept = run_sweep(ctx.sweep_scorer, result.model, ctx.combos, class_frequencies=frequencies)
    best = swept.best.sampling
    fid = score(ctx.final_scorer, result.model, best, class_frequencies=frequencies, seed=FRESH_SEED + seed).fid
    print(f"{name:>12} {schedule:>6} seed {seed}: {fid:8.4g} at {best.label}  [{train_s:.0f} s training]", flush=True)
    return {"config": name, "schedule": schedule, "seed": seed, "fid": fid, "cooldown_share": cooldown,
            "sweep_best": swept.best.score, "sampling": best.as_dict(), "train_seconds": train_s}  # fmt: skip


def paired(rows: list[JsonObject]) -> JsonObject:
    """wsd − cosine per (configuration, seed) where both trained; mean, sd and standard error."""
    by = {(r["config"], r["seed"], r["schedule"]): fid for r in rows if isinstance(fid := r.get("fid"), float)}
    pairs = [(by[(n, s, "wsd")], c) for (n, s, sch), c in by.items() if sch == "cosine" and (n, s, "wsd") in by]
    diffs = [w - c for w, c in pairs]
    if not diffs:
        return {"pairs": 0}
    mean = statistics.fmean(diffs)
    sd = statistics.stdev(diffs) if len(diffs) > 1 else math.nan
    se = sd / math.sqrt(len(diffs))
    ratio = math.exp(statistics.fmean(math.log(w / c) for w, c in pairs))
    verdict = "no worse beyond the noise" if mean <= se else "worse beyond the noise"
    print(
        f"wsd − cosine: mean {mean:+.3g} over {len(diffs)} pairs (sd of the difference {sd:.3g}, standard error "
        f"{se:.3g}); geometric mean ratio {ratio:.3f}: {verdict}"
    )
    return {"pairs": len(diffs), "mean_difference": mean, "sd_difference": sd, "standard_error": se,
            "geometric_mean_ratio": ratio, "verdict": verdict}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kimg", type=float, default=12.0)  # the quickstart's trial budget
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--sweep-samples", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--schedules", nargs="+", default=list(SCHEDULES), choices=list(SCHEDULES))
    parser.add_argument("--cooldown-share", type=float, default=0.2, help="wsd: the cooldown's share of the steps")
    args = parser.parse_args()
    quiet()
    torch.set_num_threads(args.threads)
    cache = Path(tempfile.gettempdir()) / "hpo-lr-schedule"
    data = load_data(DataConfig(**{**DIGITS["data"], "cache_dir": str(cache)}))
    base = ScoreConfig(**DIGITS["score"])
    device = torch.device("cpu")

    def scorer_of(samples: int) -> Scorer:
        config = dataclasses.replace(base, num_samples=samples)
        return make_scorer(config, data, device=device, cache_dir=cache / "scoring")

    sweep = build_sweep(DIGITS["sampling"])
    ctx = Context(data, sweep.combinations(), scorer_of(args.sweep_samples), scorer_of(FINAL_SAMPLES))
    print(f"digits at {args.kimg:g} kimg, seeds {args.seeds}, {args.threads} torch thread(s); classifier-FID of "
          f"{FINAL_SAMPLES} samples at each model's best of {len(ctx.combos)} combinations")  # fmt: skip
    rows = [
        run_one(name, schedule, seed, args.kimg, ctx, args.cooldown_share)
        for seed in args.seeds
        for name in args.configs
        for schedule in args.schedules  # interleaved: a pair shares the machine's state alike
    ]
    summary = paired(rows)
    record = {"kimg": args.kimg, "cooldown_share": args.cooldown_share, "seeds": args.seeds, "threads": args.threads,
              "sweep_samples": args.sweep_samples,
              "final_samples": FINAL_SAMPLES, "runs": rows, "paired": summary}  # fmt: skip
    write_result(f"lr_schedule-{args.kimg:g}kimg-{'-'.join(args.schedules)}-cool{args.cooldown_share:g}", record)


if __name__ == "__main__":
    main()
