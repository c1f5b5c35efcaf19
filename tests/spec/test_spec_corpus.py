"""A corpus of malformed specs, each run through the real CLI (``hpo launch``, in-process): exit 2,
one line that names the file and the key path, no traceback, and no database or file created."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import run_cli

ROOT = Path(__file__).parents[2]
BASE: dict[str, Any] = yaml.safe_load((ROOT / "search_spaces" / "digits.yaml").read_text())
Mutation = Callable[[dict[str, Any]], None]


def setting(section: str, key: str, value: Any) -> Mutation:
    def mutate(spec: dict[str, Any]) -> None:
        spec.setdefault(section, {})[key] = value

    return mutate


def param(name: str, body: Any) -> Mutation:
    def mutate(spec: dict[str, Any]) -> None:
        spec["search"][name] = body

    return mutate


def nested(path: list[Any], value: Any) -> Mutation:
    def mutate(spec: dict[str, Any]) -> None:
        node = spec
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


NUMERIC = {
    "study": ["n_trials", "max_retries", "heartbeat_interval", "grace_period", "target_kimg"],
    "data": ["image_size", "val_fraction", "num_images", "max_images", "split_seed"],
    "train": [
        "kimg", "num_evals", "timesteps", "beta_start", "beta_end", "min_snr_gamma", "lr", "batch_size",
        "weight_decay", "warmup_kimg", "grad_clip", "ema_halflife_kimg", "ema_rampup", "diverge_factor",
        "base_channels", "num_res_blocks", "dropout", "p_uncond", "val_images", "val_noise_levels", "lr_floor",
    ],
    "score": ["num_samples", "batch_size", "grid_size"],
    "sampler": ["n_startup_trials"],
    "pruner": ["startup_trials", "warmup_evals", "min_resource", "reduction_factor", "percentile"],
}  # fmt: skip
NEGATIVE_REFUSED = {  # a negative value is invalid for these
    "study": ["n_trials", "max_retries", "heartbeat_interval", "grace_period", "target_kimg"],
    "data": ["image_size", "val_fraction", "num_images", "max_images"],
    "train": [
        "kimg", "num_evals", "timesteps", "beta_start", "min_snr_gamma", "lr", "batch_size", "warmup_kimg",
        "grad_clip", "ema_halflife_kimg", "ema_rampup", "diverge_factor", "base_channels", "num_res_blocks",
        "dropout", "p_uncond", "val_images", "val_noise_levels", "lr_floor",
    ],
    "score": ["num_samples", "batch_size", "grid_size"],
    "sampler": ["n_startup_trials"],
    "pruner": ["startup_trials", "warmup_evals", "min_resource", "reduction_factor", "percentile"],
}  # fmt: skip
FLOATS = ["kimg", "lr", "beta_start", "warmup_kimg", "grad_clip", "dropout", "p_uncond", "ema_halflife_kimg"]

CASES: dict[str, tuple[Mutation | str | bytes, str]] = {}
for section, keys in NUMERIC.items():
    for key in keys:
        CASES[f"{section}.{key} is text"] = (setting(section, key, "lots"), f"{section}.{key}")
for section, keys in NEGATIVE_REFUSED.items():
    for key in keys:
        CASES[f"{section}.{key} is negative"] = (setting(section, key, -3), f"{section}.{key}")
for key in FLOATS:
    CASES[f"train.{key} is inf"] = (setting("train", key, float("inf")), f"train.{key}")
    CASES[f"train.{key} is nan"] = (setting("train", key, float("nan")), f"train.{key}")
for section in ("study", "data", "train", "sampling", "score", "sampler", "pruner", "tracking"):
    CASES[f"unknown key in {section}"] = (setting(section, "colour", 1), f"{section}.colour")
CASES.update(
    {
        "image_size beyond any GPU": (setting("data", "image_size", 1048576), "data.image_size"),
        "kimg .inf": (setting("train", "kimg", float("inf")), "train.kimg"),
        "device gpu0": (setting("train", "device", "gpu0"), "train.device"),
        "grace period zero": (setting("study", "grace_period", 0), "study.grace_period"),
        "grace period under the heartbeat": (setting("study", "grace_period", 5), "study.grace_period"),
        "study name with NUL": (setting("study", "name", "a\x00b"), "study.name"),
        "study name of 10000 characters": (setting("study", "name", "x" * 10000), "study.name"),
        "study name with a slash": (setting("study", "name", "a/b"), "study.name"),
        "study name traversal": (setting("study", "name", "../../../../escaped"), "study.name"),
        "study name absolute": (setting("study", "name", "/tmp/escaped"), "study.name"),
        "study name empty": (setting("study", "name", ""), "study.name"),
        "unknown schedule": (setting("train", "schedule", "cosin"), "train.schedule"),
        "unknown prediction": (setting("train", "prediction", "noise"), "train.prediction"),
        "unknown features": (setting("score", "features", "clip"), "score.features"),
        "unknown sampler": (setting("sampler", "name", "cmaes"), "sampler.name"),
        "unknown pruner": (setting("pruner", "name", "patient"), "pruner.name"),
        "pruner percentile 100": (setting("pruner", "percentile", 100), "pruner.percentile"),
        "unknown data source": (setting("data", "source", "bikes"), "data.source"),
        "torchvision NOPE": (setting("data", "source", "torchvision:NOPE"), "data.source"),
        "missing data folder": (lambda s: s.update(data={"source": "folder", "path": "no/such/dir"}), "data.path"),
        "folder without a path": (setting("data", "source", "folder"), "data.path"),
        "channel_mult empty": (setting("train", "channel_mult", []), "train.channel_mult"),
        "channel_mult negative": (setting("train", "channel_mult", [1, -2]), "train.channel_mult"),
        "betas out of order": (setting("train", "beta_end", 1e-5), "train.beta_start"),
        "network factory not importable name": (setting("train", "network", {"factory": "not a path"}), "train.network.factory"),
        "network kwargs for builtin": (setting("train", "network", {"kwargs": {"width": 8}}), "train.network.kwargs"),
        "budget under the evaluation points": (setting("train", "kimg", 0.01), "train.kimg"),
        "image size not divisible": (setting("data", "image_size", 17), "data.image_size"),
        "search param unknown type": (param("lr", {"type": "loguniform", "low": 1e-4, "high": 1e-2}), "search.lr.type"),
        "search param without type": (param("lr", {"low": 1e-4, "high": 1e-2}), "search.lr"),
        "search param not a mapping": (param("lr", 0.01), "search.lr"),
        "search param unknown name": (param("learning_rate", {"type": "float", "low": 0.1, "high": 1}), "search.learning_rate"),
        "search low above high": (param("lr", {"type": "float", "low": 1e-2, "high": 1e-4}), "search.lr.low"),
        "search log range with zero": (param("lr", {"type": "float", "low": 0, "high": 1e-2, "log": True}), "search.lr.low"),
        "search inf bound": (param("lr", {"type": "float", "low": 1e-4, "high": float("inf")}), "search.lr.high"),
        "search nan bound": (param("lr", {"type": "float", "low": float("nan"), "high": 1e-2}), "search.lr.low"),
        "search negative step": (param("lr", {"type": "float", "low": 1e-4, "high": 1e-2, "step": -1}), "search.lr.step"),
        "search negative batch choice": (param("batch_size", {"type": "categorical", "choices": [32, -64]}), "search.batch_size"),
        "search zero batch choice": (param("batch_size", {"type": "categorical", "choices": [0, 64]}), "search.batch_size"),
        "search empty choices": (param("batch_size", {"type": "categorical", "choices": []}), "search.batch_size.choices"),
        "search duplicate choices": (param("batch_size", {"type": "categorical", "choices": [32, 32]}), "search.batch_size.choices"),
        "search wrong choice type": (param("schedule", {"type": "categorical", "choices": ["linear", 3]}), "search.schedule.choices[1]"),
        "search negative ddim bound": (param("steps", {"type": "int", "low": -10, "high": 20}), "search.steps"),
        "search ddim above T": (param("steps", {"type": "int", "low": 10, "high": 500}), "search.steps"),
        "search int with float bounds": (param("timesteps", {"type": "int", "low": 0.5, "high": 100}), "search.timesteps.low"),
        "search network kwarg for builtin": (param("network.width", {"type": "int", "low": 8, "high": 16}), "search.network.width"),
        "sampling negative guidance": (setting("sampling", "guidance_scale", [1.0, -2.0]), "sampling.guidance_scale[1]"),
        "sampling zero ddim steps": (setting("sampling", "steps", [0, 10]), "sampling.steps[0]"),
        "sampling eta above one": (setting("sampling", "eta", 1.5), "sampling.eta[0]"),
        "sampling range without count": (setting("sampling", "guidance_scale", {"low": 1, "high": 3}), "sampling.guidance_scale"),
        "sampling range count zero": (setting("sampling", "guidance_scale", {"low": 1, "high": 3, "count": 0}), "sampling.guidance_scale.count"),
        "sampling duplicates": (setting("sampling", "steps", [10, 10]), "sampling.steps"),
        "sampling too many combinations": (
            lambda s: s["sampling"].update(guidance_scale={"low": 1, "high": 9, "count": 64}, steps=[5, 10, 20, 30, 40]),
            "sampling",
        ),
        "sampling ddim above T": (setting("sampling", "steps", [10, 200]), "sampling.steps"),
        "sampling searched too": (param("guidance_scale", {"type": "float", "low": 1, "high": 3}), "search.guidance_scale"),
        "sampling rescore_top zero": (setting("sampling", "rescore_top", 0), "sampling.rescore_top"),
        "sampling screen_by unknown": (setting("sampling", "screen_by", "fidd"), "sampling.screen_by"),
        "FID screen below the feature dimension": (
            lambda s: s["sampling"].update(screen_samples=64, screen_by="fid"), "sampling.screen_samples",
        ),
        "PCA screen of 4 samples": (setting("sampling", "screen_samples", 4), "sampling.screen_samples"),
        "sampling not a mapping": (lambda s: s.update(sampling=[1, 2]), "sampling"),
        "legacy ddim_eta beside sampling.eta": (setting("train", "ddim_eta", float("inf")), "train.ddim_eta"),
        "legacy guidance beside sampling": (setting("train", "guidance_scale", 2.0), "train.guidance_scale"),
        "legacy ddim_steps beside sampling": (setting("train", "ddim_steps", 20), "train.ddim_steps"),
        "ema sigma_rel above the range": (setting("sampling", "ema_sigma_rel", [0.1, 0.5]), "sampling.ema_sigma_rel[1]"),
        "ema sigma_rel zero": (setting("sampling", "ema_sigma_rel", 0.0), "sampling.ema_sigma_rel[0]"),
        "ema sigma_rel not a number": (setting("sampling", "ema_sigma_rel", ["long"]), "sampling.ema_sigma_rel[0]"),
        "ema sweep without profiles": (
            lambda s: s.update(sampling={**s["sampling"], "ema_sigma_rel": [0.1]}, train={**s["train"], "ema_profiles": []}),
            "train.ema_profiles",
        ),
        "ema profiles out of range": (setting("train", "ema_profiles", [0.05, 0.9]), "train.ema_profiles[1]"),
        "ema profiles repeated": (setting("train", "ema_profiles", [0.05, 0.05]), "train.ema_profiles"),
        "ema snapshots one": (setting("train", "ema_snapshots", 1), "train.ema_snapshots"),
        "guidance on an unconditional model": (setting("train", "conditional", False), "sampling.guidance_scale"),
        "guidance without label dropout": (setting("train", "p_uncond", 0.0), "sampling.guidance_scale"),
        "baseline missing a parameter": (nested(["baselines", 0], {"lr": 1e-3}), "baselines[0]"),
        "baseline outside the range": (nested(["baselines", 0, "lr"], 5.0), "baselines[0].lr"),
        "baseline unknown parameter": (nested(["baselines", 0, "colour"], 1), "baselines[0].colour"),
        "baseline nan": (nested(["baselines", 0, "lr"], float("nan")), "baselines[0].lr"),
        "baselines not a list": (lambda s: s.update(baselines={"lr": 1}), "baselines"),
        "baseline name empty": (nested(["baselines", 0, "name"], ""), "baselines[0].name"),
        "baseline name too long": (nested(["baselines", 0, "name"], "x" * 41), "baselines[0].name"),
        "baseline name not text": (nested(["baselines", 0, "name"], 3), "baselines[0].name"),
        "baseline name two lines": (nested(["baselines", 0, "name"], "by\nhand"), "baselines[0].name"),
        "section not a mapping": (lambda s: s.update(train=[1, 2]), "train"),
        "unknown section": (lambda s: s.update(serach={}), "serach"),
        "wandb without a project": (setting("tracking", "wandb", {"entity": "me"}), "tracking.wandb"),
        "grid sampler on a float range": (setting("sampler", "name", "grid"), "search.lr"),
        "zero terminal SNR with eps": (setting("train", "zero_terminal_snr", True), "train.zero_terminal_snr"),
        "empty file": ("", "spec"),
        "comments only": ("# nothing here\n# at all\n", "spec"),
        "top level list": ("- a\n- b\n", "spec"),
        "yaml syntax error": ("study:\n  name: [unclosed\n", "spec"),
        "latin-1 file": (b"study:\n  name: caf\xe9\n", "spec"),
        "binary file": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "spec"),
        "huge file": ("# " + "x" * (1 << 20) + "\n", "spec"),
        "alias bomb": (
            "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
            "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
            "spec",
        ),
        "deep nesting": ("x: " + "[" * 5000 + "]" * 5000 + "\n", "spec"),
        "duplicated section": ("study:\n  name: a\ntrain:\n  lr: 0.001\nstudy:\n  name: b\n", "study"),
        "duplicated key": ("train:\n  lr: 0.001\n  lr: 0.002\n", "train.lr"),
    }
)  # fmt: skip


def write_case(folder: Path, body: Mutation | str | bytes) -> Path:
    path = folder / "spec.yaml"
    if isinstance(body, bytes):
        path.write_bytes(body)
    elif isinstance(body, str):
        path.write_text(body)
    else:
        spec = copy.deepcopy(BASE)
        spec["data"]["cache_dir"] = str(folder / "cache")
        body(spec)
        path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    return path


def test_the_corpus_has_over_a_hundred_malformed_specs() -> None:
    assert len(CASES) >= 100, len(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_spec_is_one_line_naming_file_and_key_with_exit_2(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    body, key = CASES[case]
    spec = write_case(tmp_path, body)
    before = set(tmp_path.rglob("*"))
    # --workers 0: a case that is not refused (a test bug) must not leave a detached worker training
    code, out, err = run_cli(
        ["launch", str(spec), "--storage", f"sqlite:///{tmp_path / 'x.db'}", "--workers", "0", "--detach"]
    )
    assert code == 2, (out, err)
    assert err.startswith(f"error: {spec}: {key}") and err.count("\n") == 1, err[:500]
    assert "Traceback" not in err
    assert set(tmp_path.rglob("*")) == before, "nothing may be created"


def test_a_directory_as_the_spec_is_refused(tmp_path: Path) -> None:
    code, _, err = run_cli(["launch", str(tmp_path), "--storage", f"sqlite:///{tmp_path / 'x.db'}"])
    assert code == 2 and err.startswith(f"error: {tmp_path}: spec: is a directory") and err.count("\n") == 1
