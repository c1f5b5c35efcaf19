from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from tests.service_helpers import write_spec
from tests.test_spec import run_cli


def test_hpo_train_runs_one_configuration_and_writes_a_sample_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(
        tmp_path,
        baselines=[
            {
                "lr": 1e-3,
                "batch_size": 16,
                "timesteps": 50,
                "schedule": "cosine",
                "guidance_scale": 2.0,
                "ddim_steps": 4,
            }
        ],
    )
    out = tmp_path / "run"
    code, _ = run_cli(
        ["train", str(spec), "--set", "kimg=0.5", "--set", "data.val_fraction=0.2", "-o", str(out)], monkeypatch, capsys
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["val_loss"] > 0 and summary["parameters"] > 0
    grid = Image.open(out / "samples.png")
    assert grid.size[0] > 8 * 8  # an 8×8 grid of 8-px samples with padding
    assert (out / "checkpoint.pt").exists()


def test_hpo_train_rejects_an_unknown_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_cli(["train", str(write_spec(tmp_path)), "--set", "learnig_rate=1"], monkeypatch, capsys)
    assert code == 2 and "train.learnig_rate: unknown key" in err and err.count("\n") == 1
