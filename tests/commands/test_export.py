"""``hpo export`` and ``hpo sample`` on a real small study (a real worker trained and scored its
trials, with the EMA length swept): the exported weights load into the rebuilt network, the exported
spec retrains exactly the trial, and sampling from the study or from the export draws the same grid."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState
from PIL import Image
from safetensors.torch import load_file

from hpo.records import (
    CURVE_NOISE_ATTR,
    FLOOR_ATTR,
    METRIC_NAME_ATTR,
    NOISE_ATTR,
    STOP_ATTR,
    TENSORBOARD_ATTR,
    VALUE_ATTR,
    WATCH_SAMPLING_ATTR,
)
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume, require_spec
from hpo.service.trials import best_own
from hpo.service.worker import Worker, WorkerOptions
from hpo.spec.loading import load_spec
from hpo.spec.sampling import SAMPLING_FIELDS, SamplingConfig
from hpo.training.model import info_for, network_for
from tests.cli import run_cli
from tests.service_helpers import write_spec

NAME = "winner"
SEARCH = {
    "lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
    "guidance_scale": {"type": "float", "low": 1.0, "high": 3.0},
}
GRID = 2 * (8 + 2) + 2  # 4 samples of 8 px: a 2 × 2 grid with 2 px padding


@dataclass(frozen=True)
class Built:
    url: str
    artifacts: Path
    study: optuna.Study

    def trial(self, number: int) -> FrozenTrial:
        return self.study.get_trials(deepcopy=False)[number]

    def opts(self) -> list[str]:
        return ["--storage", self.url, "--artifacts", str(self.artifacts)]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Two complete trials from a real worker (8 px digits, 1.2 kimg, two EMA lengths), then a
    pruned one recorded the way workers record it."""
    folder = tmp_path_factory.mktemp("export")
    url = f"sqlite:///{folder / 'hpo.db'}"
    spec_path = write_spec(
        folder,
        study={"name": NAME, "n_trials": 2},
        train={"kimg": 1.2, "num_evals": 1},
        search=SEARCH,
        sampling={"steps": [4], "ema_sigma_rel": [0.05, 0.1]},
        score={"features": "classifier", "num_samples": 32, "batch_size": 32, "grid_size": 16},
        baselines=[{"lr": 3e-3, "guidance_scale": 1.5}, {"lr": 2e-3, "guidance_scale": 2.0}],
    )
    study, _ = create_or_resume(load_spec(spec_path), open_storage(url))
    artifacts = folder / "artifacts"
    options = WorkerOptions(url=url, study=NAME, exit_when_idle=True, artifact_dir=artifacts, poll_seconds=0.2)
    Worker(options).serve()
    study.add_trial(
        optuna.create_trial(
            state=TrialState.PRUNED,
            params={"lr": 3e-3, "guidance_scale": 3.0},
            distributions={"lr": FloatDistribution(1e-4, 3e-3, log=True), "guidance_scale": FloatDistribution(1, 3)},
            intermediate_values={1: 0.9},
            user_attrs={"fail_reason": "pruned_by_median"},
        )
    )
    assert [t.state for t in study.get_trials()] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED]
    return Built(url, artifacts, study)


def export(built: Built, source: str, out: Path) -> None:
    code, stdout, stderr = run_cli(["export", source, "-o", str(out), *built.opts()])
    assert code == 0, stderr
    assert f"sample it with `hpo sample {out}`" in stdout


def test_export_writes_weights_that_load_into_the_rebuilt_network(built: Built, tmp_path: Path) -> None:
    export(built, f"{NAME}:1", tmp_path / "out")
    state = load_file(tmp_path / "out" / "ema.safetensors")
    stored = torch.load(built.artifacts / built.trial(1).user_attrs["ema_checkpoint"], weights_only=True)
    assert state.keys() == stored.keys() and all(torch.equal(state[k], stored[k]) for k in stored)
    cfg = load_spec(tmp_path / "out" / "spec.yaml").train
    net = network_for(cfg, info_for(cfg, channels=1, image_size=8, num_classes=10))
    net.load_state_dict(state, strict=True)


def test_exported_spec_fixes_the_trials_parameters_and_its_best_sampling_combination(
    built: Built, tmp_path: Path
) -> None:
    trial = built.trial(1)
    export(built, f"{NAME}:1", tmp_path / "out")
    spec = load_spec(tmp_path / "out" / "spec.yaml")  # what `hpo train DIR/spec.yaml` reads
    for name, value in trial.params.items():
        fixed = spec.sampling.values(name) if name in SAMPLING_FIELDS else (getattr(spec.train, name),)
        assert fixed == (value,), name
    source = require_spec(built.study)
    assert spec.train == source.train_config(source.split_params(trial.params)[0])  # exactly the trial's run
    assert spec.search == {} and spec.baselines == ()
    best = SamplingConfig.from_dict(trial.user_attrs["sampling"])
    assert best.ema_sigma_rel in (0.05, 0.1) and spec.sampling.combinations() == [best]  # the EMA length too


def test_hpo_train_on_the_exported_spec_retrains_the_trial_to_its_score(built: Built, tmp_path: Path) -> None:
    trial = built.trial(0)
    export(built, f"{NAME}:0", tmp_path / "out")
    code, _, stderr = run_cli(
        ["train", str(tmp_path / "out" / "spec.yaml"), "-o", str(tmp_path / "run"), "--threads", "1"]
    )
    assert code == 0, stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["sampling"] == trial.user_attrs["sampling"] and len(summary["sweep"]) == 1
    assert summary["value"] == pytest.approx(trial.value, rel=1e-3)
    # the same record keys: all a trial stores of its run, and nothing a trial would store under another name
    outside_a_trial = {VALUE_ATTR, STOP_ATTR, TENSORBOARD_ATTR, FLOOR_ATTR, WATCH_SAMPLING_ATTR, CURVE_NOISE_ATTR}
    assert NOISE_ATTR not in summary  # a trial's value noise; summary.json's is an evaluation point's
    assert set(summary) - outside_a_trial <= set(trial.user_attrs), set(summary) - set(trial.user_attrs)
    assert summary[METRIC_NAME_ATTR] == trial.user_attrs[METRIC_NAME_ATTR]


def test_sampling_json_holds_the_trials_best_settings_and_where_they_came_from(built: Built, tmp_path: Path) -> None:
    trial = built.trial(1)
    export(built, f"{NAME}:1", tmp_path / "out")
    settings = json.loads((tmp_path / "out" / "sampling.json").read_text())
    assert settings["sampling"] == trial.user_attrs["sampling"]
    assert {k: settings[k] for k in ("study", "trial", "value", "metric_name")} == {
        "study": NAME, "trial": 1, "value": trial.value, "metric_name": "classifier-FID",
    }  # fmt: skip
    assert settings["network"] == {"channels": 1, "image_size": 8, "num_classes": 10}


def test_export_without_a_trial_number_takes_the_best_complete_trial(built: Built, tmp_path: Path) -> None:
    export(built, NAME, tmp_path / "out")
    best = best_own(built.study)
    assert best is not None
    assert json.loads((tmp_path / "out" / "sampling.json").read_text())["trial"] == best.number


def grid(built: Built, source: str, out: Path, *extra: str) -> tuple[np.ndarray, str]:
    args = ["sample", source, "-n", "4", "-o", str(out), "--threads", "1", *built.opts(), *extra]
    code, stdout, stderr = run_cli(args)
    assert code == 0, stderr
    image = Image.open(out)
    assert image.size == (GRID, GRID)
    return np.asarray(image.convert("RGB")), stdout


def test_sampling_a_trial_and_its_export_draws_the_same_grid_for_the_same_seed(built: Built, tmp_path: Path) -> None:
    export(built, f"{NAME}:0", tmp_path / "out")
    from_study, said = grid(built, f"{NAME}:0", tmp_path / "study.png", "--seed", "3")
    from_export, _ = grid(built, str(tmp_path / "out"), tmp_path / "export.png", "--seed", "3")
    assert np.array_equal(from_study, from_export) and np.unique(from_study).size > 10  # digits, not blank
    best = SamplingConfig.from_dict(built.trial(0).user_attrs["sampling"])
    assert f"({best.words}, seed 3)" in said  # the trial's best combination
    other_seed, _ = grid(built, str(tmp_path / "out"), tmp_path / "seed4.png", "--seed", "4")
    assert not np.array_equal(from_export, other_seed)


def test_sample_overrides_the_trials_guidance_and_steps(built: Built, tmp_path: Path) -> None:
    default, _ = grid(built, f"{NAME}:0", tmp_path / "default.png")
    changed, said = grid(built, f"{NAME}:0", tmp_path / "changed.png", "--guidance", "3", "--steps", "2")
    assert "guidance 3, 2 DDIM steps" in said and not np.array_equal(default, changed)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["export", f"{NAME}:9"], f"error: hpo export '{NAME}:9': study '{NAME}' has no trial 9 (0..2)"),
        (["export", f"{NAME}:x"], f"error: hpo export '{NAME}:x': expected STUDY[:TRIAL], e.g. digits-quickstart:7"),
        (["export", "nosuch"], "error: no study named 'nosuch' in sqlite:///"),
        (
            ["export", f"{NAME}:2"],
            f"error: trial 2 of study '{NAME}' is pruned (pruned_by_median): only complete trials keep their EMA "
            f"weights; pick a complete one (`hpo status {NAME}`), or give just {NAME} for the best",
        ),
        (["sample", f"{NAME}:2"], f"error: trial 2 of study '{NAME}' is pruned (pruned_by_median)"),
        (["sample", f"{NAME}:0", "--steps", "51"], "error: --steps: up to 51 sampler steps but timesteps"),
        (["sample", f"{NAME}:0", "--guidance", "101"], "error: --guidance: must be in [0, 100], got 101"),
    ],
)
def test_a_trial_that_cannot_be_taken_away_is_refused_in_one_line(
    built: Built, tmp_path: Path, command: list[str], message: str
) -> None:
    out = tmp_path / ("out.png" if command[0] == "sample" else "out")  # sample refuses a grid with no image suffix
    code, _, err = run_cli([*command, "-o", str(out), *built.opts()])
    assert code == 2 and err.startswith(message) and err.count("\n") == 1, err
    assert not out.exists()


def test_export_refuses_a_folder_that_is_not_empty_and_leaves_it_alone(built: Built, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    code, _, err = run_cli(["export", NAME, "-o", str(tmp_path / "out"), *built.opts()])
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {tmp_path / 'out'} is not empty; name a new or empty folder for the export")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


def test_export_says_when_the_weights_are_not_in_the_artifact_store(built: Built, tmp_path: Path) -> None:
    code, _, err = run_cli(["export", f"{NAME}:0", "-o", str(tmp_path / "out"), "--storage", built.url])
    assert code == 2 and err.count("\n") == 1
    assert "its EMA weights are not in the artifact store .hpo/artifacts" in err
    assert err.rstrip().endswith("pass --artifacts with the folder the workers wrote to")


def test_sample_refuses_a_folder_that_is_not_an_export(tmp_path: Path) -> None:
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "spec.yaml").write_text("study: {}\n")
    code, _, err = run_cli(["sample", str(tmp_path / "stray"), "-o", str(tmp_path / "g.png")])
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {tmp_path / 'stray'}: not an hpo export (no ema.safetensors, sampling.json)")


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    from hpo.files import atomic_write

    target = tmp_path / "ema.safetensors"
    target.write_text("old weights")

    def half_written(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half_written)
    assert target.read_text() == "old weights" and sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    atomic_write(target, lambda tmp: tmp.write_text("new weights"))
    assert target.read_text() == "new weights" and len(list(tmp_path.iterdir())) == 1


def test_export_of_a_trial_that_stored_no_sampling_is_refused_in_one_line(built: Built, tmp_path: Path) -> None:
    """A complete trial with weights but no best sampling (another tool's, or an older hpo's) cannot
    be exported: the spec needs its sampling; the study keeps its trial."""
    storage = open_storage(built.url)
    other, _ = create_or_resume(require_spec(built.study), storage, name="no-sampling", baselines=False)
    source = built.trial(1)
    attrs = {k: v for k, v in source.user_attrs.items() if k != "sampling"}
    other.add_trial(
        optuna.create_trial(
            state=TrialState.COMPLETE, value=source.value, params=source.params,
            distributions=source.distributions, user_attrs=attrs,
        )
    )  # fmt: skip
    code, _, err = run_cli(["export", "no-sampling:0", "-o", str(tmp_path / "out"), *built.opts()])
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: trial 0 of study 'no-sampling' stored no sampling; pick another trial"), err
    assert not (tmp_path / "out").exists() and len(other.get_trials()) == 1
