"""µP's learning rates for Adam (Yang et al. 2022, "Tensor Programs V", Table 3), read off shapes.

As the ``mup`` package does, each parameter is compared with the same parameter of a *base* network
(the same architecture at ``train.mup_base_channels``): a dimension whose size differs is one that
grows with width. Parameters with two such dimensions (hidden convolutions and linear layers, the
"matrix-like" ones) take Adam's lr ÷ width_mult; everything else (biases, norms, the stem, the class
embedding, the readout, whose output the network itself divides by width_mult) keeps the base lr.
The network carries the other two rules (readout multiplier, 1/d attention). Our own ~40 lines
rather than the package: its ``MuReadout`` is a linear layer where our readout is a 3×3 convolution,
and its ``set_base_shapes`` re-initialises and patches modules in place, which we do not need.
"""

from __future__ import annotations

from typing import Any

from torch import nn


def grown_dims(shape: tuple[int, ...], base: tuple[int, ...]) -> list[int]:
    """The dimensions of ``shape`` that differ from the base network's (those that scale with width)."""
    if len(shape) != len(base):
        raise ValueError(f"shape {shape} and base shape {base} differ in rank: not the same architecture")
    return [i for i, (n, b) in enumerate(zip(shape, base, strict=True)) if n != b]


def lr_scales(net: nn.Module, base: nn.Module) -> dict[str, float]:
    """Adam lr multiplier per parameter name: 1 / (fan-in growth) for matrix-like parameters, else 1."""
    base_shapes = {name: tuple(p.shape) for name, p in base.named_parameters()}
    scales = {}
    for name, p in net.named_parameters():
        if name not in base_shapes:
            raise ValueError(f"parameter {name} is missing from the base network: not the same architecture")
        shape, base_shape = tuple(p.shape), base_shapes[name]
        grown = grown_dims(shape, base_shape)
        scales[name] = base_shape[1] / shape[1] if len(grown) == 2 else 1.0
    return scales


def param_groups(net: nn.Module, scales: dict[str, float] | None) -> list[dict[str, Any]]:
    """Optimizer parameter groups, one per lr multiplier (``lr_scale``); one group when ``scales`` is None."""
    if scales is None:
        return [{"params": list(net.parameters()), "lr_scale": 1.0}]
    groups: dict[float, list[nn.Parameter]] = {}
    for name, p in net.named_parameters():
        groups.setdefault(scales[name], []).append(p)
    return [{"params": params, "lr_scale": scale} for scale, params in sorted(groups.items(), reverse=True)]
