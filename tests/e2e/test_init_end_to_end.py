"""`hpo init` end to end on a folder of photos: a spec the doctor passes, a study, an export and samples."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image

from hpo.spec.loading import load_spec
from tests.cli import run_cli
from tests.planning.test_init import edit, init, two_classes


def test_a_folder_of_photos_becomes_a_spec_the_doctor_passes_a_study_an_export_and_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("hpo.service.local.threads_per_worker", lambda workers: 1)  # one core per test process
    photos = two_classes(tmp_path / "photos")
    code, out, err = init(str(photos), "-o", "search_spaces/mine.yaml")
    assert code == 0, err
    assert "2 classes (circles: 60, squares: 60)" in out
    assert "next: hpo doctor search_spaces/mine.yaml   then   hpo launch search_spaces/mine.yaml" in out
    timed = re.search(
        r"study time: ~([\d.]+) h for (\d+) trials .*: ([\d.]+) min per complete trial, ([\d.]+) of training and "
        r"([\d.]+) of sampling for the score \(([\d,]+) network evaluations per image", out
    )  # fmt: skip
    assert timed and float(timed[4]) > 0 and float(timed[5]) > 0, out  # planned here: timed on this machine
    assert float(timed[1]) == pytest.approx(float(timed[3]) * int(timed[2]) / 60, abs=0.06)
    assert float(timed[3]) == pytest.approx(float(timed[4]) + float(timed[5]), abs=0.11)
    planned = load_spec(Path("search_spaces/mine.yaml"))
    assert int(timed[6].replace(",", "")) == planned.sampling.evaluations(planned.score.num_samples)
    spec = Path("search_spaces/mine.yaml")
    assert all("#" in line for line in spec.read_text().splitlines() if line.strip())  # every line says why
    code, out, err = run_cli(["doctor", str(spec), "--fast", "--threads", "1"])
    assert code == 0, out + err
    edit(spec, {  # a 2-trial study of a small network that runs in about a minute on one thread
        "study": {"n_trials": 2, "target_kimg": 0.8},
        "train": {"kimg": 0.2, "num_evals": 1, "val_images": 16, "base_channels": 16, "channel_mult": [1, 2]},
        "sampling": {"guidance_scale": [2.0], "steps": [8]},
        "score": {"num_samples": 32, "batch_size": 32, "grid_size": 16},
    })  # fmt: skip
    code, out, err = run_cli(["launch", str(spec), "--skip-doctor"])  # the doctor has just passed it
    assert code == 0, out + err
    assert "2/2 finished: 2 complete" in out, out
    code, out, err = run_cli(["export", "photos-32", "-o", "exported"])
    assert code == 0, out + err
    code, out, err = run_cli(["sample", "exported", "-n", "4", "-o", "grid.png", "--threads", "1"])
    assert code == 0, out + err
    with Image.open("grid.png") as grid:
        assert grid.format == "PNG" and min(grid.size) >= 32
