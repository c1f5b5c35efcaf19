"""Procedurally generated coloured shapes on coloured backgrounds: RGB, any resolution,
deterministic by seed, one class per shape. Real enough to test that a model learns structure."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

SHAPES = ("circle", "square", "triangle", "diamond")
SUPERSAMPLE = 4


def _colour(rng: np.random.Generator) -> tuple[int, int, int]:
    r, g, b = (int(v) for v in rng.integers(0, 256, size=3))
    return r, g, b


def _contrasting(rng: np.random.Generator, background: tuple[int, int, int]) -> tuple[int, int, int]:
    while True:
        colour = _colour(rng)
        if sum(abs(a - b) for a, b in zip(colour, background, strict=True)) > 200:
            return colour


def render_shape(kind: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """One image, uint8 (3, size, size)."""
    big = size * SUPERSAMPLE
    background = _colour(rng)
    img = Image.new("RGB", (big, big), background)
    draw = ImageDraw.Draw(img)
    radius = big * rng.uniform(0.18, 0.34)
    cx, cy = (big / 2 + big * rng.uniform(-0.12, 0.12) for _ in range(2))
    fill = _contrasting(rng, background)
    box = (cx - radius, cy - radius, cx + radius, cy + radius)
    if kind == "circle":
        draw.ellipse(box, fill=fill)
    elif kind == "square":
        draw.rectangle(box, fill=fill)
    elif kind == "triangle":
        draw.polygon([(cx, cy - radius), (cx + radius, cy + radius), (cx - radius, cy + radius)], fill=fill)
    elif kind == "diamond":
        draw.polygon([(cx, cy - radius), (cx + radius, cy), (cx, cy + radius), (cx - radius, cy)], fill=fill)
    else:
        raise ValueError(f"unknown shape {kind!r}; expected one of {', '.join(SHAPES)}")
    small = img.resize((size, size), Image.Resampling.LANCZOS)
    return np.asarray(small).transpose(2, 0, 1).copy()


def render_shapes(n: int, size: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """``n`` images uint8 (n, 3, size, size), labels int64 (n,), class names. Image i depends only
    on (seed, i)."""
    labels = np.arange(n, dtype=np.int64) % len(SHAPES)
    images = np.stack([render_shape(SHAPES[k], size, np.random.default_rng([seed, i])) for i, k in enumerate(labels)])
    return images, labels, SHAPES
