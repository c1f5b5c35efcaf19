"""The companion studies end to end through a worker process: `hpo confirm --budgets` scores every
budget of one run, `hpo confirm --widths` trains each width and lr and reports the transfer."""

from __future__ import annotations

import json
from pathlib import Path

import optuna

from hpo.records import FLOOR_ATTR, LADDER
from tests.service_helpers import hpo, write_spec


def test_hpo_confirm_budgets_scores_every_rung_of_one_run_through_a_worker_process(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        study={"name": "lad", "n_trials": 2, "target_kimg": 2.0},
        score={"features": "classifier", "num_samples": 32, "batch_size": 32, "grid_size": 16},
        sampler={"name": "random", "seed": 0},
        pruner={"name": "none"},
        train={"kimg": 0.4, "num_evals": 2},
    )
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    launched = hpo("launch", str(spec), "--skip-doctor", "--artifacts", str(tmp_path / "a"), url=url, cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr[-2000:]
    out = hpo(
        "confirm", "lad", "--top", "2", "--seeds", "2", "--budgets", "1,2,4", "--artifacts", str(tmp_path / "a"),
        url=url, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "1× (0.4 kimg)" in out.stdout and "4× (1.6 kimg)" in out.stdout
    companion = optuna.load_study(study_name="lad-ladder", storage=url)
    trials = companion.get_trials()
    assert len(trials) == 4 and all(t.state.name == "COMPLETE" for t in trials)  # 2 configurations × 2 seeds
    for t in trials:
        curve = t.user_attrs["curve"]
        assert sorted(map(int, curve)) == [1, 2, 3, 4]  # one evaluation point per multiple, one run to 4×
        assert all({"score", "copy_pixels", "copy_features", "gap"} <= set(p) for p in curve.values())
    assert set(companion.user_attrs[FLOOR_ATTR]) >= {"score", "copy_pixels_high"}
    assert "Real held-out images score" in out.stdout and "forecast at 2 kimg" in out.stdout
    assert out.stdout.count("per doubling") == 2  # a stop verdict per configuration
    status = hpo("status", "lad-ladder", "--wide", url=url, cwd=tmp_path)
    assert status.returncode == 0 and "gap@last" in status.stdout and "stop" in status.stdout
    rows = [line for line in status.stdout.splitlines() if "COMPLETE" in line]
    assert len(rows) == 4 and all(any(w in r for w in ("improving", "plateau", "copying")) for r in rows), rows
    page = (tmp_path / "reports" / "lad.html").read_text()
    assert "4× (1.6 kimg)" in page and json.dumps(companion.user_attrs[LADDER])


def test_hpo_confirm_widths_trains_each_width_and_lr_through_a_worker_and_reports_the_transfer(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path, study={"name": "wid", "n_trials": 1}, sampler={"name": "random", "seed": 0}, pruner={"name": "none"},
        train={"kimg": 0.4, "num_evals": 1},
        score={"features": "classifier", "num_samples": 32, "batch_size": 32, "grid_size": 16},
    )  # fmt: skip
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    launched = hpo("launch", str(spec), "--skip-doctor", "--artifacts", str(tmp_path / "a"), url=url, cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr[-2000:]
    out = hpo(
        "confirm", "wid", "--widths", "1,2", "--lrs", "3", "--top", "1", "--seeds", "1",
        "--artifacts", str(tmp_path / "a"), url=url, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    companion = optuna.load_study(study_name="wid-widths", storage=url)
    trials = companion.get_trials()
    assert len(trials) == 6 and all(t.state.name in ("COMPLETE", "PRUNED") for t in trials)
    assert sorted({t.params["base_channels"] for t in trials}) == [8, 16]  # the tiny spec's 8 channels, ×1 and ×2
    assert "lr ∝ width^" in out.stdout and "lrs the seeds cannot separate" in out.stdout, out.stdout
    page = (tmp_path / "reports" / "wid.html").read_text()
    assert "Does the learning rate hold on a wider network?" in page and "against lr per width" in page
    again = hpo("confirm", "wid", "--widths", "1,2", "--lrs", "3", "--top", "1", "--seeds", "1", "--json",
                "--workers", "0", url=url, cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    data = json.loads(again.stdout)
    assert data["companion"] == "wid-widths" and data["finished"] == data["expected"] == 6
    (config,) = data["configurations"]
    assert [o["width"] for o in config["optima"]] == [8, 16] and config["state"] in ("holds", "drifts", "undetermined")
