"""diffusers' ``UNet2DModel`` as a ready factory (``train.network.factory: diffusers``; extra
``pip install 'hpo[diffusers]'``), adapted to the network protocol of :mod:`hpo.diffusion.network`.
Its keyword arguments are ``UNet2DModel``'s own (``block_out_channels``, ``layers_per_block``, ...)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hpo.errors import HpoError

DEFAULTS: dict[str, Any] = {
    "block_out_channels": (64, 128, 128),
    "layers_per_block": 2,
    "down_block_types": ("DownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
    "dropout": 0.1,
}


class DiffusersUNet(nn.Module):
    """``net(x_t, t, labels)`` → ``UNet2DModel(x_t, t, class_labels).sample``; no labels → the null class."""

    def __init__(self, unet: nn.Module, num_classes: int) -> None:
        super().__init__()
        self.unet, self.num_classes = unet, num_classes

    def forward(self, x: torch.Tensor, t: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if self.num_classes and labels is None:
            labels = torch.full((x.shape[0],), self.num_classes, device=x.device, dtype=torch.long)
        out: torch.Tensor = self.unet(x, t, class_labels=labels if self.num_classes else None).sample
        return out


def diffusers_unet(*, channels: int, image_size: int, num_classes: int, **kwargs: Any) -> nn.Module:
    try:
        from diffusers import UNet2DModel
    except ImportError:
        raise HpoError(
            "train.network.factory: diffusers needs the diffusers package; pip install 'hpo[diffusers]'"
        ) from None
    options = {**DEFAULTS, **kwargs}
    for key in ("block_out_channels", "down_block_types", "up_block_types"):
        options[key] = tuple(options[key])
    unet = UNet2DModel(
        sample_size=image_size,
        in_channels=channels,
        out_channels=channels,
        num_class_embeds=num_classes + 1 if num_classes else None,
        **options,
    )
    return DiffusersUNet(unet, num_classes)  # type: ignore[arg-type]
