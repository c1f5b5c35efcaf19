"""When does a model start copying its training images, and how does that depend on the data size?

One configuration trained on the first ~64, ~256 and all training images of digits (8 px; the held-out
images, the classifier features and the network are the same for every size). At each of 16
evaluation points: classifier-FID against the subset, the share of samples that copy a subset image
(distance ratio < 1/3, pixels and features, bootstrap 95 % interval), and the generalisation gap of
the validation metric. The onset is the first point from which the copy interval stays above the
held-out images' floor; the doctor's data-budget rule (500 epochs) is printed beside it.

    .venv/bin/python -m benchmarks.memorisation_onset [--kimg 128] [--sizes 64,256,0] [--threads 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import quiet, write_result
from hpo.analysis.progress import copy_floor_of
from hpo.analysis.stopping import Point, copy_onset
from hpo.doctor.schedule_checks import EPOCHS_BEFORE_MEMORISING, supported_kimg
from hpo.scoring.features import classifier_extractor
from hpo.scoring.progress import ProgressProbe
from hpo.scoring.reference import reference_stats
from hpo.scoring.score import Scorer
from hpo.spec.config import DataConfig, ScoreConfig, TrainConfig
from hpo.spec.sampling import SamplingConfig
from hpo.training.data import ImageData, load_data
from hpo.training.model import count_parameters
from hpo.training.trainer import EvalPoint, train

SAMPLING = SamplingConfig(guidance_scale=1.0, steps=20, eta=0.0)
IMAGE_SIZE, NUM_EVALS = 8, 16
COPY_KEYS = tuple(f"{space}{end}" for space in ("copy_pixels", "copy_features") for end in ("", "_low", "_high"))
NET: dict[str, Any] = dict(
    base_channels=32, channel_mult=(1, 2), num_res_blocks=1, dropout=0.0, device="cpu", val_images=64,
    batch_size=32, lr=1e-3, warmup_kimg=0.5, conditional=True, p_uncond=0.1,
)  # fmt: skip


def subset(data: ImageData, n: int) -> ImageData:
    """The first ``n`` training images (0: all); the held-out images stay whole."""
    if n <= 0 or n >= data.train_images.shape[0]:
        return data
    return dataclasses.replace(
        data, train_images=data.train_images[:n], train_labels=data.train_labels[:n], key=f"{data.key}-first{n}"
    )


def run_size(full: ImageData, n: int, kimg: float, cache: Path) -> dict[str, Any]:
    """Train on the first ``n`` images and print the table; its figures, by name."""
    data = subset(full, n)
    config = ScoreConfig(features="classifier", num_samples=256, batch_size=256)
    extractor = classifier_extractor(full, cache / "scoring", torch.device("cpu"))  # same features for every size
    reference = reference_stats(data, extractor, split="train", cache_dir=cache / "scoring")
    probe = ProgressProbe(Scorer(extractor, reference, config), data)
    floor = probe.floor
    cfg = TrainConfig(**{**NET, "kimg": kimg, "num_evals": NUM_EVALS})
    images = data.train_images.shape[0]
    rows: list[tuple[float, dict[str, float]]] = []

    def on_eval(point: EvalPoint, ema: Any) -> None:
        measured = probe.measure(ema, SAMPLING, class_frequencies=data.class_frequencies())
        rows.append((point.kimg, {**point.metrics, **measured.as_dict()}))

    started = time.perf_counter()
    result = train(cfg, data, on_eval=on_eval)
    params = count_parameters(result.model.net)
    print(
        f"\n## {images} training images ({params:,} parameters, {params / images:,.0f} per image); floor: held-out "
        f"images copy {floor.copy_pixels.text} in pixels, {floor.copy_features.text} in features",
        flush=True,
    )
    print(f"{'kimg':>6} {'epochs':>7} {'cls-FID':>8} {'copies (pixels)':>24} {'copies (features)':>24} {'gap':>6}")
    for kimg_at, m in rows:
        print(
            f"{kimg_at:6.1f} {kimg_at * 1000 / images:7.0f} {m['score']:8.3g} "
            f"{_share(m, 'copy_pixels'):>24} {_share(m, 'copy_features'):>24} {m['gap']:6.3f}"
        )
    points = [Point(k, m["score"], max(m["copy_pixels_low"], m["copy_features_low"])) for k, m in rows]
    onset = copy_onset(points, copy_floor_of(floor))
    rule = supported_kimg(images)
    onset_epochs = onset * 1000 / images if onset is not None else None
    said = f"{onset:g} kimg ({onset_epochs:,.0f} epochs)" if onset is not None else f"none by {kimg:g} kimg"
    seconds = time.perf_counter() - started
    print(
        f"onset of copying: {said}; the doctor's rule of thumb expects it after {rule:g} kimg "
        f"({EPOCHS_BEFORE_MEMORISING} epochs) [{seconds:.0f} s]",
        flush=True,
    )
    return {
        "training_images": images, "parameters": params, "parameters_per_image": params / images,
        "floor": {"copy_pixels": floor.copy_pixels.as_dict(), "copy_features": floor.copy_features.as_dict()},
        "points": [{"kimg": k, "epochs": k * 1000 / images, "score": m["score"], **{c: m[c] for c in COPY_KEYS},
                    "gap": m["gap"]} for k, m in rows],
        "onset_kimg": onset, "onset_epochs": onset_epochs, "rule_kimg": rule, "rule_epochs": EPOCHS_BEFORE_MEMORISING,
        "seconds": seconds,
    }  # fmt: skip


def _share(m: dict[str, float], key: str) -> str:
    return f"{100 * m[key]:.1f} % ({100 * m[key + '_low']:.0f}–{100 * m[key + '_high']:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kimg", type=float, default=128.0)
    parser.add_argument("--sizes", default="64,256,0", help="training images per run; 0 = all")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/hpo-bench-cache"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    quiet()
    full = load_data(DataConfig(source="digits", image_size=IMAGE_SIZE, val_fraction=0.15, cache_dir=str(args.cache)))
    started = time.perf_counter()
    sizes = [int(s) for s in args.sizes.split(",")]
    runs = [run_size(full, n, args.kimg, args.cache) for n in sizes]
    seconds = time.perf_counter() - started
    print(f"\ntotal {seconds:.0f} s")
    result = {
        "kimg": args.kimg, "sizes": sizes, "threads": args.threads, "image_size": IMAGE_SIZE, "num_evals": NUM_EVALS,
        "runs": runs, "total_seconds": seconds,
    }  # fmt: skip
    write_result("memorisation_onset", result)


if __name__ == "__main__":
    main()
