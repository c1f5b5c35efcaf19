"""Diagnostics that run real training pieces on a few batches (used by ``hpo doctor`` and tests)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hpo.config import TrainConfig
from hpo.data import ImageData, to_model_range
from hpo.diffusion.losses import diffusion_loss
from hpo.diffusion.unet import UNet
from hpo.runtime import resolve_device
from hpo.train import build_model, make_schedule


@dataclass(frozen=True, eq=False)
class OverfitResult:
    initial_loss: float
    final_loss: float
    steps: int
    model: UNet  # the overfitted network, for checks that need a model that learned something

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
        model = build_model(cfg.replace(dropout=0.0), data).to(device).train()
        schedule = make_schedule(cfg)
        x0 = to_model_range(data.train_images[:batch].to(device))
        labels = data.train_labels[:batch].to(device) if model.cfg.num_classes else None
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        losses = []
        for _ in range(steps):
            gen = torch.Generator(device).manual_seed(cfg.seed)  # the same t and noise every step
            loss = diffusion_loss(model, schedule, x0, labels, prediction=cfg.prediction, generator=gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return OverfitResult(losses[0], min(losses[-10:]), steps, model.eval())
