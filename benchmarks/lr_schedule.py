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
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import DIGITS, quiet, write_result
from hpo.files import JsonObject
from hpo.planning.spec_yaml import QUICKSTART_LR, QUICKSTART_SCHEDULE, QUICKSTART_T
from hpo.scoring.score import make_scorer, score
from hpo.scoring.sweep import run_sweep
from hpo.spec.config import DataConfig, ScoreConfig, TrainConfig
from hpo.spec.sampling import build_sweep
from hpo.training.data import load_data
from hpo.training.trainer import TrainingAborted, train

SPEC_TRAIN = {k: (tuple(v) if isinstance(v, list) else v) for k, v in DIGITS["train"].items()}
CONFIGS: dict[str, dict[str, Any]] = {
    "known start": {"lr": QUICKSTART_LR, "batch_size": 32, "timesteps": QUICKSTART_T, "schedule": QUICKSTART_SCHEDULE},
    "by hand": dict(DIGITS["baselines"][0]),
}
SCHEDULES = ("cosine", "wsd")
FINAL_SAMPLES = 2048
FRESH_SEED = 1000  # + the training seed: sample noise no sweep drew


def run_one(name: str, schedule: str, seed: int, kimg: float, ctx: dict[str, Any]) -> JsonObject:
    """Train one arm, sweep it, score its best combination on fresh sample noise; its record."""
    cfg = TrainConfig(**{**SPEC_TRAIN, **CONFIGS[name], "kimg": kimg, "seed": seed, "lr_schedule": schedule,
                         "device": "cpu"})  # fmt: skip
    started = time.perf_counter()
    try:
        result = train(cfg, ctx["data"])
    except TrainingAborted as err:
        return {"config": name, "schedule": schedule, "seed": seed, "aborted": str(err)}
    train_s = time.perf_counter() - started
    frequencies = ctx["data"].class_frequencies()
    swept = run_sweep(ctx["sweep_scorer"], result.model, ctx["combos"], class_frequencies=frequencies)
    best = swept.best.sampling
    fid = score(ctx["final_scorer"], result.model, best, class_frequencies=frequencies, seed=FRESH_SEED + seed).fid
    print(f"{name:>12} {schedule:>6} seed {seed}: {fid:8.4g} at {best.label}  [{train_s:.0f} s training]", flush=True)
    return {"config": name, "schedule": schedule, "seed": seed, "fid": fid, "sweep_best": swept.best.score,
            "sampling": best.as_dict(), "train_seconds": train_s}  # fmt: skip


def paired(rows: list[JsonObject]) -> JsonObject:
    """wsd − cosine per (configuration, seed) where both trained; mean, sd and standard error."""
    by = {(r["config"], r["seed"], r["schedule"]): r.get("fid") for r in rows}
    diffs = [
        float(w) - float(c)
        for (name, seed, schedule), c in by.items()
        if schedule == "cosine" and c is not None and (w := by.get((name, seed, "wsd"))) is not None
    ]
    if not diffs:
        return {"pairs": 0}
    mean = statistics.fmean(diffs)
    sd = statistics.stdev(diffs) if len(diffs) > 1 else math.nan
    se = sd / math.sqrt(len(diffs))
    ratios = [
        float(by[(n, s, "wsd")]) / float(c)  # type: ignore[arg-type]
        for (n, s, sch), c in by.items()
        if sch == "cosine" and c and by.get((n, s, "wsd")) is not None
    ]
    verdict = "no worse beyond the noise" if mean <= se else "worse beyond the noise"
    print(
        f"wsd − cosine: mean {mean:+.3g} over {len(diffs)} pairs (sd of the difference {sd:.3g}, standard error "
        f"{se:.3g}); geometric mean ratio {math.exp(statistics.fmean(math.log(r) for r in ratios)):.3f}: {verdict}"
    )
    return {"pairs": len(diffs), "mean_difference": mean, "sd_difference": sd, "standard_error": se,
            "geometric_mean_ratio": math.exp(statistics.fmean(math.log(r) for r in ratios)), "verdict": verdict}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kimg", type=float, default=float(SPEC_TRAIN["kimg"]))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--sweep-samples", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    quiet()
    torch.set_num_threads(args.threads)
    cache = Path(tempfile.gettempdir()) / "hpo-lr-schedule"
    data = load_data(DataConfig(**{**DIGITS["data"], "cache_dir": str(cache)}))
    base = ScoreConfig(**DIGITS["score"])
    device = torch.device("cpu")

    def scorer_of(samples: int) -> Any:
        return make_scorer(dataclasses.replace(base, num_samples=samples), data, device=device, cache_dir=cache / "scoring")

    sweep = build_sweep(DIGITS["sampling"])
    ctx = {"data": data, "combos": sweep.combinations(), "sweep_scorer": scorer_of(args.sweep_samples),
           "final_scorer": scorer_of(FINAL_SAMPLES)}  # fmt: skip
    print(f"digits at {args.kimg:g} kimg, seeds {args.seeds}, {args.threads} torch thread(s); classifier-FID of "
          f"{FINAL_SAMPLES} samples at each model's best of {len(ctx['combos'])} combinations")  # fmt: skip
    rows = [
        run_one(name, schedule, seed, args.kimg, ctx)
        for seed in args.seeds
        for name in args.configs
        for schedule in SCHEDULES  # interleaved: a pair shares the machine's state alike
    ]
    summary = paired(rows)
    write_result(
        f"lr_schedule-{args.kimg:g}kimg",
        {"kimg": args.kimg, "seeds": args.seeds, "threads": args.threads, "sweep_samples": args.sweep_samples,
         "final_samples": FINAL_SAMPLES, "runs": rows, "paired": summary},  # fmt: skip
    )


if __name__ == "__main__":
    main()
