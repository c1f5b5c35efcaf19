"""Image data: sources, a seeded train/validation split, and a memory-mapped on-disk cache of uint8 images.

Images are stored as uint8 (N, C, H, W) and mapped to the model's [-1, 1] range only on the fly
(:func:`to_model_range`); :func:`to_uint8` is the one way back, used for grids and FID.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from hpo.errors import DataError
from hpo.records import DataSummary
from hpo.spec.config import DataConfig
from hpo.training.cache import CacheFiles, Part, Parts, ScratchImages, cached
from hpo.training.images import UnreadableImage, open_rgb
from hpo.training.shapes import render_shapes

log = logging.getLogger("hpo.data")

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".gif")
MIN_IMAGES = 10
CACHE_VERSION = 2
DECODE_CHUNK = 1024  # files decoded at once


@dataclass(frozen=True, eq=False)
class ImageData:
    train_images: torch.Tensor  # uint8 (N, C, H, W)
    train_labels: torch.Tensor  # int64 (N,)
    val_images: torch.Tensor
    val_labels: torch.Tensor
    class_names: tuple[str, ...]
    key: str  # identifies source content + preprocessing + split, for caches of derived data
    skipped: tuple[tuple[str, str], ...] = ()  # (file, reason) of source files that could not be used

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def channels(self) -> int:
        return int(self.train_images.shape[1])

    @property
    def image_size(self) -> int:
        return int(self.train_images.shape[-1])

    @property
    def nbytes(self) -> int:
        """The images' bytes, training and held-out."""
        return sum(t.numel() * t.element_size() for t in (self.train_images, self.val_images))

    def summary(self) -> DataSummary:
        """What the study trained on, in numbers the report's header shows."""
        return DataSummary(
            train=int(self.train_images.shape[0]), held_out=int(self.val_images.shape[0]), classes=self.num_classes,
            image_size=self.image_size, channels=self.channels, skipped=len(self.skipped),
        )  # fmt: skip

    def to(self, device: torch.device | str) -> ImageData:
        return replace(
            self,
            train_images=self.train_images.to(device),
            train_labels=self.train_labels.to(device),
            val_images=self.val_images.to(device),
            val_labels=self.val_labels.to(device),
        )

    def class_frequencies(self) -> torch.Tensor:
        counts = torch.bincount(self.train_labels.cpu(), minlength=self.num_classes).double()
        return counts / counts.sum()


def to_model_range(images: torch.Tensor) -> torch.Tensor:
    """uint8 [0, 255] → float32 [-1, 1]."""
    return images.float() / 127.5 - 1.0


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    """Model output in [-1, 1] → uint8 [0, 255] (rounded, clipped)."""
    return ((x.float().clamp(-1.0, 1.0) + 1.0) * 127.5).round().to(torch.uint8)


def load_data(cfg: DataConfig) -> ImageData:
    """Load, preprocess (once per host, cached on disk) and split the configured images. The images
    are views of the cache's read-only mapping (:mod:`hpo.training.cache`): every process of a host
    shares one copy, and index batches rather than convert the whole set."""
    fingerprint = source_fingerprint(cfg)
    options = {k: getattr(cfg, k) for k in ("image_size", "val_fraction", "split_seed", "max_images")}
    key = hashlib.sha256(json.dumps([CACHE_VERSION, fingerprint, options], sort_keys=True).encode()).hexdigest()[:16]

    def build() -> Parts:
        images, labels, names, skipped = read_source(cfg)
        train, val = split_order(images.shape[0], cfg)
        return Parts(Part(images, labels, train), Part(images, labels, val), names, skipped)

    part = cached(CacheFiles.of(cfg.cache_path, key), key, build)
    return ImageData(
        part.train_images, part.train_labels, part.val_images, part.val_labels, part.class_names, key, part.skipped
    )


def held_out_count(n: int, val_fraction: float) -> int:
    """Images of ``n`` that the split holds out: at least one, and at least one left to train on."""
    return min(n - 1, max(1, round(n * val_fraction)))


def split_order(n: int, cfg: DataConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The seeded split of ``n`` images: (training, held-out) indices."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(cfg.split_seed))
    if cfg.max_images is not None:
        order = order[: cfg.max_images]
        n = order.shape[0]
    where = cfg.path or cfg.source
    if n < MIN_IMAGES:
        raise DataError(f"{where}: only {n} images; need at least {MIN_IMAGES} to split into training and validation")
    n_val = held_out_count(n, cfg.val_fraction)
    return order[n_val:], order[:n_val]


def split(images: torch.Tensor, labels: torch.Tensor, names: tuple[str, ...], cfg: DataConfig, key: str) -> ImageData:
    train, val = split_order(images.shape[0], cfg)
    return ImageData(images[train], labels[train], images[val], labels[val], names, key)


def source_fingerprint(cfg: DataConfig) -> list[object]:
    """Cheap identity of the source content: file names, sizes and mtimes for folders."""
    if cfg.source == "folder":
        files = list_images(Path(cfg.path or ""))
        root = Path(cfg.path or "")
        return ["folder", [(str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]]
    if cfg.source == "shapes":
        return ["shapes", cfg.num_images, cfg.split_seed]
    return [cfg.source, cfg.path]


Source = tuple[torch.Tensor, torch.Tensor, tuple[str, ...], tuple[tuple[str, str], ...]]


def read_source(cfg: DataConfig) -> Source:
    """(images, labels, class names, skipped files with reasons)."""
    if cfg.source == "digits":
        return (*read_digits(cfg.image_size), ())
    if cfg.source == "shapes":
        images, labels, names = render_shapes(cfg.num_images, cfg.image_size, seed=cfg.split_seed)
        return torch.from_numpy(images), torch.from_numpy(labels), names, ()
    if cfg.source == "folder":
        return read_folder(Path(cfg.path or ""), cfg.image_size, scratch=cfg.cache_path)
    if cfg.source.startswith("torchvision:"):
        from hpo.training.torchvision_data import read_torchvision

        return (*read_torchvision(cfg.source.split(":", 1)[1], Path(cfg.path or "data"), cfg.image_size), ())
    raise DataError(f"unknown data source {cfg.source!r}; expected folder, digits, shapes or torchvision:NAME")


def read_digits(size: int) -> tuple[torch.Tensor, torch.Tensor, tuple[str, ...]]:
    """scikit-learn's bundled handwritten digits (1 797 images, 8×8, 10 classes), upscaled."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    raw = np.clip(digits.images * (255.0 / 16.0), 0, 255).astype(np.uint8)
    resized = np.stack([np.asarray(Image.fromarray(im).resize((size, size), Image.Resampling.BICUBIC)) for im in raw])
    return (
        torch.from_numpy(resized)[:, None].contiguous(),
        torch.from_numpy(digits.target.astype(np.int64)),
        tuple(str(i) for i in range(10)),
    )


def list_images(root: Path) -> list[Path]:
    if not root.is_dir():
        raise DataError(f"{root}: image folder not found; set data.path to a folder of images")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise DataError(f"{root}: no images ({', '.join(IMAGE_SUFFIXES)}) in this folder or below")
    return files


def folder_classes(root: Path, files: list[Path]) -> tuple[list[Path], list[int], tuple[str, ...]]:
    """Subfolders are classes when there are several; otherwise everything is one class."""
    tops = sorted({p.relative_to(root).parts[0] for p in files if len(p.relative_to(root).parts) > 1})
    if len(tops) < 2:
        return files, [0] * len(files), (root.name or "images",)
    kept = [p for p in files if len(p.relative_to(root).parts) > 1]
    if len(kept) < len(files):
        log.warning("%s: ignoring %d images outside the class subfolders", root, len(files) - len(kept))
    index = {name: i for i, name in enumerate(tops)}
    return kept, [index[p.relative_to(root).parts[0]] for p in kept], tuple(tops)


def load_image(path: Path, size: int) -> tuple[np.ndarray, bool]:
    """RGB uint8 (3, size, size) after resize + centre crop, and whether the source was smaller.
    Raises UnreadableImage (with the reason) for a file that cannot be used."""
    img = open_rgb(path)
    small = min(img.size) < size
    scale = size / min(img.size)
    w, h = max(size, round(img.width * scale)), max(size, round(img.height * scale))
    img = img.resize((w, h), Image.Resampling.BICUBIC, reducing_gap=3.0)
    left, top = (w - size) // 2, (h - size) // 2
    img = img.crop((left, top, left + size, top + size))
    return np.asarray(img).transpose(2, 0, 1).copy(), small


def try_load(path: Path, size: int) -> tuple[np.ndarray, bool] | str:
    try:
        return load_image(path, size)
    except UnreadableImage as err:
        return str(err)


def require_mostly_readable(root: Path, bad: Sequence[tuple[str, str]], total: int) -> None:
    """A few broken files are skipped; more than half means the folder is wrong, not the files."""
    if len(bad) * 2 > total:
        raise DataError(
            f"{root}: {len(bad)} of {total} images are unreadable (first: {bad[0][0]}, {bad[0][1]}); check them"
        )


def read_folder(root: Path, size: int, *, scratch: Path | None = None) -> Source:
    """Decoded :data:`DECODE_CHUNK` files at a time, into a scratch file in ``scratch`` when given
    (a folder larger than memory is never held whole), else in memory."""
    files, labels, names = folder_classes(root, list_images(root))
    bad: list[tuple[str, str]] = []
    kept: list[int] = []
    small = 0
    with (
        ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool,
        ScratchImages(scratch, (3, size, size), len(files)) as sink,
    ):
        for first in range(0, len(files), DECODE_CHUNK):
            chunk = files[first : first + DECODE_CHUNK]
            for path, label, r in zip(
                chunk, labels[first : first + DECODE_CHUNK], pool.map(lambda p: try_load(p, size), chunk), strict=True
            ):
                if isinstance(r, str):
                    bad.append((str(path), r))
                    continue
                sink.add(r[0])
                kept.append(label)
                small += r[1]
        require_mostly_readable(root, bad, len(files))
        images = sink.images()
    if bad:
        log.warning("%s: skipped %d unreadable image(s), first: %s (%s)", root, len(bad), *bad[0])
    if small:
        log.warning("%s: %d image(s) are smaller than image_size=%d and were upscaled", root, small, size)
    return images, torch.tensor(kept, dtype=torch.int64), names, tuple(bad)
