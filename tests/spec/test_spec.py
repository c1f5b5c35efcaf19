"""Every invalid spec gives one line naming the file and key path, exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpo.spec.loading import load_spec
from tests.cli import run_cli
from tests.service_helpers import TINY_SPEC, write_spec

SHIPPED = sorted(Path(__file__).parents[2].glob("search_spaces/*.yaml"))
SIX = {"timesteps", "schedule", "lr", "batch_size", "guidance_scale", "steps"}


def search_with(**params: Any) -> dict[str, Any]:
    return {**TINY_SPEC["search"], **params}


INVALID = {
    "unknown key suggests the nearest": ({"train": {"learning_rate": 1e-3}}, "train.learning_rate: unknown key"),
    "unknown search parameter": (
        {"search": search_with(bach_size={"type": "int", "low": 1, "high": 2})},
        "search.bach_size: not a trainer or sampling setting (did you mean 'batch_size'?)",
    ),
    "wrong type": ({"train": {"kimg": "lots"}}, "train.kimg: expected a number, got 'lots'"),
    "low above high": (
        {"search": search_with(lr={"type": "float", "low": 1e-2, "high": 1e-4})},
        "search.lr.low: low=0.01 is greater than high=0.0001",
    ),
    "log range including 0": (
        {"search": search_with(lr={"type": "float", "low": 0.0, "high": 1e-2, "log": True})},
        "log=true needs low > 0",
    ),
    "unknown categorical value": (
        {"search": search_with(schedule={"type": "categorical", "choices": ["linear", "cosin"]})},
        "search.schedule.choices[1]: unknown value 'cosin' (did you mean 'cosine'?)",
    ),
    "ddim steps above T": (
        {"search": search_with(steps={"type": "int", "low": 10, "high": 80})},
        "search.steps: up to 80 sampler steps but timesteps can be as low as 50",
    ),
    "guidance on an unconditional model": (
        {"train": {"conditional": False}},
        "search.guidance_scale: guidance other than 1, but train.conditional is false",
    ),
    "budget too small for the evaluation points": (
        {"train": {"kimg": 0.05, "num_evals": 4}},
        "train.kimg: budget of 0.05 kimg at batch_size=64 is 1 steps",
    ),
    "budget too small for doubling evaluation points": (
        {"train": {"kimg": 0.5, "num_evals": 5, "eval_spacing": "doubling"}},
        "train.kimg: budget of 0.5 kimg at batch_size=64 is 8 steps, fewer than the 16 that num_evals=5 "
        "(doubling spacing) needs",
    ),
    "unknown evaluation spacing": ({"train": {"eval_spacing": "log"}}, "train.eval_spacing"),
    "unknown section": ({"serach": {}}, "serach: unknown key (did you mean 'search'?)"),
    "schedule shift out of range": (
        {"train": {"schedule_shift": 20}},
        "train.schedule_shift: must be a log-SNR shift within ±8 (2·ln(64/d) for d-px images: −1.39 at 128), got 20",
    ),
    "unknown source": ({"data": {"source": "bikes"}}, "data.source: unknown source 'bikes'"),
    "mup on a network factory": (
        {"train": {"parameterization": "mup", "network": {"factory": "diffusers"}}},
        "train.parameterization: mup is built for the builtin UNet; network.factory 'diffusers' needs "
        "parameterization: standard",
    ),
    "unknown parameterisation": ({"train": {"parameterization": "mu"}}, "train.parameterization"),
    "a guidance interval a trial can leave empty": (
        {
            "search": search_with(guidance_sigma_min={"type": "float", "low": 0.0, "high": 5.0}),
            "sampling": {"guidance_sigma_max": 1.0},
        },
        "search.guidance_sigma_min: a trial can draw guidance_sigma_min 5 with guidance_sigma_max 1: an empty",
    ),
    "a null baseline for a searched number": (
        {
            "search": search_with(guidance_sigma_max={"type": "float", "low": 1.0, "high": 5.0}),
            "baselines": [
                {
                    "lr": 1e-3,
                    "batch_size": 16,
                    "timesteps": 50,
                    "schedule": "linear",
                    "guidance_scale": 2.0,
                    "steps": 4,
                    "guidance_sigma_max": None,
                }
            ],
        },
        "expected a number in the searched range [1.0, 5.0], got None",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_spec_prints_one_line_and_exits_2(case: str, tmp_path: Path) -> None:
    changes, expected = INVALID[case]
    spec = write_spec(tmp_path, **changes)  # type: ignore[arg-type]
    code, _, err = run_cli(["launch", str(spec), "--storage", f"sqlite:///{tmp_path}/x.db"])
    assert code == 2
    assert err.startswith(f"error: {spec}: ") and err.count("\n") == 1, err
    assert expected in err
    assert "Traceback" not in err
    assert not (tmp_path / "x.db").exists()  # nothing was created


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    spec = tmp_path / "broken.yaml"
    spec.write_text("study:\n  name: [unclosed\n")
    code, _, err = run_cli(["launch", str(spec)])
    assert code == 2 and "not valid YAML at line" in err and err.count("\n") == 1


def test_missing_spec_file() -> None:
    code, _, err = run_cli(["launch", "nowhere.yaml"])
    assert code == 2 and err.startswith("error: nowhere.yaml: spec: file not found")


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_specs_are_valid_and_cover_the_six_parameters_people_tune(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "bikes").mkdir(parents=True)  # the bikes spec names its (relative) folder
    spec = load_spec(path)
    swept = {name for name in ("guidance_scale", "steps", "eta") if len(spec.sampling.values(name)) > 1}
    assert set(spec.search) | swept >= SIX
    assert {"guidance_scale", "steps"} <= swept, "sampling settings are swept on trained weights"
    assert spec.baselines, "a baseline a person would try first"
    for baseline in spec.baselines:
        train, sampling = spec.split_params(baseline)
        spec.sampling_combinations(spec.train_config(train), sampling)


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_key_in_shipped_specs_is_commented(path: Path) -> None:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#") and ":" in line and not line.lstrip().startswith("-"):
            assert "#" in line, f"{path.name}:{number} has no comment: {line}"


def test_float_written_without_a_dot_is_read_as_a_number(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, train={"lr": "2e-3"}))
    assert spec.train.lr == 2e-3


def test_fingerprint_ignores_n_trials_only(tmp_path: Path) -> None:
    a = load_spec(write_spec(tmp_path, "a.yaml"))
    b = load_spec(write_spec(tmp_path, "b.yaml", study={**TINY_SPEC["study"], "n_trials": 40}))
    c = load_spec(write_spec(tmp_path, "c.yaml", train={"kimg": 2}))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
