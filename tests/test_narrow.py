"""``hpo narrow``: the next spec from a study whose structure is known (the score depends on lr
alone), written through the real CLI, and launched."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume
from hpo.spec.loading import load_spec
from tests.service_helpers import hpo, write_spec
from tests.study_builders import add, random_params

SEARCH = {
    "lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
    "batch_size": {"type": "categorical", "choices": [16, 32]},
    "schedule": {"type": "categorical", "choices": ["linear", "cosine"]},
    "guidance_scale": {"type": "float", "low": 1.0, "high": 3.0},
}


def test_the_parameter_that_mattered_is_narrowed_the_others_fixed_and_the_spec_launches(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    spec = load_spec(write_spec(tmp_path, study={"name": "planted", "n_trials": 40}, search=SEARCH))
    study, _ = create_or_resume(spec, open_storage(url))
    rng = np.random.default_rng(0)
    for _ in range(30):  # the score is a bowl in log10(lr) around 1e-3; nothing else moves it
        p = random_params(rng)
        add(study, p, value=5 + 4 * (math.log10(p["lr"]) + 3) ** 2 + rng.normal(0, 0.05), curve=[1.0] * 4)
    best = study.best_trial
    out = tmp_path / "next.yaml"
    done = hpo("narrow", "planted", "-o", str(out), url=url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "lr: narrowed" in done.stdout and "batch_size: fixed" in done.stdout
    text = out.read_text()
    written = yaml.safe_load(text)
    lr = written["search"]["lr"]
    assert 1e-4 < lr["low"] <= best.params["lr"] <= lr["high"] < 1e-2 and lr["log"] is True
    assert set(written["search"]) == {"lr"}  # the others did not matter: fixed at the best trial's value
    assert written["train"]["batch_size"] == best.params["batch_size"]
    assert written["train"]["schedule"] == best.params["schedule"]
    assert written["sampling"]["guidance_scale"] == pytest.approx(best.params["guidance_scale"], rel=1e-3)
    assert written["baselines"] == [{"lr": best.params["lr"]}] and written["study"]["name"] == "planted-next"
    assert "# lr" not in text and "lr: {" in text and "mattered; the best" in text  # the evidence, as a comment
    assert "# batch_size: fixed at" in text and "did not matter" in text
    launched = hpo("launch", str(out), "--workers", "0", "--detach", "--skip-doctor", url=url, cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr


def test_narrowing_a_study_without_complete_trials_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    create_or_resume(load_spec(write_spec(tmp_path, study={"name": "empty"})), open_storage(url))
    done = hpo("narrow", "empty", "-o", str(tmp_path / "next.yaml"), url=url, cwd=tmp_path)
    assert done.returncode == 2 and "no complete trial yet" in done.stderr and done.stderr.count("\n") == 1


def test_a_parameter_every_complete_trial_drew_alike_is_fixed_as_unmeasured_not_as_unimportant(
    tmp_path: Path,
) -> None:
    from hpo.report.narrow import narrow

    spec = load_spec(write_spec(tmp_path, study={"name": "alike", "n_trials": 40}, search=SEARCH))
    study, _ = create_or_resume(spec, open_storage(f"sqlite:///{tmp_path / 'hpo.db'}"))
    rng = np.random.default_rng(1)
    for _ in range(12):  # batch size 32 in every trial: fANOVA cannot say whether it matters
        p = {**random_params(rng), "batch_size": 32}
        add(study, p, value=5 + 4 * (math.log10(p["lr"]) + 3) ** 2, curve=[1.0] * 4)
    changes = {c.name: c for c in narrow(spec, study.get_trials(), "FID")}
    assert changes["batch_size"].action == "fixed" and changes["batch_size"].value == 32
    assert "every complete trial drew 32, so its effect is unmeasured" in changes["batch_size"].evidence
    assert "did not matter" not in changes["batch_size"].evidence
