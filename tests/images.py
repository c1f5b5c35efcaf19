"""Image folders written for tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def write_images(folder: Path, n: int, *, size: int = 20, mode: str = "RGB", start: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(start)
    for i in range(start, start + n):
        arr = rng.integers(0, 256, size=(size, size, len(mode)), dtype=np.uint8)
        Image.fromarray(arr.squeeze(-1) if mode == "L" else arr, mode).save(folder / f"img{i}.png")
