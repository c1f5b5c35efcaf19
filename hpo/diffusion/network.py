"""The network protocol, written down once: what any denoising network (ours or a user's) must be.

A network is an ``nn.Module`` called as ``net(x_t, t, labels)``:

* ``x_t``: noisy images, float (B, C, H, W), in the data's scale ([-1, 1] at t = 0);
* ``t``: float (B,), the timestep index scaled to 0..1000 (``index · 1000 / T``), so networks for
  different T see comparable inputs (an embedding table over integer steps rounds it);
* ``labels``: int64 (B,) in [0, num_classes], where ``num_classes`` itself is the null label that
  label dropout trains for classifier-free guidance; ``None`` for unconditional networks;
* returns a tensor shaped like ``x_t``: the prediction the run's ``train.prediction`` names (ε, v
  or x0).

A factory receives ``channels``, ``image_size``, ``num_classes`` (0 for unconditional) and its
keyword arguments, and returns such a module. :func:`check_protocol` refuses one that breaks it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from hpo.errors import HpoError


class ProtocolError(HpoError):
    """A network that does not follow the protocol above."""


@dataclass(frozen=True)
class NetInfo:
    channels: int
    image_size: int
    num_classes: int  # 0 = unconditional; label ``num_classes`` is the null class

    @property
    def null_class(self) -> int:
        return self.num_classes

    @property
    def conditional(self) -> bool:
        return self.num_classes > 0


@torch.no_grad()
def check_protocol(net: object, info: NetInfo, *, name: str) -> None:
    """Run a perturbed copy on a tiny batch: the shape, finiteness, and dependence on t and labels.
    (Parameters are perturbed so zero-initialised output layers cannot hide what reaches them.)"""
    if not isinstance(net, nn.Module):
        raise ProtocolError(f"network {name} returned {type(net).__name__}, not a torch.nn.Module")
    probe = copy.deepcopy(net).float().eval()
    gen = torch.Generator().manual_seed(0)
    for p in probe.parameters():
        p.add_(torch.randn(p.shape, generator=gen) * 0.02)
    shape = (2, info.channels, info.image_size, info.image_size)
    x, t = torch.randn(shape, generator=gen), torch.tensor([150.0, 650.0])
    labels = torch.tensor([0, min(1, info.num_classes - 1)]) if info.conditional else None
    out = _call(probe, x, t, labels, name)
    if tuple(out.shape) != shape:
        raise ProtocolError(
            f"network {name} returned shape {tuple(out.shape)} for input {shape}; it must return the prediction "
            "with the input's shape"
        )
    if not torch.isfinite(out).all():
        raise ProtocolError(f"network {name} returned non-finite values for a random input")
    if torch.allclose(out, _call(probe, x, 1000.0 - t, labels, name)):
        raise ProtocolError(f"network {name} ignores its timestep input t: it cannot tell noise levels apart")
    if labels is not None:
        null = torch.full_like(labels, info.null_class)
        if torch.allclose(out, _call(probe, x, t, null, name)):
            raise ProtocolError(
                f"network {name} ignores its class labels although the data has {info.num_classes} classes; "
                "embed them (with a null label at index num_classes) or set train.conditional: false"
            )


def _call(net: nn.Module, x: torch.Tensor, t: torch.Tensor, labels: torch.Tensor | None, name: str) -> torch.Tensor:
    try:
        out = net(x, t, labels)
    except Exception as err:
        raise ProtocolError(
            f"network {name} failed when called as net(x_t, t, labels) with x_t {tuple(x.shape)}: "
            f"{type(err).__name__}: {err}"
        ) from None
    if not isinstance(out, torch.Tensor):
        raise ProtocolError(f"network {name} returned {type(out).__name__}, not a tensor")
    return out.float()
