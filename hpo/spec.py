"""Search-space spec files: YAML → a validated, frozen :class:`Spec`.

Every error names the file and the dotted key path, and says what to write instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, get_type_hints

import yaml

from hpo.config import DataConfig, ScoreConfig, TrainConfig, require
from hpo.errors import ConfigError
from hpo.params import CategoricalParam, Param, build_param, param_bounds
from hpo.typed import build, check_keys, coerce, suggest, to_plain


@dataclass(frozen=True)
class StudySettings:
    name: str = "hpo-study"  # Optuna study name; the spec is stored in the study under it
    direction: Literal["minimize"] = "minimize"  # FID is minimised
    n_trials: int = 20  # finished trials (complete, pruned or failed) after which the study is done
    max_retries: int = 2  # re-runs of a trial whose worker died (heartbeat went stale)
    heartbeat_interval: int = 30  # seconds between a running trial's heartbeats
    grace_period: int | None = None  # seconds without a heartbeat before a trial is stale (2× interval)

    def __post_init__(self) -> None:
        require(bool(self.name.strip()), "name", "must not be empty")
        require(self.n_trials >= 1, "n_trials", f"must be at least 1, got {self.n_trials}")
        require(self.max_retries >= 0, "max_retries", f"must be >= 0, got {self.max_retries}")
        require(self.heartbeat_interval >= 1, "heartbeat_interval", f"must be >= 1, got {self.heartbeat_interval}")


@dataclass(frozen=True)
class SamplerSettings:
    name: Literal["tpe", "random", "grid"] = "tpe"
    seed: int | None = None  # each worker adds its own offset; None = fresh randomness
    n_startup_trials: int = 5  # TPE: random trials before modelling


@dataclass(frozen=True)
class PrunerSettings:
    name: Literal["median", "none"] = "median"
    startup_trials: int = 4  # complete trials before pruning starts
    warmup_evals: int = 1  # evaluation points of each trial never pruned

    def __post_init__(self) -> None:
        require(self.startup_trials >= 0, "startup_trials", f"must be >= 0, got {self.startup_trials}")
        require(self.warmup_evals >= 0, "warmup_evals", f"must be >= 0, got {self.warmup_evals}")


SECTIONS = ("study", "data", "train", "score", "sampler", "pruner", "search", "baselines")


@dataclass(frozen=True)
class Spec:
    study: StudySettings
    data: DataConfig
    train: TrainConfig  # fixed settings; searched parameters override them per trial
    score: ScoreConfig
    sampler: SamplerSettings
    pruner: PrunerSettings
    search: Mapping[str, Param]
    baselines: tuple[Mapping[str, Any], ...]
    file: str = "<spec>"

    def train_config(self, params: Mapping[str, Any]) -> TrainConfig:
        """The fixed settings with ``params`` applied; invalid combinations are ConfigErrors."""
        check_keys(params, [f.name for f in fields(TrainConfig)], "train")
        typed = {k: coerce(v, _field_type(k), f"train.{k}") for k, v in params.items()}
        try:
            return self.train.replace(**typed)
        except ConfigError as err:
            raise ConfigError(f"train.{err.key}", f"{err.message} (parameters {dict(params)})") from None

    def to_dict(self) -> dict[str, Any]:
        out = {s: to_plain(getattr(self, s)) for s in ("study", "data", "train", "score", "sampler", "pruner")}
        out["search"] = {name: {"type": p.kind, **to_plain(p)} for name, p in self.search.items()}
        out["baselines"] = [dict(b) for b in self.baselines]
        return out

    def fingerprint(self) -> str:
        """Hash of everything that defines the study's trials (``study.n_trials`` may grow)."""
        return hashlib.sha256(json.dumps(comparable(self.to_dict()), sort_keys=True).encode()).hexdigest()


def comparable(spec: dict[str, Any]) -> dict[str, Any]:
    return {**spec, "study": {k: v for k, v in spec["study"].items() if k != "n_trials"}}


def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths whose values differ between two plain spec dicts."""
    keys = sorted(set(old) | set(new))
    out: list[str] = []
    for key in keys:
        path = f"{prefix}.{key}" if prefix else str(key)
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += changed_keys(a, b, path)
        elif a != b:
            out.append(path)
    return out


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> Spec:
    """Read and validate a spec file; ``overrides`` are ``section.key=value`` (section ``train``
    when omitted), values parsed as YAML."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError("spec", f"file not found: {path}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError("spec", f"not valid YAML{line}: {getattr(err, 'problem', err)}", file=str(path)) from None
    try:
        return spec_from_dict(apply_overrides(raw or {}, overrides), file=str(path))
    except ConfigError as err:
        raise err.in_file(str(path)) from None


def parse_overrides(overrides: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``section.key=value`` strings → {section: {key: value}}; section ``train`` when omitted."""
    out: dict[str, dict[str, Any]] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError("--set", f"expected key=value, got {item!r}")
        section, _, name = key.rpartition(".")
        section = section or "train"
        if section not in ("study", "data", "train", "score", "sampler", "pruner"):
            raise ConfigError(key, f"unknown section {section!r}{suggest(section, SECTIONS)}")
        out.setdefault(section, {})[name] = yaml.safe_load(value)
    return out


def apply_overrides(raw: Any, overrides: Sequence[str]) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError("spec", f"the top level must be a mapping of sections ({', '.join(SECTIONS)})")
    raw = {k: dict(v) if isinstance(v, Mapping) else v for k, v in raw.items()}
    for section, values in parse_overrides(overrides).items():
        raw[section] = {**(raw.get(section) or {}), **values}
    return raw


def spec_from_dict(raw: Mapping[str, Any], *, file: str = "<spec>") -> Spec:
    check_keys(raw, SECTIONS, "")
    train = build(TrainConfig, raw.get("train"), "train")
    search = build_search(raw.get("search") or {})
    spec = Spec(
        study=build(StudySettings, raw.get("study"), "study"),
        data=build(DataConfig, raw.get("data"), "data"),
        train=train,
        score=build(ScoreConfig, raw.get("score"), "score"),
        sampler=build(SamplerSettings, raw.get("sampler"), "sampler"),
        pruner=build(PrunerSettings, raw.get("pruner"), "pruner"),
        search=search,
        baselines=build_baselines(raw.get("baselines") or [], search),
        file=file,
    )
    check_consistency(spec)
    return spec


def build_search(raw: Any) -> dict[str, Param]:
    if not isinstance(raw, Mapping):
        raise ConfigError("search", "expected a mapping of parameter name → {type: float|int|categorical, ...}")
    names = [f.name for f in fields(TrainConfig)]
    out: dict[str, Param] = {}
    for name, body in raw.items():
        if name not in names:
            raise ConfigError(f"search.{name}", f"not a trainer setting{suggest(str(name), names)}")
        out[name] = build_param(body, f"search.{name}")
        if isinstance(out[name], CategoricalParam):
            for i, choice in enumerate(out[name].choices):  # type: ignore[union-attr]
                coerce(choice, _field_type(name), f"search.{name}.choices[{i}]")
    return out


TRAIN_TYPES = get_type_hints(TrainConfig)


def _field_type(name: str) -> Any:
    return TRAIN_TYPES[name]


def build_baselines(raw: Any, search: Mapping[str, Param]) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(raw, list):
        raise ConfigError("baselines", "expected a list of {parameter: value} mappings")
    out = []
    for i, item in enumerate(raw):
        path = f"baselines[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(path, f"expected a mapping of parameter values, got {item!r}")
        check_keys(item, list(search), path)
        missing = [name for name in search if name not in item]
        if missing:
            raise ConfigError(path, f"missing value for searched parameter(s) {', '.join(missing)}")
        for name, value in item.items():
            coerce(value, _field_type(name), f"{path}.{name}")
            search[name].check_contains(value, f"{path}.{name}")
        out.append(dict(item))
    return tuple(out)


def check_consistency(spec: Spec) -> None:
    """Cross-field rules that no single section can check alone."""
    lo_T, _ = param_bounds(spec.search.get("timesteps"), spec.train.timesteps)
    _, hi_steps = param_bounds(spec.search.get("ddim_steps"), spec.train.ddim_steps)
    if hi_steps > lo_T:
        key = "search.ddim_steps" if "ddim_steps" in spec.search else "train.ddim_steps"
        raise ConfigError(
            key,
            f"up to {hi_steps} DDIM steps but timesteps can be as low as {lo_T}; "
            "DDIM visits a subset of the T steps, so keep ddim_steps <= timesteps",
        )
    if "guidance_scale" in spec.search:
        if not spec.train.conditional:
            raise ConfigError(
                "search.guidance_scale",
                "searched, but train.conditional is false: classifier-free "
                "guidance needs a class-conditional model; set conditional: true or fix guidance_scale",
            )
        if spec.train.p_uncond == 0.0 and "p_uncond" not in spec.search:
            raise ConfigError(
                "search.guidance_scale",
                "searched, but train.p_uncond is 0: the null class is never "
                "trained, so guidance has nothing to push against; set p_uncond to 0.1-0.2",
            )
    _, hi_batch = param_bounds(spec.search.get("batch_size"), spec.train.batch_size)
    lo_kimg, _ = param_bounds(spec.search.get("kimg"), spec.train.kimg)
    steps = int(lo_kimg * 1000 // hi_batch)
    if steps < spec.train.num_evals:
        raise ConfigError(
            "train.kimg",
            f"a budget of {lo_kimg} kimg at batch_size={hi_batch} is {steps} steps, fewer "
            f"than num_evals={spec.train.num_evals}; raise kimg or lower num_evals",
        )
    levels = len(spec.train.channel_mult) - 1
    if spec.data.image_size % (2**levels):
        raise ConfigError(
            "data.image_size",
            f"{spec.data.image_size} is not divisible by 2^{levels} "
            f"(channel_mult has {levels + 1} levels); pick a multiple of {2**levels}",
        )
    if spec.sampler.name == "grid":
        for name, p in spec.search.items():
            p.grid_values(f"search.{name}")
