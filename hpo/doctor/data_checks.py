"""Data checks: counts, source sizes, unreadable files, duplicates, constant images, and the value
range of the batches the trainer actually builds."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import torch

from hpo.doctor.result import Check
from hpo.doctor.survey import header_census
from hpo.spec.config import DataConfig
from hpo.training.data import ImageData, list_images, to_uint8
from hpo.training.generate import save_grid


def counts(data: ImageData) -> Check:
    train = Counter(data.train_labels.tolist())
    val = Counter(data.val_labels.tolist())
    per_class = ", ".join(f"{data.class_names[c]}: {train.get(c, 0)}/{val.get(c, 0)}" for c in range(data.num_classes))
    short = [data.class_names[c] for c in range(data.num_classes) if train.get(c, 0) < 10]
    text = f"{data.train_images.shape[0]} train / {data.val_images.shape[0]} validation images; per class {per_class}"
    if short:
        return Check(
            "data: counts",
            "warn",
            f"{text}; classes with < 10 training images: {', '.join(short)}",
            "add images or merge those classes",
        )
    return Check("data: counts", "pass", text)


def unreadable(data: ImageData) -> Check:
    """Files the loader could not use, from the data itself, so the count is shown on every run
    (also once the preprocessed data is cached)."""
    if not data.skipped:
        return Check("data: unreadable files", "pass", "every source file was read")
    path, reason = data.skipped[0]
    total = data.train_images.shape[0] + data.val_images.shape[0] + len(data.skipped)
    return Check(
        "data: unreadable files",
        "warn",
        f"{len(data.skipped)} of {total} files skipped; first: {path} ({reason})",
        "delete or re-export them as 8-bit RGB",
    )


def source_files(cfg: DataConfig) -> Check:
    """Sizes and modes before preprocessing (folder sources)."""
    if cfg.source != "folder":
        return Check("data: source files", "skip", f"built-in source {cfg.source!r}")
    files = list_images(Path(cfg.path or ""))
    census = header_census(files)  # files that do not open are counted by the unreadable-files check
    small = sum(min(size) < cfg.image_size for size in census.sizes)
    text = f"{len(files)} files; sizes {census.common_sizes()}; modes {census.mode_counts()}"
    if small:
        return Check(
            "data: source files",
            "warn",
            f"{text}; {small} smaller than image_size={cfg.image_size}",
            "lower image_size or drop the small images (they are upscaled)",
        )
    return Check("data: source files", "pass", text)


def duplicates_and_constants(data: ImageData) -> list[Check]:
    parts = [data.train_images.cpu(), data.val_images.cpu()]  # views of the shared cache: read, not copied
    train, val = ([hashlib.sha1(im.numpy().tobytes()).hexdigest() for im in part] for part in parts)
    digests = Counter(train + val)
    dupes = sum(n - 1 for n in digests.values() if n > 1)
    leak = len(set(train) & set(val))
    flat = sum(
        int((part[i : i + 1024].float().flatten(1).std(dim=1) < 2.0).sum())
        for part in parts
        for i in range(0, part.shape[0], 1024)
    )
    out = [
        Check(
            "data: duplicates",
            "warn" if dupes else "pass",
            f"{dupes} exact duplicate(s) after preprocessing, {leak} shared by train and validation"
            if dupes
            else "no exact duplicates",
            "remove duplicates: they inflate memorisation and leak into validation",
        ),
        Check(
            "data: constant images",
            "warn" if flat else "pass",
            f"{flat} near-constant image(s) (pixel std < 2/255)" if flat else "no near-empty or constant images",
            "remove blank frames and placeholder images",
        ),
    ]
    return out


def value_range(batch: torch.Tensor, grid: Path) -> Check:
    """The range of a batch as the trainer builds it; writes what the model sees to ``grid``."""
    lo, hi = float(batch.min()), float(batch.max())
    save_grid(to_uint8(batch[:64].clamp(-1, 1)), grid, nrow=8)
    text = f"training batch spans [{lo:.3g}, {hi:.3g}]; grid of what the model sees: {grid}"
    if hi > 1.5:
        return Check(
            "data: value range",
            "fail",
            f"{text} — a [0, 255] pipeline",
            "divide by 127.5 and subtract 1 (hpo.data.to_model_range)",
        )
    if lo >= -0.01 and hi <= 1.01:
        return Check(
            "data: value range",
            "fail",
            f"{text} — a [0, 1] pipeline: the model never sees negative "
            "values and noise swamps the signal at half the scale",
            "map images to [-1, 1]: x * 2 - 1",
        )
    if lo < -1.01 or hi > 1.01 or hi - lo < 1.0:
        return Check("data: value range", "warn", f"{text} — not the expected [-1, 1]", "normalise to [-1, 1]")
    return Check("data: value range", "pass", text)
