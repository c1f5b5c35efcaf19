"""µP's coordinate check (Yang et al. 2022, §D.1; the ``mup`` package's ``get_coord_data``).

Under µP every layer's output moves by about the same amount per coordinate in the first optimizer
steps whatever the width; under the standard parameterisation with Adam the hidden layers' moves grow
about linearly with width, which is why the best lr drifts. The check trains the run's network at
three widths for a few steps on one fixed batch, measures each layer's mean |Δ output| on a fixed
noisy input, and fits its growth exponent against width. A layer whose moves (or whose output at
initialisation) grow faster than width^0.75 is mis-scaled; the first such layer in the forward pass is
named, since the layers after it inherit its growth.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from hpo.diffusion.unet import scaled_channels
from hpo.doctor.result import Check
from hpo.spec.config import TrainConfig
from hpo.training.data import ImageData
from hpo.training.trainer import Trainer

WIDTH_FACTORS = (0.25, 0.5, 1.0)  # of the run's base_channels: the widest is the run's own network
MAX_GROWTH = 0.75  # exponent of width: µP ≤ 0.61, standard ≥ 1.19 (digits; benchmarks/coord_check.py)
MAX_BATCH = 32  # the check's batch (measured at 32); a large one only slows it
PROBE_T = 500.0  # the fixed input's timestep (of 1000) and its noise share below
PROBE_NOISE = 0.7
Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]  # x_t, t, labels


@dataclass(frozen=True)
class LayerGrowth:
    name: str
    init: float  # exponent of width fitted to mean |output| at initialisation
    move: float  # exponent of width fitted to mean |Δ output| after the steps


def widths_for(base_channels: int) -> list[int]:
    """The check's widths: fractions of the run's width in multiples of 4 (group norm's group size),
    or for a network under 16 channels its width doubled twice."""
    widths = sorted({scaled_channels(base_channels, f) for f in WIDTH_FACTORS})
    return widths if len(widths) == len(WIDTH_FACTORS) else [base_channels, 2 * base_channels, 4 * base_channels]


@contextmanager
def recorded_outputs(net: nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """Outputs of every layer that holds parameters directly, by name, in forward order."""
    outputs: dict[str, torch.Tensor] = {}
    handles = []
    for name, module in net.named_modules():
        if name and any(True for _ in module.parameters(recurse=False)):

            def hook(_m: nn.Module, _i: object, out: torch.Tensor, name: str = name) -> None:
                outputs[name] = out.detach().float().clone()

            handles.append(module.register_forward_hook(hook))
    try:
        yield outputs
    finally:
        for handle in handles:
            handle.remove()


def probe_input(trainer: Trainer) -> Inputs:
    """One fixed noisy batch, the same at every width (the data and seed do not depend on width)."""
    x, labels = trainer.batch()
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(0)).to(x.device)
    x_t = math.sqrt(1 - PROBE_NOISE**2) * x + PROBE_NOISE * noise
    return x_t, torch.full((x.shape[0],), PROBE_T, device=x.device), labels


@torch.no_grad()
def layer_outputs(
    net: nn.Module, inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]
) -> dict[str, torch.Tensor]:
    was_training = net.training
    net.eval()
    with recorded_outputs(net) as outputs:
        net(*inputs)
    net.train(was_training)
    return dict(outputs)


def layer_sizes(cfg: TrainConfig, data: ImageData, device: torch.device, steps: int) -> dict[str, tuple[float, float]]:
    """Per layer: mean |output| at init and mean |Δ output| after ``steps`` optimizer steps."""
    trainer = Trainer(cfg, data, device)
    inputs = probe_input(trainer)
    before = layer_outputs(trainer.model, inputs)
    for _ in range(steps):
        trainer.train_step()
    after = layer_outputs(trainer.model, inputs)
    return {name: (float(out.abs().mean()), float((after[name] - out).abs().mean())) for name, out in before.items()}


def growth_exponent(widths: list[int], sizes: list[float]) -> float:
    """Least-squares slope of log size against log width (0 where a size is zero: nothing to scale)."""
    if min(sizes) <= 0.0:
        return 0.0
    return float(np.polyfit(np.log(widths), np.log(sizes), 1)[0])


def coord_growth(cfg: TrainConfig, data: ImageData, device: torch.device, steps: int = 3) -> list[LayerGrowth]:
    """Each layer's growth exponents over :func:`widths_for` the run's width, in forward order."""
    widths = widths_for(cfg.base_channels)
    quiet = cfg.replace(
        dropout=0.0,
        grad_clip=0.0,
        warmup_kimg=0.0,
        p_uncond=0.0,
        compile=False,
        batch_size=min(cfg.batch_size, MAX_BATCH),
    )
    per_width = [layer_sizes(quiet.replace(base_channels=w), data, device, steps) for w in widths]
    return [
        LayerGrowth(
            name,
            growth_exponent(widths, [sizes[name][0] for sizes in per_width]),
            growth_exponent(widths, [sizes[name][1] for sizes in per_width]),
        )
        for name in per_width[-1]
    ]


def coord_check(cfg: TrainConfig, data: ImageData, device: torch.device, steps: int = 3) -> Check:
    """PASS when no layer's output or first moves grow faster than width^MAX_GROWTH."""
    growth = coord_growth(cfg, data, device, steps)
    widths = "/".join(str(w) for w in widths_for(cfg.base_channels))
    bad = [g for g in growth if max(g.init, g.move) > MAX_GROWTH]
    if bad:
        first = bad[0]
        which = "its output at init" if first.init > MAX_GROWTH else f"its moves in {steps} steps"
        return Check(
            "model: coord check",
            "fail",
            f"layer {first.name}: {which} grow as width^{max(first.init, first.move):.2f} over widths {widths} "
            f"({len(bad)} layer(s) over width^{MAX_GROWTH:g}); with µP they stay flat",
            "the layer escapes µP's scaling: a hidden layer needs lr ÷ width_mult, the readout output ÷ width_mult",
        )
    worst = max(growth, key=lambda g: max(g.init, g.move))
    return Check(
        "model: coord check",
        "pass",
        f"µP: every layer's output and moves stay flat over widths {widths} "
        f"(largest growth width^{max(worst.init, worst.move):.2f}, {worst.name})",
    )
