"""Does the score see what a person sees in a sample grid? Held-out real images, degraded in ways
that are plain in a grid, scored against the same reference with every feature extractor on hand.

Degradations, each at three strengths: additive pixel noise, salt-and-pepper speckle, blur, a
brightness shift, a colour shift (colour data only), one class missing (mode dropping: its images
replaced by others), the same few images repeated (mode collapse). Each score is printed relative to
the floor (the same held-out images undegraded) and to the tie margin, 2·√2·sd, with sd the spread of
the floor over bootstrap resamples of the held-out images at the score's sample count (how much a
set of real images moves by chance). A defect "moves the score" when score − floor exceeds the
margin. Inception FID runs only where its weights are present (offline here: said, not run).

    .venv/bin/python -m benchmarks.metric_sensitivity [--datasets digits,shapes] [--samples 256]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.common import write_result
from hpo.analysis.noise import Noise
from hpo.scoring.features import extract
from hpo.scoring.score import fid_kid, make_scorer
from hpo.scoring.weights import verify_weights, weights_path
from hpo.spec.config import DataConfig, ScoreConfig
from hpo.training.data import ImageData, load_data

Degrade = Callable[[torch.Tensor, torch.Tensor, np.random.Generator], torch.Tensor]
BOOTSTRAP = 16
IMAGE_SIZE = 16


def noise(sd: float) -> Degrade:
    def apply(x: torch.Tensor, _y: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        z = torch.from_numpy(rng.normal(0, sd, size=tuple(x.shape))).float()
        return (x.float() + z).clamp(0, 255).round().to(torch.uint8)

    return apply


def speckle(p: float) -> Degrade:
    def apply(x: torch.Tensor, _y: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        u = torch.from_numpy(rng.random(size=(x.shape[0], 1, *x.shape[2:])))
        out = x.clone()
        out = torch.where(u < p / 2, torch.zeros_like(out), out)
        return torch.where(u > 1 - p / 2, torch.full_like(out, 255), out)

    return apply


def blur(sigma: float) -> Degrade:
    def apply(x: torch.Tensor, _y: torch.Tensor, _rng: np.random.Generator) -> torch.Tensor:
        radius = max(1, math.ceil(2 * sigma))
        t = torch.arange(-radius, radius + 1, dtype=torch.float32)
        k = torch.exp(-(t**2) / (2 * sigma**2))
        k = k / k.sum()
        c = x.shape[1]
        xf = F.pad(x.float(), (radius,) * 4, mode="replicate")
        xf = F.conv2d(xf, k.view(1, 1, 1, -1).repeat(c, 1, 1, 1), groups=c)
        xf = F.conv2d(xf, k.view(1, 1, -1, 1).repeat(c, 1, 1, 1), groups=c)
        return xf.clamp(0, 255).round().to(torch.uint8)

    return apply


def brightness(delta: float) -> Degrade:
    def apply(x: torch.Tensor, _y: torch.Tensor, _rng: np.random.Generator) -> torch.Tensor:
        return (x.float() + delta).clamp(0, 255).round().to(torch.uint8)

    return apply


def colour(delta: float) -> Degrade:
    def apply(x: torch.Tensor, _y: torch.Tensor, _rng: np.random.Generator) -> torch.Tensor:
        shift = torch.tensor([delta, 0.0, -delta]).view(1, 3, 1, 1)
        return (x.float() + shift).clamp(0, 255).round().to(torch.uint8)

    return apply


def drop_classes(count: int) -> Degrade:
    """Mode dropping: the images of ``count`` classes replaced by images of the others."""

    def apply(x: torch.Tensor, y: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        keep = np.flatnonzero(y.numpy() >= count)
        return x[torch.from_numpy(rng.choice(keep, x.shape[0]))]

    return apply


def collapse(distinct: int) -> Degrade:
    """Mode collapse: ``distinct`` images repeated to fill the set."""

    def apply(x: torch.Tensor, _y: torch.Tensor, _rng: np.random.Generator) -> torch.Tensor:
        return x[torch.arange(x.shape[0]) % distinct]

    return apply


def degradations(channels: int) -> dict[str, list[tuple[str, Degrade]]]:
    out = {
        "pixel noise": [(f"sd {s:g}", noise(s)) for s in (4, 8, 16)],
        "salt-and-pepper": [(f"{100 * p:g} %", speckle(p)) for p in (0.01, 0.03, 0.1)],
        "blur": [(f"σ {s:g} px", blur(s)) for s in (0.5, 0.8, 1.2)],
        "brightness": [(f"+{d:g}", brightness(d)) for d in (8, 16, 32)],
        "one class missing": [(f"{c} of 10", drop_classes(c)) for c in (1, 2, 3)],
        "mode collapse": [(f"{d} distinct", collapse(d)) for d in (64, 16, 4)],
    }
    if channels == 3:
        out["colour shift"] = [(f"±{d:g}", colour(d)) for d in (8, 16, 32)]
    return out


def run(name: str, data: ImageData, features: str, samples: int, cache: Path) -> dict[str, Any]:
    """Print the table of ``name`` scored with ``features``; its figures, by name."""
    scorer = make_scorer(
        ScoreConfig(features=features, num_samples=samples, batch_size=256),  # type: ignore[arg-type]
        data, device=torch.device("cpu"), cache_dir=cache / "scoring",
    )  # fmt: skip
    images, labels = data.val_images.cpu(), data.val_labels.cpu()
    n = min(samples, images.shape[0])
    images, labels = images[:n], labels[:n]

    def score(x: torch.Tensor) -> float:
        return fid_kid(extract(scorer.extractor, x, batch_size=256), scorer.reference)[0]

    floor = score(images)
    rng = np.random.default_rng(0)
    feats = extract(scorer.extractor, data.val_images.cpu(), batch_size=256)
    boot = [fid_kid(feats[rng.integers(0, feats.shape[0], n)], scorer.reference)[0] for _ in range(BOOTSTRAP)]
    margin = Noise(float(np.std(boot, ddof=1)), BOOTSTRAP).tie_margin
    sd = margin / (2 * math.sqrt(2))
    print(
        f"\n## {name}, {scorer.extractor.metric_name} ({n} held-out images): floor {floor:.3g}, "
        f"bootstrap sd {sd:.3g}, tie margin {margin:.3g}"
    )
    print(f"{'defect':>18} {'strength':>12} {'score':>8} {'− floor':>8} {'÷ margin':>9}  moved?")
    rows = []
    for defect, levels in degradations(data.channels).items():
        for strength, apply in levels:
            value = score(apply(images, labels, np.random.default_rng(1)))
            moved = value - floor > margin
            rows.append({"defect": defect, "strength": strength, "score": value, "minus_floor": value - floor,
                         "per_margin": (value - floor) / margin, "moved": moved})  # fmt: skip
            print(
                f"{defect:>18} {strength:>12} {value:8.3g} {value - floor:+8.3g} {(value - floor) / margin:9.1f}  "
                f"{'yes' if moved else 'NO'}",
                flush=True,
            )
    return {
        "dataset": name, "features": features, "metric": scorer.extractor.metric_name, "images": n, "floor": floor,
        "bootstrap_sd": sd, "tie_margin": margin, "rows": rows,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="digits,shapes")
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/hpo-bench-cache"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    extractors = ["classifier"]
    skipped = None
    try:
        verify_weights(weights_path(None))
        extractors.append("inception")
    except Exception as err:
        skipped = str(err).splitlines()[0]
        print(f"Inception FID not measured here: {skipped}")
    started = time.perf_counter()
    runs = []
    for dataset in args.datasets.split(","):
        data = load_data(
            DataConfig(source=dataset, image_size=IMAGE_SIZE, val_fraction=0.15, cache_dir=str(args.cache))
        )
        for features in extractors:
            measured = run(dataset, data, features, args.samples, args.cache)
            missed = [f"{r['defect']} {r['strength']}" for r in measured["rows"] if not r["moved"]]
            print(f"missed by {features}: {', '.join(missed) if missed else 'none'}")
            runs.append({**measured, "missed": missed})
    seconds = time.perf_counter() - started
    print(f"\ntotal {seconds:.0f} s")
    result = {
        "samples": args.samples, "image_size": IMAGE_SIZE, "bootstrap": BOOTSTRAP, "extractors": extractors,
        "inception_skipped": skipped, "runs": runs, "total_seconds": seconds,
    }  # fmt: skip
    write_result("metric_sensitivity", result)


if __name__ == "__main__":
    main()
