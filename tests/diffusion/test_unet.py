from __future__ import annotations

import torch

from hpo.diffusion.unet import UNet, UNetConfig
from hpo.training.model import count_parameters


def test_ddpm_cifar_configuration_has_about_35m_parameters() -> None:
    net = UNet(
        UNetConfig(
            base_channels=128, channel_mult=(1, 2, 2, 2), num_res_blocks=2, attention_resolutions=(16,), image_size=32
        )
    )
    assert 35_000_000 < count_parameters(net) < 36_500_000


def test_unet_keeps_shape_with_attention_and_classes() -> None:
    net = UNet(
        UNetConfig(
            in_channels=3,
            base_channels=16,
            channel_mult=(1, 2, 2),
            num_res_blocks=2,
            attention_resolutions=(8, 4),
            num_classes=5,
            image_size=16,
        )
    )
    x = torch.randn(3, 3, 16, 16)
    assert net(x, torch.tensor([0.0, 10.0, 999.0]), torch.tensor([0, 4, 5])).shape == x.shape
    assert net(x, torch.tensor([0.0, 10.0, 999.0]), None).shape == x.shape  # None → null class
