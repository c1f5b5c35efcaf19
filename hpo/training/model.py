"""The network of a run, built for its data: our UNet, diffusers' ``UNet2DModel``, or a user
factory named ``package.module:function`` (checked against :mod:`hpo.diffusion.network`'s protocol
before any training). :class:`DiffusionModel` bundles what sampling needs from trained weights.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hpo.diffusion.network import NetInfo, ProtocolError, check_protocol
from hpo.diffusion.schedule import NoiseSchedule
from hpo.diffusion.unet import UNet, UNetConfig
from hpo.errors import HpoError
from hpo.spec.config import TrainConfig
from hpo.training.data import ImageData
from hpo.training.mup import lr_scales


@dataclass(frozen=True, eq=False)
class DiffusionModel:
    """Trained weights and what it takes to sample from them."""

    net: nn.Module
    info: NetInfo
    schedule: NoiseSchedule
    prediction: str

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device


def net_info(cfg: TrainConfig, data: ImageData) -> NetInfo:
    return info_for(cfg, channels=data.channels, image_size=data.image_size, num_classes=data.num_classes)


def info_for(cfg: TrainConfig, *, channels: int, image_size: int, num_classes: int) -> NetInfo:
    """Conditional on the class when asked for and the data has several classes."""
    return NetInfo(channels, image_size, num_classes if cfg.conditional and num_classes > 1 else 0)


def build_network(cfg: TrainConfig, data: ImageData) -> tuple[nn.Module, NetInfo]:
    info = net_info(cfg, data)
    return network_for(cfg, info), info


def network_for(cfg: TrainConfig, info: NetInfo) -> nn.Module:
    """A fresh network of the run's architecture for data described by ``info``."""
    factory = cfg.network.factory
    if factory == "builtin":
        return builtin_unet(cfg, info)
    build = resolve_factory(factory)
    try:
        net = build(
            channels=info.channels, image_size=info.image_size, num_classes=info.num_classes, **cfg.network.kwargs
        )
    except TypeError as err:
        raise ProtocolError(
            f"network factory {factory} cannot be called as f(channels=, image_size=, num_classes=, **kwargs): {err}"
        ) from None
    check_protocol(net, info, name=factory)
    return net


def builtin_unet(cfg: TrainConfig, info: NetInfo) -> UNet:
    mup = cfg.parameterization == "mup"
    return UNet(
        UNetConfig(
            in_channels=info.channels,
            base_channels=cfg.base_channels,
            channel_mult=cfg.channel_mult,
            num_res_blocks=cfg.num_res_blocks,
            attention_resolutions=cfg.attention_resolutions,
            dropout=cfg.dropout,
            num_classes=info.num_classes,
            image_size=info.image_size,
            mup_base_channels=cfg.mup_base_channels if mup else 0,
        )
    )


def lr_scales_for(cfg: TrainConfig, info: NetInfo, net: nn.Module) -> dict[str, float] | None:
    """µP's per-parameter Adam lr multipliers for ``net`` (None under the standard parameterisation),
    from the shapes of the same network at the base width, built on the meta device (no memory)."""
    if cfg.parameterization != "mup":
        return None
    with torch.device("meta"):
        base = builtin_unet(cfg.replace(base_channels=cfg.mup_base_channels), info)
    return lr_scales(net, base)


def resolve_factory(name: str) -> Callable[..., Any]:
    """``diffusers`` or ``package.module:function``, imported from the worker's Python path."""
    if name == "diffusers":
        from hpo.training.diffusers_net import diffusers_unet

        return diffusers_unet
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise HpoError(
            f"network factory {name}: cannot import {module_name} ({err}); install it in the worker's environment "
            "or add its folder to PYTHONPATH"
        ) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise HpoError(f"network factory {name}: {module_name} has no function {attr!r}")
    return factory


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
