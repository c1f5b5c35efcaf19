from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from tests.cli import run_cli
from tests.service_helpers import write_spec


def test_hpo_train_runs_one_configuration_sweeps_sampling_and_writes_a_sample_grid(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        search={"lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True}},
        sampling={"guidance_scale": [1.0, 2.0], "steps": [4, 8]},
        score={"features": "classifier", "num_samples": 32, "batch_size": 32, "grid_size": 16},
        tracking={"tensorboard": True},
        baselines=[{"lr": 1e-3}],
    )
    out = tmp_path / "run"
    code, stdout, _ = run_cli(
        ["train", str(spec), "--set", "kimg=0.5", "--set", "data.val_fraction=0.2", "-o", str(out), "--threads", "1"]
    )
    assert code == 0, stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["val_loss"] > 0 and summary["num_parameters"] > 0
    assert len(summary["sweep"]) == 4  # every (guidance, steps) combination, at the full sample count
    assert summary["value"] == min(s["fid"] for s in summary["sweep"])
    assert "<- best" in stdout and "guidance" in stdout  # the sweep table
    grid = Image.open(out / "samples.png")
    assert grid.size[1] > 8 * 8  # the trial's layout: one row per class (10 digits) of 8-px samples
    curve = summary["curve"]
    assert curve and all({"score", "copy_pixels", "copy_features", "gap", "kimg"} <= set(p) for p in curve.values())
    assert all(0.0 <= p["copy_pixels_low"] <= p["copy_pixels"] <= p["copy_pixels_high"] <= 1.0 for p in curve.values())
    assert summary["floor"]["score"] > 0 and 0.0 <= summary["floor"]["copy_pixels"] <= 1.0
    floor = summary["floor"]  # real held-out images: the ceiling of precision, recall and class accuracy
    assert 0.5 < floor["precision"] <= 1 and 0.5 < floor["recall"] <= 1 and 0.5 < floor["class_accuracy"] <= 1
    assert all(0 <= s["precision"] <= 1 and 0 <= s["recall"] <= 1 for s in summary["sweep"])
    assert "prec" in stdout and "recall" in stdout
    assert summary["stop"]["kind"] in ("too_early", "improving", "plateau", "copying")
    assert f"stop verdict: {summary['stop']['text']}" in stdout
    from tests.tensorboard_records import records, scalar

    recs = records(out / "tensorboard")
    for name in ("score", "copy_pixels", "copy_features", "gap"):  # TensorBoard plots each point's numbers too
        logged = sorted(scalar(v) for tag, _, v in recs if tag == f"val/{name}")
        assert logged == pytest.approx(sorted(p[name] for p in curve.values()), rel=1e-5), name
    hardware = {tag for tag, _, _ in recs if tag.startswith("hw/")}
    assert {"hw/rss_mb", "hw/cpu_percent", "hw/data_wait"} <= hardware  # the CPU's readings at every sync
    assert summary["hardware"]["rss_peak_mb"] > 0 and "hardware: " in stdout and "waiting for data" in stdout
    assert (out / "checkpoint.pt").exists() and list((out / "tensorboard").glob("events.out.tfevents.*"))


def test_hpo_train_rejects_an_unknown_override(tmp_path: Path) -> None:
    code, _, err = run_cli(["train", str(write_spec(tmp_path)), "--set", "learnig_rate=1"])
    assert code == 2 and "train.learnig_rate: unknown key" in err and err.count("\n") == 1
