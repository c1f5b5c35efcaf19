"""Training checkpoints: everything needed to continue a run as if it had never stopped.

Saved atomically (temporary file + rename) and loaded with ``weights_only=True``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from hpo.files import atomic_write

if TYPE_CHECKING:
    from hpo.spec.config import TrainConfig
    from hpo.training.data import ImageData


def atomic_save(obj: object, path: Path) -> None:
    """torch.save, atomically."""
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


State = dict[str, Any]  # a trainer's state: tensors, state dicts, numbers and lists (torch.load's honest type)


def load_checkpoint(path: Path) -> State:
    state: State = torch.load(path, map_location="cpu", weights_only=True)
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


def trial_disk_bytes(cfg: TrainConfig, data: ImageData) -> int:
    """What a trial of ``cfg`` writes beside its database and artifacts, at its largest: a checkpoint being
    replaced (old and new side by side until the rename), the wsd branch state (one more checkpoint)
    and every post-hoc EMA snapshot. A checkpoint holds the weights, their EMA, Adam's two moments and
    one copy per EMA profile (float32); a snapshot one fp16 copy per profile. Counted on a network built
    on the meta device (no memory, no time); 0 for a network that cannot be built (training then says why)."""
    from hpo.training.model import build_network  # model imports data and the networks: only when asked

    try:
        with torch.device("meta"):
            net, _ = build_network(cfg, data)
    except Exception:  # a user factory that cannot build on the meta device: build it for real
        try:
            net, _ = build_network(cfg, data)
        except Exception:  # a network that cannot be built: training says why (network_protocol, ...)
            return 0
    weights = sum(t.numel() * t.element_size() for t in net.state_dict().values())
    profiles = len(cfg.ema_profiles)
    checkpoint = weights * (4 + profiles)
    snapshots = weights // 2 * profiles * (cfg.ema_snapshots if profiles else 0)
    branch = checkpoint if cfg.lr_schedule == "wsd" else 0  # the stable-phase state a longer run continues
    return 2 * checkpoint + branch + snapshots
