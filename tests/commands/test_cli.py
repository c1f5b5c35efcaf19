"""The command line as a user meets it: version, read-only commands that create nothing, a trial
reproduced by hand, storage URL forms, a worker stopped while starting, and a launch whose workers
all failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution

from hpo import __version__
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume
from hpo.service.urls import resolve_url
from hpo.spec.loading import load_spec
from tests.cli import hpo_in_process, run_cli
from tests.service_helpers import write_spec


def test_version_is_printed_once_from_the_package() -> None:
    code, out, _ = run_cli(["--version"])
    assert code == 0 and out.strip() == f"hpo {__version__}"


@pytest.mark.parametrize("command", [["status"], ["status", "x"], ["report", "x"], ["confirm", "x"], ["dashboard"]])
def test_read_only_commands_refuse_a_missing_embedded_database_and_create_nothing(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HPO_STORAGE", raising=False)
    code, _, err = run_cli(command)
    assert code == 2 and err.startswith("error: no database at hpo.db") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budgets", "1,x"], "error: --budgets '1,x': expected whole multiples of the study's budget from 1 to 64"),
        (["--budgets", "0,4"], "error: --budgets '0,4': expected whole multiples"),
        (["--budgets", "1,4", "--kimg", "32"], "error: --budgets and --kimg: give one"),
        (["--widths", "1"], "error: --widths '1': expected two or more multiples of the study's base channels"),
        (["--widths", "0,1"], "error: --widths '0,1': expected two or more multiples"),
        (["--widths", "1,2", "--budgets", "1,4"], "error: --widths with --budgets or --kimg: give one"),
    ],
)
def test_confirm_refuses_bad_budgets_and_widths_in_one_line_and_creates_nothing(
    args: list[str], message: str, tmp_path: Path
) -> None:
    code, _, err = run_cli(["confirm", "x", *args])
    assert code == 2 and err.startswith(message) and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_both_postgresql_url_forms_are_accepted() -> None:
    plain = resolve_url("postgresql://u:p@db:5432/hpo")
    explicit = resolve_url("postgresql+psycopg2://u:p@db:5432/hpo")
    assert plain == explicit == "postgresql+psycopg2://u:p@db:5432/hpo"


def test_hpo_train_from_a_trial_reproduces_its_parameters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(write_spec(tmp_path, study={"name": "source", "n_trials": 2}))
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    study, _ = create_or_resume(spec, open_storage(url))
    params: dict[str, Any] = {
        "lr": 2e-3,
        "batch_size": 16,
        "timesteps": 50,
        "schedule": "cosine",
        "guidance_scale": 2.0,
        "steps": 4,
    }
    dists: dict[str, BaseDistribution] = {name: CategoricalDistribution([value]) for name, value in params.items()}
    study.add_trial(optuna.create_trial(params=params, distributions=dists, value=1.0))
    out = tmp_path / "again"
    code, _, err = run_cli(["train", "--from", "source:0", "--storage", url, "-o", str(out), "--set", "kimg=0.4"])
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sampling"] == {"guidance_scale": 2.0, "steps": 4, "eta": 0.0}  # the trial's own sampling
    checkpoint = __import__("torch").load(out / "checkpoint.pt", weights_only=True)
    assert checkpoint["config"]["lr"] == 2e-3 and checkpoint["config"]["schedule"] == "cosine"
    for wrong, message in (("source", "expected STUDY:TRIAL"), ("source:7", "has no trial 7"), ("nope:0", "no study")):
        code, _, err = run_cli(["train", "--from", wrong, "--storage", url])
        assert code == 2 and message in err and err.count("\n") == 1


def test_status_labels_the_score_and_the_validation_metric_apart(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, study={"name": "labels", "n_trials": 2}))
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    study, _ = create_or_resume(spec, open_storage(url))
    dist: dict[str, BaseDistribution] = {"lr": FloatDistribution(1e-4, 1e-2)}
    curve = {"1": {"kimg": 0.4, "val_rel": 0.71}}
    study.add_trial(
        optuna.create_trial(
            params={"lr": 1e-3}, distributions=dist, value=2.69, user_attrs={"curve": curve, "fid_noise": 0.3}
        )
    )
    study.add_trial(
        optuna.create_trial(
            state=optuna.trial.TrialState.PRUNED, params={"lr": 5e-3}, distributions=dist,
            user_attrs={"curve": curve, "fail_reason": "pruned_by_median"},
        )
    )  # fmt: skip
    study.add_trial(
        optuna.create_trial(params={"lr": 2e-3}, distributions=dist, value=3.0, user_attrs={"fid_noise": 0.4})
    )
    done = hpo_in_process("status", "labels", "--wide", url=url)  # every column, the table last
    assert "best classifier-FID 2.69 ± 0.35" in done.stdout  # the noise pooled over both re-scored trials
    header, _, complete, pruned, _ = done.stdout.strip().splitlines()[-5:]
    assert header.split()[:4] == ["#", "state", "classifier-FID", "val_rel@last"]
    assert complete.split()[1:4] == ["COMPLETE", "2.69", "0.71"]
    assert pruned.split()[1:4] == ["PRUNED", "-", "0.71"] and "pruned_by_median" in pruned
