"""Scoring cost on this machine: seconds per 1 000 scored samples (DDIM sampling and feature
extraction separately) at 16 and 32 px, the sampling batch that is cheapest per image (against 256,
the spec default), sampling in bf16 against fp32 on the same weights (time and score), and the share
of a quickstart trial spent scoring.

    .venv/bin/python -m benchmarks.fid_speed [precision]

Peers: the trial's own training time at the quickstart settings (target: scoring < 20 % of a trial);
fp32 sampling for bf16 (target: a score change well inside the spread between sample seeds).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.common import write_result
from hpo.files import JsonObject
from hpo.scoring.score import make_scorer, score
from hpo.spec.config import DataConfig, ScoreConfig
from hpo.spec.loading import load_spec
from hpo.spec.sampling import SamplingConfig
from hpo.training.data import load_data
from hpo.training.generate import sample_images
from hpo.training.model import DiffusionModel, build_network
from hpo.training.trainer import make_schedule, train

SPEC = Path(__file__).parent.parent / "search_spaces" / "digits.yaml"
N = 500
GUIDED = SamplingConfig(2.0, 20)  # what the per-1000 and per-batch timings sample


def per_thousand(source: str, size: int, cache: Path) -> JsonObject:
    spec = load_spec(SPEC)
    data = load_data(DataConfig(source=source, image_size=size, cache_dir=str(cache), num_images=2000))
    cfg = spec.train_config(dict(spec.baselines[0]))
    net, info = build_network(cfg, data)
    model = DiffusionModel(net.eval(), info, make_schedule(cfg), cfg.prediction)
    scorer = make_scorer(
        ScoreConfig(features="classifier", num_samples=N, batch_size=250),
        data,
        device=torch.device("cpu"),
        cache_dir=cache / "scoring",
    )
    s = score(scorer, model, GUIDED, class_frequencies=data.class_frequencies())
    k = 1000 / N
    print(
        f"{source:7s} {size:3d}px: sampling {s.sampling_seconds * k:6.1f} s / 1000 samples (20 DDIM steps, guided), "
        f"features {s.feature_seconds * k:5.2f} s / 1000"
    )
    return {
        "source": source, "image_size": size, "num_samples": N, "sampling": GUIDED.as_dict(),
        "sampling_seconds_per_1000": s.sampling_seconds * k, "feature_seconds_per_1000": s.feature_seconds * k,
    }  # fmt: skip


def per_batch(cache: Path, sizes: tuple[int, ...] = (32, 64, 128, 256)) -> JsonObject:
    """Guided sampling time per image at each sampling batch on the quickstart network (a guided
    batch of B runs the network on 2B images), as a ratio against batch 256."""
    spec = load_spec(SPEC)
    data = load_data(replace(spec.data, cache_dir=str(cache)))
    cfg = spec.train_config(dict(spec.baselines[0]))
    net, info = build_network(cfg, data)
    model = DiffusionModel(net.eval(), info, make_schedule(cfg), cfg.prediction)
    per_image = {}
    for batch in sizes:
        sample_images(model, SamplingConfig(2.0, 2), n=batch, batch_size=batch)  # warm-up
        started = time.perf_counter()
        sample_images(model, GUIDED, n=256, batch_size=batch)
        per_image[batch] = (time.perf_counter() - started) / 256
    rows = [{"batch": b, "ms_per_image": s * 1000, "vs_batch_256": per_image[256] / s} for b, s in per_image.items()]
    for row in rows:
        print(f"sampling batch {row['batch']:3d}: {row['ms_per_image']:5.2f} ms per image (20 DDIM steps, guided), "
              f"{row['vs_batch_256']:.2f}x batch 256")  # fmt: skip
    return {"num_samples": 256, "sampling": GUIDED.as_dict(), "rows": rows}


def precision(cache: Path, seeds: tuple[int, ...] = (0, 1, 2)) -> JsonObject:
    """The quickstart's winner (README: lr 5.2e-3, batch 32, T=1000, linear) trained once at the
    spec's budget, then scored at its best combination (guidance 2, 30 steps) on three sample seeds in
    fp32 and in bf16 (HPO_CPU_BF16): seconds per 256-sample score and the score per seed."""
    spec = load_spec(SPEC)
    data = load_data(replace(spec.data, cache_dir=str(cache)))
    cfg = spec.train_config({"lr": 5.2e-3, "batch_size": 32, "timesteps": 1000, "schedule": "linear"})
    scorer = make_scorer(spec.score, data, device=torch.device("cpu"), cache_dir=cache / "scoring")
    model = train(cfg, data).model
    sampling = SamplingConfig(2.0, 30)
    scores: dict[str, list[float]] = {}
    seconds: dict[str, float] = {}
    for name, setting in (("fp32", "0"), ("bf16", "1")):
        os.environ["HPO_CPU_BF16"] = setting
        started = time.perf_counter()
        scores[name] = [
            score(scorer, model, sampling, class_frequencies=data.class_frequencies(), seed=s).fid for s in seeds
        ]
        seconds[name] = (time.perf_counter() - started) / len(seeds)
    del os.environ["HPO_CPU_BF16"]
    for name in scores:
        print(f"{name}: {seconds[name]:5.1f} s per {spec.score.num_samples}-sample score, "
              f"scores {' '.join(f'{v:.3f}' for v in scores[name])} (seeds {seeds})")  # fmt: skip
    gap = statistics.mean(abs(a - b) for a, b in zip(scores["fp32"], scores["bf16"], strict=True))
    speedup, spread = seconds["fp32"] / seconds["bf16"], statistics.stdev(scores["fp32"])
    print(
        f"bf16 {speedup:.2f}x faster than fp32; mean |fp32 - bf16| at one seed {gap:.3f} "
        f"against a spread between seeds (sd, fp32) of {spread:.3f}"
    )
    return {
        "num_samples": spec.score.num_samples, "seeds": seeds, "sampling": sampling.as_dict(),
        "rows": [{"precision": name, "seconds_per_score": seconds[name], "scores": scores[name]} for name in scores],
        "bf16_speedup": speedup, "mean_abs_difference": gap, "fp32_seed_sd": spread,
    }  # fmt: skip


def quickstart_share(cache: Path) -> list[dict[str, float]]:
    spec = load_spec(SPEC)
    data = load_data(replace(spec.data, cache_dir=str(cache)))
    params = dict(spec.baselines[0])
    cfg = spec.train_config(params)
    scorer = make_scorer(spec.score, data, device=torch.device("cpu"), cache_dir=cache / "scoring")
    t0 = time.perf_counter()
    result = train(cfg, data)
    t1 = time.perf_counter()
    rows = []
    for steps, w in ((30, 1.0), (20, 2.0)):
        t2 = time.perf_counter()
        score(scorer, result.model, SamplingConfig(w, steps), class_frequencies=data.class_frequencies())
        t3 = time.perf_counter()
        share = (t3 - t2) / ((t1 - t0) + (t3 - t2))
        print(
            f"quickstart trial ({steps} DDIM steps, guidance {w}): training {t1 - t0:.1f} s, scoring "
            f"{spec.score.num_samples} samples {t3 - t2:.1f} s -> scoring is {share:.0%} of the trial (target < 20%)"
        )
        rows.append({
            "steps": steps, "guidance_scale": w, "train_seconds": t1 - t0, "num_samples": spec.score.num_samples,
            "score_seconds": t3 - t2, "scoring_share": share,
        })  # fmt: skip
    return rows


def measure(mode: str, cache: Path) -> JsonObject:
    """Run the parts of ``mode`` ("precision": that part alone; "all": every part) in order; their figures."""
    if mode == "precision":
        return {"precision": precision(cache)}
    return {
        "per_thousand": [per_thousand("digits", 16, cache), per_thousand("shapes", 32, cache)],
        "per_batch": per_batch(cache), "precision": precision(cache), "quickstart_share": quickstart_share(cache),
    }  # fmt: skip


def main() -> None:
    print(f"{torch.get_num_threads()} CPU threads")
    mode = "precision" if sys.argv[1:] == ["precision"] else "all"
    with tempfile.TemporaryDirectory() as tmp:
        figures = measure(mode, Path(tmp))
    write_result("fid_speed", {"mode": mode, "threads": torch.get_num_threads(), **figures})


if __name__ == "__main__":
    main()
