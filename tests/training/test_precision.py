"""bf16 on the CPU: sampling only, where the CPU multiplies bf16 natively (or HPO_CPU_BF16 says so);
training and the validation metric stay fp32."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from hpo.cli import app
from hpo.errors import HpoError
from hpo.spec.sampling import SamplingConfig
from hpo.training.data import ImageData
from hpo.training.generate import sample_images
from hpo.training.runtime import autocast, cpu_bf16
from hpo.training.trainer import train
from tests.conftest import tiny_config

CPU = torch.device("cpu")


def _conv_dtype(*, sampling: bool) -> torch.dtype:
    conv = nn.Conv2d(3, 4, 3)
    with autocast(CPU, sampling=sampling):
        return conv(torch.randn(1, 3, 8, 8)).dtype


def test_sampling_runs_the_network_in_bf16_on_a_bf16_cpu_and_training_never_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HPO_CPU_BF16", "1")
    assert _conv_dtype(sampling=True) == torch.bfloat16
    assert _conv_dtype(sampling=False) == torch.float32
    monkeypatch.setenv("HPO_CPU_BF16", "0")
    assert _conv_dtype(sampling=True) == torch.float32


def test_auto_follows_the_cpus_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert not cpu_bf16()
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert cpu_bf16()


def test_bf16_samples_stay_within_a_grey_level_of_fp32(digits8: ImageData, monkeypatch: pytest.MonkeyPatch) -> None:
    model = train(tiny_config(kimg=2, batch_size=32, lr=2e-3), digits8).model
    sampling = SamplingConfig(2.0, 10)
    monkeypatch.setenv("HPO_CPU_BF16", "0")
    fp32 = sample_images(model, sampling, n=64, batch_size=64).float()
    monkeypatch.setenv("HPO_CPU_BF16", "1")
    bf16 = sample_images(model, sampling, n=64, batch_size=64).float()
    gap = (fp32 - bf16).abs().mean().item()
    assert 0 < gap < 1.0, f"mean |fp32 - bf16| = {gap:.3f} grey levels"  # 0 would mean bf16 never ran


def test_a_bad_setting_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPO_CPU_BF16", "yes")
    with pytest.raises(HpoError, match="HPO_CPU_BF16='yes': expected 0"):
        cpu_bf16()
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["error: HPO_CPU_BF16='yes': expected 0 (fp32), 1 (bf16) or auto"]
