"""``ddim_steps`` became ``steps`` (the step count of every sampler, not DDIM's alone). Specs that say
``ddim_steps`` still load, with one line saying so; studies stored before the rename read the same in
``hpo status`` (text and JSON) and ``hpo report`` as the same study stored after it."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import optuna
import pytest
from optuna.distributions import IntDistribution

from hpo.errors import ConfigError
from hpo.service.storage import open_storage
from hpo.spec.loading import load_spec
from hpo.spec.sampling import SamplingConfig
from tests.cli import run_cli
from tests.report.test_report_reader import quickstart_sized
from tests.service_helpers import TINY_SPEC, study_report, write_spec


def test_a_spec_that_says_ddim_steps_loads_as_steps_with_one_line_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    search = {k: v for k, v in TINY_SPEC["search"].items() if k not in ("steps", "guidance_scale")}
    path = write_spec(tmp_path, sampling={"guidance_scale": [1.0, 2.0], "ddim_steps": [4, 8]}, search=search)
    spec = load_spec(path)
    assert spec.sampling.steps == (4, 8) and "ddim_steps" not in spec.to_dict()["sampling"]
    said = capsys.readouterr().err
    assert said == f"note: {path}: sampling.ddim_steps → sampling.steps (read as the new name; rename it in the file)\n"


def test_a_searched_ddim_steps_becomes_the_searched_steps_and_old_trials_parameters_read_as_it(
    tmp_path: Path,
) -> None:
    search = {k: v for k, v in TINY_SPEC["search"].items() if k != "steps"} | {
        "ddim_steps": TINY_SPEC["search"]["steps"]
    }
    baseline = {"lr": 1e-3, "batch_size": 16, "timesteps": 50, "schedule": "linear", "guidance_scale": 1.0}
    spec = load_spec(write_spec(tmp_path, search=search, baselines=[{**baseline, "ddim_steps": 4}]))
    assert "steps" in spec.search and "ddim_steps" not in spec.search and spec.baselines[0]["steps"] == 4
    train, sampling = spec.split_params({**baseline, "ddim_steps": 6})  # a trial stored before the rename
    assert sampling == {"guidance_scale": 1.0, "steps": 6} and "ddim_steps" not in train


def test_both_names_at_once_are_refused_naming_the_one_to_keep(tmp_path: Path) -> None:
    path = write_spec(tmp_path, sampling={"ddim_steps": 4, "steps": 8})
    with pytest.raises(ConfigError, match=r"sampling\.ddim_steps: is also set as sampling\.steps; keep steps"):
        load_spec(path)


def test_a_combination_stored_as_ddim_steps_reads_as_steps() -> None:
    stored = {"guidance_scale": 2.0, "ddim_steps": 10, "eta": 0.0, "sampler": "heun"}
    assert SamplingConfig.from_dict(stored) == SamplingConfig(2.0, 10, sampler="heun")
    assert SamplingConfig(2.0, 10).as_dict() == {"guidance_scale": 2.0, "steps": 10, "eta": 0.0}


def as_stored_before_the_rename(db: Path) -> None:
    """The study as the release before the rename wrote it: ``ddim_steps`` in the stored spec (JSON in a
    JSON string), in every trial's sweep and best sampling, and as the searched parameter's name."""
    with sqlite3.connect(db) as con:
        for table in ("study_user_attributes", "trial_user_attributes"):
            con.execute(f"UPDATE {table} SET value_json = REPLACE(value_json, '\\\"steps\\\"', '\\\"ddim_steps\\\"')")
            con.execute(f"UPDATE {table} SET value_json = REPLACE(value_json, '\"steps\"', '\"ddim_steps\"')")
        con.execute("UPDATE trial_params SET param_name = 'ddim_steps' WHERE param_name = 'steps'")
        stored = [v for (v,) in con.execute("SELECT value_json FROM trial_user_attributes WHERE key = 'sweep'")]
    assert stored and all("ddim_steps" in v and '"steps"' not in v for v in stored)


def readings(study: optuna.Study, url: str, out: Path) -> list[str]:
    name = study.study_name
    status = [run_cli(["status", name, "--storage", url, *extra]) for extra in ([], ["--json"], ["--wide"])]
    assert all(code == 0 for code, _, _ in status), [err for _, _, err in status]
    report = study_report(study, out).read_text(encoding="utf-8")
    report = re.sub(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", "ID", report)  # Plotly's random div ids
    report = re.sub(r"generated \d{4}-\d\d-\d\d \d\d:\d\d", "generated", report)  # and the minute
    return [*(text for _, text, _ in status), report.replace(str(out.parent), "DIR")]


def test_a_study_stored_before_the_rename_reads_the_same_in_status_and_report(tmp_path: Path) -> None:
    now, before = tmp_path / "now", tmp_path / "before"
    now.mkdir()
    study = quickstart_sized(now)
    for steps, value in ((2, 8.0), (6, 6.5)):  # two trials that searched the steps (the report plots them)
        dist = IntDistribution(2, 6, step=2)
        study.add_trial(optuna.create_trial(params={"steps": steps}, distributions={"steps": dist}, value=value))

    before.mkdir()
    with sqlite3.connect(now / "hpo.db") as src, sqlite3.connect(before / "hpo.db") as dst:
        src.backup(dst)  # with what the write-ahead log still holds
    as_stored_before_the_rename(before / "hpo.db")
    old_url = f"sqlite:///{before / 'hpo.db'}"
    old = optuna.load_study(study_name=study.study_name, storage=open_storage(old_url))
    after = readings(study, f"sqlite:///{now / 'hpo.db'}", now / "report.html")
    assert readings(old, old_url, before / "report.html") == after
    assert '"steps"' in after[1] and "ddim_steps" not in after[1]  # the JSON says the new name
    assert "classifier-FID against steps" in after[3]  # the searched steps' chart, from either name


def test_narrow_reads_a_stored_ddim_steps_as_the_searched_steps(tmp_path: Path) -> None:
    """``hpo narrow`` on a study stored before the rename proposes what it proposes for the same study now
    (before: "steps: kept, no complete trial drew it", the trials holding ``ddim_steps``)."""
    from hpo.analysis.narrow import narrow
    from hpo.service.study import require_spec

    now, before = tmp_path / "now", tmp_path / "before"
    now.mkdir()
    study = quickstart_sized(now)
    for steps, value in ((2, 8.0), (6, 6.5), (4, 4.0)):
        dist = IntDistribution(2, 6, step=2)
        study.add_trial(optuna.create_trial(params={"steps": steps}, distributions={"steps": dist}, value=value))
    before.mkdir()
    with sqlite3.connect(now / "hpo.db") as src, sqlite3.connect(before / "hpo.db") as dst:
        src.backup(dst)
    as_stored_before_the_rename(before / "hpo.db")
    old = optuna.load_study(study_name=study.study_name, storage=open_storage(f"sqlite:///{before / 'hpo.db'}"))
    changes = narrow(require_spec(study), study.get_trials(), "classifier-FID")
    searched = next(c for c in changes if c.name == "steps")
    assert searched.evidence != "no complete trial drew it"
    assert narrow(require_spec(old), old.get_trials(), "classifier-FID") == changes
