"""Generate images from trained weights with one sampling combination (DDIM + guidance).

Sample i always starts from the same initial noise for a given seed, whatever the batch size or the
combination (noise is drawn in fixed chunks of :data:`NOISE_CHUNK` seeded by (seed, chunk)), so that
the scores of two combinations differ by their settings, not by their noise, and a larger sample set
extends a smaller one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from PIL import Image, ImageDraw

from hpo.diffusion.sampler import evaluation_timesteps, guided_at, make_denoiser, sampler_named
from hpo.diffusion.schedule import NoiseSchedule
from hpo.spec.sampling import SamplingConfig
from hpo.training.data import to_uint8
from hpo.training.model import DiffusionModel
from hpo.training.runtime import autocast, eval_mode

NOISE_CHUNK = 64


def network_evaluations(sampling: SamplingConfig, schedule: NoiseSchedule, *, conditional: bool) -> int:
    """Network evaluations per sample, exactly: each of the sampler's evaluations, twice where guidance
    applies (w ≠ 1, a conditional network, the noise level inside the guidance interval).
    ``SamplingConfig.evaluations`` is the same count without the schedule (every step guided)."""
    guided = conditional and sampling.guidance_scale != 1.0
    levels = schedule.noise_levels
    timesteps = evaluation_timesteps(sampling.sampler, schedule, sampling.steps, sampling.spacing)
    return sum(2 if guided and guided_at(float(levels[t]), sampling.guidance_interval) else 1 for t in timesteps)


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


def initial_noise(shape: tuple[int, ...], start: int, count: int, seed: int) -> torch.Tensor:
    """x_T of samples start..start+count−1 (CPU, float32): chunk c is drawn from seed (seed, c)."""
    first, last = start // NOISE_CHUNK, (start + count - 1) // NOISE_CHUNK
    chunks = [
        torch.randn((NOISE_CHUNK, *shape), generator=torch.Generator().manual_seed(seed * 1_000_003 + c))
        for c in range(first, last + 1)
    ]
    offset = start - first * NOISE_CHUNK
    return torch.cat(chunks)[offset : offset + count]


def sample_batches(
    model: DiffusionModel,
    sampling: SamplingConfig,
    labels: torch.Tensor | None,
    *,
    start: int = 0,
    n: int,
    batch_size: int,
    seed: int,
) -> Iterator[torch.Tensor]:
    """uint8 image batches (B, C, H, W) of samples start..start+n−1 on the model's device; η = 0
    makes them a pure function of (weights, combination, seed)."""
    device, info = model.device, model.info
    shape = (info.channels, info.image_size, info.image_size)
    with eval_mode(model.net), torch.no_grad():
        for first in range(start, start + n, batch_size):
            count = min(batch_size, start + n - first)
            batch_labels = labels[first : first + count].to(device) if labels is not None else None
            denoise = make_denoiser(
                model.net,
                model.schedule,
                prediction=model.prediction,
                labels=batch_labels,
                guidance_scale=sampling.guidance_scale,
                guidance_interval=sampling.guidance_interval,
                null_class=info.null_class,
            )
            x = initial_noise(shape, first, count, seed).to(device)
            gen = torch.Generator(device).manual_seed(seed * 1_000_003 + first)  # η > 0 noise
            sample = sampler_named(sampling.sampler)
            with autocast(device, sampling=True):
                x = sample(
                    denoise, model.schedule, x,
                    steps=sampling.steps, eta=sampling.eta, generator=gen, spacing=sampling.spacing,
                )  # fmt: skip
            yield to_uint8(x)


def sample_images(
    model: DiffusionModel,
    sampling: SamplingConfig,
    *,
    n: int,
    batch_size: int = 256,
    seed: int = 0,
    labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """``n`` uint8 images on the CPU; labels cycle through the classes unless given."""
    if labels is None:
        labels = draw_labels(model.info.num_classes, n)
    batches = sample_batches(model, sampling, labels, n=n, batch_size=batch_size, seed=seed)
    return torch.cat([b.cpu() for b in batches])


def save_grid(images: torch.Tensor, path: Path, *, nrow: int | None = None, captions: list[str] | None = None) -> Path:
    """A PNG grid of uint8 images (N, C, H, W); ``captions`` (one per row) are written beside it."""
    from torchvision.utils import make_grid  # here: importing torchvision costs every command ~2.4 s

    nrow = nrow or max(1, round(images.shape[0] ** 0.5))
    if images.shape[1] == 1:
        images = images.repeat(1, 3, 1, 1)
    grid = Image.fromarray(make_grid(images, nrow=nrow, padding=2, pad_value=255).permute(1, 2, 0).numpy())
    if captions:
        grid = _with_row_captions(grid, captions, row_height=images.shape[-1] + 2)
    path.parent.mkdir(parents=True, exist_ok=True)
    grid.save(path)
    return path


def _with_row_captions(grid: Image.Image, captions: list[str], *, row_height: int) -> Image.Image:
    """Scale small grids up so text fits, and write each row's caption in a margin on the left."""
    scale = max(1, 16 // row_height + 1)
    grid = grid.resize((grid.width * scale, grid.height * scale), Image.Resampling.NEAREST)
    margin = 8 + 7 * max(len(c) for c in captions)
    out = Image.new("RGB", (grid.width + margin, grid.height), (255, 255, 255))
    out.paste(grid, (margin, 0))
    draw = ImageDraw.Draw(out)
    for row, text in enumerate(captions):
        draw.text((4, row * row_height * scale + (row_height * scale - 10) // 2), text, fill=(0, 0, 0))
    return out


def grid_layout(
    model: DiffusionModel, n: int, class_names: tuple[str, ...]
) -> tuple[torch.Tensor | None, int, list[str] | None]:
    """(labels, images per row, row captions): one row per class for conditional models."""
    if not model.info.conditional:
        return None, max(1, round(n**0.5)), None
    classes = min(model.info.num_classes, n)
    per_row = max(1, n // classes)
    labels = torch.arange(classes).repeat_interleave(per_row)
    return labels, per_row, [class_names[c] for c in range(classes)]


def final_grid(
    model: DiffusionModel, sampling: SamplingConfig, n: int, path: Path, *, seed: int, class_names: tuple[str, ...]
) -> Path:
    """A run's final grid of ``n`` samples at ``sampling``, rows labelled by class: the one layout a
    trial's report and ``hpo train``'s folder show."""
    labels, per_row, captions = grid_layout(model, n, class_names)
    count = labels.shape[0] if labels is not None else n
    return save_grid(
        sample_images(model, sampling, n=count, seed=seed, labels=labels), path, nrow=per_row, captions=captions
    )
