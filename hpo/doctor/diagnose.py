"""Diagnostics that run real training pieces on a few batches (used by ``hpo doctor`` and tests)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from hpo.diffusion.losses import diffusion_loss
from hpo.diffusion.network import NetInfo
from hpo.spec.config import TrainConfig
from hpo.training.data import ImageData, to_model_range
from hpo.training.model import build_network
from hpo.training.runtime import resolve_device
from hpo.training.trainer import make_schedule


@dataclass(frozen=True, eq=False)
class OverfitResult:
    initial_loss: float
    final_loss: float
    steps: int
    model: nn.Module  # the overfitted network, for checks that need a model that learned something
    info: NetInfo

    @property
    def factor(self) -> float:
        return self.initial_loss / max(self.final_loss, 1e-12)


def overfit_single_batch(
    cfg: TrainConfig, data: ImageData, *, steps: int = 300, batch: int = 8, lr: float = 2e-3
) -> OverfitResult:
    """Train on one fixed batch with fixed timesteps and noise: a working model and training step
    drive this loss down by a large factor; a broken one cannot."""
    device = resolve_device(cfg.device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(cfg.seed)
        net, info = build_network(cfg.replace(dropout=0.0), data)
        model = net.to(device).train()
        schedule = make_schedule(cfg)
        x0 = to_model_range(data.train_images[:batch].to(device))
        labels = data.train_labels[:batch].to(device) if info.conditional else None
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        losses = []
        for _ in range(steps):
            gen = torch.Generator(device).manual_seed(cfg.seed)  # the same t and noise every step
            loss = diffusion_loss(model, schedule, x0, labels, prediction=cfg.prediction, generator=gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return OverfitResult(losses[0], min(losses[-10:]), steps, model.eval(), info)
