"""Networks as a user writes them, for the factory tests (``train.network.factory:
tests.user_nets:build``): a learned embedding table over integer timesteps, its own class embedding
with a null label, plain convolutions. And networks that break the protocol in each way."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class TinyUserNet(nn.Module):
    def __init__(self, channels: int, num_classes: int, width: int) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.t_emb = nn.Embedding(1001, width)  # t arrives on the 0..1000 scale; rounded to an index
        self.c_emb = nn.Embedding(num_classes + 1, width) if num_classes else None
        self.inp = nn.Conv2d(channels, width, 3, padding=1)
        self.mid = nn.Conv2d(width, width, 3, padding=1)
        self.out = nn.Conv2d(width, channels, 3, padding=1)

    def forward(self, x: torch.Tensor, t: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        emb = self.t_emb(t.round().long().clamp(0, 1000))
        if self.c_emb is not None:
            if labels is None:
                labels = torch.full((x.shape[0],), self.num_classes, device=x.device, dtype=torch.long)
            emb = emb + self.c_emb(labels)
        h = F.silu(self.inp(x)) + emb[:, :, None, None]
        return self.out(F.silu(self.mid(h)))


def build(*, channels: int, image_size: int, num_classes: int, width: int = 16) -> nn.Module:
    return TinyUserNet(channels, num_classes, width)


class WrongShape(TinyUserNet):
    def forward(self, x: torch.Tensor, t: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        return super().forward(x, t, labels)[:, :, 1:]


class IgnoresLabels(TinyUserNet):
    def forward(self, x: torch.Tensor, t: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        return super().forward(x, t, None)


def wrong_shape(*, channels: int, image_size: int, num_classes: int) -> nn.Module:
    return WrongShape(channels, num_classes, 8)


def ignores_labels(*, channels: int, image_size: int, num_classes: int) -> nn.Module:
    return IgnoresLabels(channels, num_classes, 8)


def not_a_module(**_: Any) -> object:
    return lambda x, t, labels: x


def takes_other_arguments(in_ch: int) -> nn.Module:
    return TinyUserNet(in_ch, 0, 8)
