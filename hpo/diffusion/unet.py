"""A DDPM-style UNet (Ho et al. 2020, Appendix B) taking ``(x, t, class)``; it knows no schedule.

Timesteps arrive as floats on a 0..1000 scale, so networks for different T see comparable inputs.
Class conditioning uses a learned null class (index ``num_classes``) for classifier-free guidance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class UNetConfig:
    in_channels: int = 3
    base_channels: int = 32
    channel_mult: tuple[int, ...] = (1, 2, 2)
    num_res_blocks: int = 1
    attention_resolutions: tuple[int, ...] = ()
    dropout: float = 0.1
    num_classes: int = 0  # 0 = unconditional
    image_size: int = 32
    mup_base_channels: int = 0  # µP's base width (Yang et al. 2022); 0 = the standard parameterisation

    @property
    def width_mult(self) -> float:
        """How much wider than µP's base this network is (1 under the standard parameterisation)."""
        return self.base_channels / self.mup_base_channels if self.mup_base_channels else 1.0


def group_norm(channels: int) -> nn.GroupNorm:
    """Up to 32 groups of at least 4 channels. With one channel per group the norm would erase the
    per-channel time and class shift that each residual block adds (``hpo doctor`` caught that)."""
    groups = max(1, min(32, channels // 4))
    while channels % groups:
        groups -= 1
    return nn.GroupNorm(groups, channels)


def scaled_channels(channels: int, factor: float) -> int:
    """``channels × factor`` in a multiple of 4 (``group_norm``'s group size), at least 4."""
    return max(4, 4 * round(channels * factor / 4))


def zero_init(module: nn.Module) -> nn.Module:
    """Zero the weights of a layer that ends a residual branch, so each block starts as identity."""
    for p in module.parameters():
        nn.init.zeros_(p)
    return module


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding (Vaswani et al. 2017) of float timesteps, shape (B, dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=1)
    return F.pad(emb, (0, dim % 2))


class Readout(nn.Conv2d):
    """The last convolution, its output times ``mult``: µP's readout multiplier 1/width_mult (1 otherwise)."""

    def __init__(self, cin: int, cout: int, mult: float) -> None:
        super().__init__(cin, cout, 3, padding=1)
        self.mult = mult

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.mult


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, emb_dim: int, dropout: float) -> None:
        super().__init__()
        self.norm1, self.conv1 = group_norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.emb = nn.Linear(emb_dim, cout)
        self.norm2, self.drop = group_norm(cout), nn.Dropout(dropout)
        self.conv2 = zero_init(nn.Conv2d(cout, cout, 3, padding=1))
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.emb(F.silu(emb))[:, :, None, None]
        h = self.conv2(self.drop(F.silu(self.norm2(h))))
        return self.skip(x) + h


class AttentionBlock(nn.Module):
    """Single-head self-attention with 1×1 convolutional q, k, v and output projections. Logits are
    scaled by 1/√d, or under µP by 1/d (matching 1/√d at the base width ``channels / width_mult``)."""

    def __init__(self, channels: int, width_mult: float = 1.0) -> None:
        super().__init__()
        self.scale = None if width_mult == 1.0 else (channels / width_mult) ** -0.5 / width_mult
        self.norm = group_norm(channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.proj = zero_init(nn.Conv2d(channels, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, c, h * w).transpose(-1, -2).unbind(1)
        out = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], scale=self.scale)[:, 0]
        return x + self.proj(out.transpose(-1, -2).reshape(b, c, h, w))


class Level(nn.Module):
    """Residual blocks (each optionally followed by attention) at one resolution."""

    def __init__(
        self, cins: list[int], cout: int, emb_dim: int, dropout: float, attention: bool, width_mult: float
    ) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(ResBlock(c, cout, emb_dim, dropout) for c in cins)
        self.attns = nn.ModuleList(AttentionBlock(cout, width_mult) if attention else nn.Identity() for _ in cins)

    def pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return list(zip(self.blocks, self.attns, strict=True))


class UNet(nn.Module):
    def __init__(self, cfg: UNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        ch = cfg.base_channels
        self.emb_dim = emb_dim = 4 * ch
        self.time_mlp = nn.Sequential(nn.Linear(ch, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        self.class_emb = nn.Embedding(cfg.num_classes + 1, emb_dim) if cfg.num_classes > 0 else None
        self.stem = nn.Conv2d(cfg.in_channels, ch, 3, padding=1)
        chans = [ch * m for m in cfg.channel_mult]
        skips, res, cur = [ch], cfg.image_size, ch
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        for i, cout in enumerate(chans):
            cins = [cur] + [cout] * (cfg.num_res_blocks - 1)
            level = Level(cins, cout, emb_dim, cfg.dropout, res in cfg.attention_resolutions, cfg.width_mult)
            self.down.append(level)
            cur = cout
            skips += [cout] * cfg.num_res_blocks
            last = i == len(chans) - 1
            self.downsample.append(nn.Identity() if last else nn.Conv2d(cur, cur, 3, stride=2, padding=1))
            if not last:
                skips.append(cur)
                res //= 2
        self.mid1 = ResBlock(cur, cur, emb_dim, cfg.dropout)
        self.mid_attn = AttentionBlock(cur, cfg.width_mult)
        self.mid2 = ResBlock(cur, cur, emb_dim, cfg.dropout)
        self.up = nn.ModuleList()
        self.upsample = nn.ModuleList()
        for i, cout in reversed(list(enumerate(chans))):
            cins = []
            for _ in range(cfg.num_res_blocks + 1):
                cins.append(cur + skips.pop())
                cur = cout
            self.up.append(Level(cins, cout, emb_dim, cfg.dropout, res in cfg.attention_resolutions, cfg.width_mult))
            self.upsample.append(nn.Conv2d(cur, cur, 3, padding=1) if i > 0 else nn.Identity())
            if i > 0:
                res *= 2
        self.out_norm = group_norm(cur)
        self.out = zero_init(Readout(cur, cfg.in_channels, 1.0 / cfg.width_mult))  # µP: its lr stays the base lr

    @property
    def null_class(self) -> int:
        return self.cfg.num_classes

    def embed(self, t: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        emb = self.time_mlp(timestep_embedding(t, self.cfg.base_channels))
        if self.class_emb is not None:
            if labels is None:
                labels = torch.full_like(t, self.null_class, dtype=torch.long)
            emb = emb + self.class_emb(labels)
        return emb

    def forward(self, x: torch.Tensor, t: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        emb = self.embed(t, labels)
        h = self.stem(x)
        hs = [h]
        for level, down in zip(self.down, self.downsample, strict=True):
            for block, attn in cast(Level, level).pairs():
                h = attn(block(h, emb))
                hs.append(h)
            if not isinstance(down, nn.Identity):
                h = down(h)
                hs.append(h)
        h = self.mid2(self.mid_attn(self.mid1(h, emb)), emb)
        for level, up in zip(self.up, self.upsample, strict=True):
            for block, attn in cast(Level, level).pairs():
                h = attn(block(torch.cat([h, hs.pop()], dim=1), emb))
            if not isinstance(up, nn.Identity):
                h = up(F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.out(F.silu(self.out_norm(h)))
