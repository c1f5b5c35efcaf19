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
from tests.cli import hpo_in_process as hpo
from tests.service_helpers import study_report, write_spec
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
    from hpo.analysis.narrow import narrow

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


def test_a_mostly_pruned_study_narrows_from_the_validation_metric_and_says_so(tmp_path: Path) -> None:
    """The quickstart's case: 2 complete trials, 8 pruned at the first evaluation point. The score
    cannot rank parameters; the validation metric at the point every trial reached can."""
    from optuna.trial import TrialState

    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    spec = load_spec(write_spec(tmp_path, study={"name": "pruned", "n_trials": 10}, search=SEARCH))
    study, _ = create_or_resume(spec, open_storage(url))
    rng = np.random.default_rng(2)
    for i in range(10):  # the validation metric is a bowl in log10(lr) around 1e-3
        p = random_params(rng)
        val = 0.5 + 0.3 * (math.log10(p["lr"]) + 3) ** 2 + rng.normal(0, 0.01)
        state = TrialState.COMPLETE if i < 2 else TrialState.PRUNED
        add(study, p, value=5 + 10 * val, curve=[val] if state == TrialState.PRUNED else [val, val], state=state)
    out = tmp_path / "next.yaml"
    done = hpo("narrow", "pruned", "-o", str(out), url=url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "lr: narrowed" in done.stdout and "guidance_scale: kept" in done.stdout
    text = out.read_text()
    assert "the validation metric (val_rel) at evaluation point 1" in text and "10 trials" in text
    assert "does not depend on sampling settings" in text
    launched = hpo("launch", str(out), "--workers", "0", "--detach", "--skip-doctor", url=url, cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr
    report = study_report(study, tmp_path / "pruned.html").read_text()  # it suggests what just worked
    assert "hpo narrow pruned -o next.yaml` writes the next spec from the importances of the validation" in report


def test_the_report_suggests_narrowing_only_when_it_would_work(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    spec = load_spec(write_spec(tmp_path, study={"name": "two", "n_trials": 10}, search=SEARCH))
    study, _ = create_or_resume(spec, open_storage(url))
    rng = np.random.default_rng(3)
    for _ in range(2):
        add(study, random_params(rng), value=5.0 + rng.random(), curve=[0.5, 0.4])
    report = study_report(study, tmp_path / "two.html").read_text()
    assert "hpo narrow two -o" not in report and "more trials before narrowing: hpo narrow needs importances" in report
    done = hpo("narrow", "two", "-o", str(tmp_path / "next.yaml"), url=url, cwd=tmp_path)
    assert done.returncode == 2 and "run more trials (`hpo launch SPEC` again resumes" in done.stderr
