"""Generate images from a trained network with the run's sampler settings (DDIM + guidance)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from PIL import Image
from torchvision.utils import make_grid

from hpo.config import TrainConfig
from hpo.data import to_uint8
from hpo.diffusion.sampler import make_denoiser, sample_ddim
from hpo.diffusion.schedule import NoiseSchedule
from hpo.diffusion.unet import UNet
from hpo.runtime import autocast, eval_mode


def draw_labels(
    num_classes: int, n: int, *, frequencies: torch.Tensor | None = None, seed: int = 0
) -> torch.Tensor | None:
    """Class labels for ``n`` samples: drawn to match ``frequencies`` when given, else cycled.
    None for unconditional networks."""
    if num_classes == 0:
        return None
    if frequencies is None:
        return torch.arange(n) % num_classes
    gen = torch.Generator().manual_seed(seed)
    return torch.multinomial(frequencies.double(), n, replacement=True, generator=gen)


def sample_batches(
    model: UNet,
    schedule: NoiseSchedule,
    cfg: TrainConfig,
    labels: torch.Tensor | None,
    *,
    n: int,
    batch_size: int,
    seed: int,
) -> Iterator[torch.Tensor]:
    """uint8 image batches (B, C, H, W) on the model's device, ``n`` in all; η = 0 makes them a pure
    function of (weights, seed)."""
    device = next(model.parameters()).device
    shape = (model.cfg.in_channels, model.cfg.image_size, model.cfg.image_size)
    gen = torch.Generator(device).manual_seed(seed)
    with eval_mode(model), torch.no_grad():
        for start in range(0, n, batch_size):
            count = min(batch_size, n - start)
            batch_labels = labels[start : start + count].to(device) if labels is not None else None
            denoise = make_denoiser(
                model,
                schedule,
                prediction=cfg.prediction,
                labels=batch_labels,
                guidance_scale=cfg.guidance_scale,
                null_class=model.null_class,
            )
            x = torch.randn((count, *shape), device=device, generator=gen)
            with autocast(device):
                x = sample_ddim(denoise, schedule, x, steps=cfg.ddim_steps, eta=cfg.ddim_eta, generator=gen)
            yield to_uint8(x)


def sample_images(
    model: UNet,
    schedule: NoiseSchedule,
    cfg: TrainConfig,
    *,
    n: int,
    batch_size: int = 256,
    seed: int = 0,
    labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """``n`` uint8 images on the CPU; labels cycle through the classes unless given."""
    if labels is None:
        labels = draw_labels(model.cfg.num_classes, n)
    return torch.cat(
        [b.cpu() for b in sample_batches(model, schedule, cfg, labels, n=n, batch_size=batch_size, seed=seed)]
    )


def save_grid(images: torch.Tensor, path: Path, *, nrow: int | None = None) -> Path:
    """A PNG grid of uint8 images (N, C, H, W)."""
    nrow = nrow or max(1, round(images.shape[0] ** 0.5))
    if images.shape[1] == 1:
        images = images.repeat(1, 3, 1, 1)
    grid = make_grid(images, nrow=nrow, padding=2, pad_value=255)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(grid.permute(1, 2, 0).numpy()).save(path)
    return path
