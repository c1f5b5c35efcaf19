"""Training checkpoints: everything needed to continue a run as if it had never stopped.

Saved atomically (temporary file + rename) and loaded with ``weights_only=True``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from hpo.files import atomic_write


def atomic_save(obj: object, path: Path) -> None:
    """torch.save, atomically."""
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def load_checkpoint(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def rng_state(device: torch.device, generator: torch.Generator) -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state(), "generator": generator.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, torch.Tensor], device: torch.device, generator: torch.Generator) -> None:
    torch.set_rng_state(state["cpu"])
    generator.set_state(state["generator"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
