"""torchvision datasets by explicit name; they download to a data root on a machine with internet."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from hpo.errors import DataError
from hpo.spec.config import TORCHVISION_DATASETS


def _datasets() -> dict[str, Callable[..., Any]]:
    """Each dataset's class, called with root, download and its split."""
    from torchvision import datasets

    table = {name: getattr(datasets, name) for name in TORCHVISION_DATASETS}  # the names specs accept
    return table


def read_torchvision(name: str, root: Path, size: int) -> tuple[torch.Tensor, torch.Tensor, tuple[str, ...]]:
    table = _datasets()
    if name not in table:
        raise DataError(f"unknown torchvision dataset {name!r}; expected one of {', '.join(table)}")
    kwargs = {"split": "train"} if name == "SVHN" else {"train": True}
    try:
        ds = table[name](root=str(root), download=True, **kwargs)
    except (OSError, RuntimeError) as err:  # URLError is an OSError
        raise DataError(
            f"torchvision:{name}: cannot download to {root} ({err.__class__.__name__}: {err}); "
            f"on a machine with internet run it once and copy {root} here, or use a folder source"
        ) from None
    images, labels = [], []
    for img, label in ds:
        pil = img.convert("RGB") if name not in ("MNIST", "FashionMNIST") else img.convert("L")
        pil = pil.resize((size, size), Image.Resampling.BICUBIC)
        arr = np.asarray(pil)
        images.append(arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1))
        labels.append(int(label))
    names = tuple(str(c) for c in getattr(ds, "classes", sorted(set(labels))))
    return torch.from_numpy(np.stack(images)), torch.tensor(labels, dtype=torch.int64), names
