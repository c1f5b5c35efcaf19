"""An image folder written from arrays (one subfolder per class), as ``hpo run`` and ``hpo init`` read
one: what the benchmarks and the tests make their folders with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def write_folder(images: np.ndarray, labels: np.ndarray, names: tuple[str, ...], out: Path) -> int:
    """uint8 images (n, c, h, w) as PNG files, one subfolder per class; the count written."""
    for i, (image, label) in enumerate(zip(images, labels, strict=True)):
        folder = out / names[int(label)]
        folder.mkdir(parents=True, exist_ok=True)
        pixels = np.repeat(image, 3, axis=0) if image.shape[0] == 1 else image
        Image.fromarray(np.ascontiguousarray(pixels.transpose(1, 2, 0))).save(folder / f"{i:05d}.png")
    return len(images)
