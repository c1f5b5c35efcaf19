"""Decoding one image file as what it is: every mode Pillow opens becomes 8-bit RGB with its values
rescaled, not clipped (Pillow's ``convert("RGB")`` clips 16-bit ``I;16`` pixels to 255), or is
refused with a reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

WHITE = (255, 255, 255, 255)


class UnreadableImage(Exception):
    """The file cannot become training data; the message says why."""


def open_rgb(path: Path) -> Image.Image:
    """The image as 8-bit RGB; transparent pixels are composited on white."""
    try:
        with Image.open(path) as img:
            img.load()
            return to_rgb(img)
    except UnreadableImage:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        raise UnreadableImage(f"cannot be decoded ({type(err).__name__}: {err})") from None


def to_rgb(img: Image.Image) -> Image.Image:
    mode = img.mode
    if mode in ("RGB", "L", "1", "CMYK", "YCbCr", "RGBX"):
        return img.convert("RGB")
    if mode in ("RGBA", "LA", "PA", "RGBa", "La") or (mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", img.size, WHITE), rgba).convert("RGB")
    if mode == "P":
        return img.convert("RGB")
    if mode.startswith("I;16") or mode in ("I", "F"):
        return Image.fromarray(_high_depth_to_uint8(np.asarray(img), mode), "L").convert("RGB")
    raise UnreadableImage(f"has image mode {mode!r}, which hpo does not read; export it as 8-bit RGB")


def _high_depth_to_uint8(arr: np.ndarray, mode: str) -> np.ndarray:
    """16-bit integers scale by 255/65535; 32-bit integers and floats must be in a range we can name."""
    values = arr.astype(np.float64)
    if not np.isfinite(values).all():
        raise UnreadableImage(f"has non-finite pixel values (mode {mode})")
    low, high = float(values.min()), float(values.max())
    if low < 0:
        raise UnreadableImage(f"has negative pixel values (mode {mode}, min {low:g}); export it as 8-bit RGB")
    if mode.startswith("I;16") or (mode == "I" and 255 < high <= 65535):
        scale = 255.0 / 65535.0
    elif mode == "F" and high <= 1.0:
        scale = 255.0
    elif high <= 255:
        scale = 1.0
    else:
        raise UnreadableImage(f"has values up to {high:g} in mode {mode}; export it as 8- or 16-bit")
    return np.clip(np.round(values * scale), 0, 255).astype(np.uint8)
