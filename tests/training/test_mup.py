"""µP for the builtin UNet: Adam's lr per layer read off shapes, the readout and attention scaled, and
the doctor's coordinate check that tells a width-stable setup from a mis-scaled one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from hpo.diffusion import unet as unet_module
from hpo.diffusion.network import NetInfo
from hpo.doctor.coord_check import coord_check, widths_for
from hpo.doctor.run import run_doctor
from hpo.errors import ConfigError
from hpo.spec.config import NetworkConfig, TrainConfig
from hpo.spec.loading import load_spec
from hpo.training.data import ImageData
from hpo.training.model import builtin_unet, lr_scales_for
from hpo.training.trainer import Trainer
from tests.conftest import tiny_config
from tests.service_helpers import write_spec

CPU = torch.device("cpu")
INFO = NetInfo(channels=3, image_size=8, num_classes=2)


def mup_config(width: int, **changes: object) -> TrainConfig:
    settings: dict[str, object] = {"parameterization": "mup", "mup_base_channels": 8, "attention_resolutions": (4,)}
    return tiny_config(**{**settings, "base_channels": width, **changes})


def test_hidden_weights_take_the_lr_divided_by_the_width_multiplier_and_the_rest_the_base_lr() -> None:
    cfg = mup_config(32)
    scales = lr_scales_for(cfg, INFO, builtin_unet(cfg, INFO))
    assert scales is not None
    assert scales["mid1.conv1.weight"] == scales["mid_attn.qkv.weight"] == scales["time_mlp.2.weight"] == 0.25
    assert scales["down.1.blocks.0.skip.weight"] == 0.25  # 1×1 convolutions are matrix-like too
    vector_like = ["mid1.conv1.bias", "mid1.norm1.weight", "stem.weight", "class_emb.weight", "out.weight", "out.bias"]
    assert all(scales[name] == 1.0 for name in vector_like), {name: scales[name] for name in vector_like}
    assert lr_scales_for(cfg.replace(parameterization="standard"), INFO, builtin_unet(cfg, INFO)) is None


def test_at_its_base_width_the_mup_network_is_the_standard_network() -> None:
    x, t, labels = torch.randn(2, 3, 8, 8), torch.tensor([10.0, 900.0]), torch.tensor([0, 2])
    outputs = []
    for parameterization in ("standard", "mup"):
        torch.manual_seed(0)
        net = builtin_unet(mup_config(8, parameterization=parameterization), INFO)
        for p in net.parameters():  # the zero-initialised readout would hide any difference
            nn.init.normal_(p, std=0.1)
        outputs.append(net(x, t, labels))
    assert torch.equal(outputs[0], outputs[1])


def test_wider_mup_networks_divide_readout_and_attention_logits_by_the_width_multiplier() -> None:
    net = builtin_unet(mup_config(32), INFO)
    assert net.out.mult == 0.25
    assert net.mid_attn.scale == pytest.approx(1 / 16)  # 1/√16 at the base width's 16 channels, × 16/64
    assert builtin_unet(tiny_config(base_channels=32), INFO).mid_attn.scale is None  # SDPA's own 1/√d


def test_the_trainer_steps_each_group_at_the_scheduled_lr_times_its_multiplier(digits8: ImageData) -> None:
    trainer = Trainer(mup_config(16, lr=1e-3, lr_schedule="constant"), digits8, CPU)
    trainer.train_step()
    assert sorted((g["lr_scale"], g["lr"]) for g in trainer.opt.param_groups) == [(0.5, 5e-4), (1.0, 1e-3)]
    assert sum(len(g["params"]) for g in trainer.opt.param_groups) == len(list(trainer.model.parameters()))


def test_mup_on_a_network_factory_other_than_the_builtin_unet_is_refused_naming_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"parameterization.*builtin UNet.*diffusers"):
        TrainConfig(parameterization="mup", network=NetworkConfig(factory="diffusers"))


def test_the_coord_check_widths_end_at_the_runs_own_width_or_grow_from_a_tiny_one() -> None:
    assert widths_for(64) == [16, 32, 64]
    assert widths_for(8) == [8, 16, 32]


def test_coord_check_passes_the_builtin_unet_under_mup(digits8: ImageData) -> None:
    check = coord_check(mup_config(32, lr=1e-3), digits8, CPU)
    assert check.status == "pass", check.line()
    assert "widths 8/16/32" in check.reason


def test_coord_check_fails_the_standard_parameterisation_naming_a_layer(digits8: ImageData) -> None:
    check = coord_check(tiny_config(base_channels=32, lr=1e-3), digits8, CPU)
    assert check.status == "fail"
    assert "grow as width^" in check.reason and "layer " in check.reason


def test_coord_check_names_a_readout_that_lost_its_width_multiplier(
    digits8: ImageData, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unet_module.Readout, "forward", nn.Conv2d.forward)  # planted: µP without its readout rule
    check = coord_check(mup_config(32, lr=1e-3), digits8, CPU)
    assert check.status == "fail"
    assert check.reason.startswith("layer out: its moves in 3 steps grow as width^")


def test_the_doctor_runs_the_coord_check_on_a_mup_spec_and_only_there(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, train={"parameterization": "mup", "mup_base_channels": 8}))
    lines = [c.line() for c in run_doctor(spec, fast=True, out_dir=tmp_path)]
    assert any(line.startswith("[PASS] model: coord check: µP") for line in lines), lines
    standard = load_spec(write_spec(tmp_path, name="standard.yaml"))
    assert not any("coord check" in c.name for c in run_doctor(standard, fast=True, out_dir=tmp_path))
