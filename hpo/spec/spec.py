"""A search-space spec as a validated, frozen :class:`Spec`, built from a plain mapping (a YAML
file read by :mod:`hpo.spec.loading`, or the JSON stored in a study by :func:`parse_stored`).

Every error names the dotted key path and says what to write instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args, get_type_hints

from hpo.errors import ConfigError
from hpo.files import JsonObject
from hpo.spec.config import POSTHOC_PROFILES, DataConfig, ScoreConfig, TrainConfig
from hpo.spec.counts import CountProblem, count_problems, source_channels
from hpo.spec.params import CategoricalParam, Param, build_param, candidates, param_bounds
from hpo.spec.rules import HEARTBEAT_INTERVAL, check_budget, check_steps, check_study_name, grace_seconds, require
from hpo.spec.sampling import RENAMED, SAMPLING_FIELDS, SamplingConfig, SamplingSweep, build_sweep, current_names
from hpo.spec.typed import build, check_keys, coerce, did_you_mean, to_plain


@dataclass(frozen=True)
class StudySettings:
    name: str = "hpo-study"  # Optuna study name: letters, digits, '.', '_', '-'; the spec is stored in it
    direction: Literal["minimize"] = "minimize"  # FID is minimised
    n_trials: int = 20  # finished trials (complete, pruned or failed) after which the study is done
    max_retries: int = 2  # re-runs of a trial whose worker died (heartbeat went stale)
    heartbeat_interval: int = HEARTBEAT_INTERVAL  # seconds between a running trial's heartbeats
    grace_period: int | None = None  # seconds without a heartbeat before a trial is stale (2× interval)
    target_kimg: float | None = None  # the budget the winner will really be trained for (hpo confirm forecasts it)

    def __post_init__(self) -> None:
        check_study_name(self.name, key="name")
        require(1 <= self.n_trials <= 100_000, "n_trials", f"must be in [1, 100000], got {self.n_trials}")
        require(0 <= self.max_retries <= 100, "max_retries", f"must be in [0, 100], got {self.max_retries}")
        require(
            1 <= self.heartbeat_interval <= 3600,
            "heartbeat_interval",
            f"must be in [1, 3600] seconds, got {self.heartbeat_interval}",
        )
        if self.target_kimg is not None:
            require(0 < self.target_kimg <= 1e7, "target_kimg", f"must be in (0, 1e7] kimg, got {self.target_kimg}")
        if self.grace_period is not None:
            require(
                2 * self.heartbeat_interval <= self.grace_period <= 86_400,
                "grace_period",
                f"must be at least 2 × heartbeat_interval ({2 * self.heartbeat_interval} s) and at most 86400, "
                f"got {self.grace_period}",
            )

    @property
    def grace_seconds(self) -> int:
        return grace_seconds(self.heartbeat_interval, self.grace_period)


@dataclass(frozen=True)
class SamplerSettings:
    name: Literal["auto", "tpe", "gp", "random", "grid"] = "auto"  # auto: the rule in service.study.sampler_name
    seed: int | None = None  # each worker adds its own offset; None = fresh randomness
    n_startup_trials: int | None = None  # random trials before modelling; None = the measured default

    def __post_init__(self) -> None:
        n = self.n_startup_trials
        require(n is None or 0 <= n <= 10_000, "n_startup_trials", f"must be >= 0, got {n}")


PrunerName = Literal["median", "percentile", "hyperband", "successive_halving", "rung", "none"]
PRUNER_NAMES: tuple[PrunerName, ...] = get_args(PrunerName)  # hpo.service.pruning.PRUNERS builds each


@dataclass(frozen=True)
class PrunerSettings:
    name: PrunerName = "median"
    startup_trials: int = 2  # median / percentile: complete trials before pruning starts
    warmup_evals: int = 0  # median / percentile: evaluation points of each trial never pruned
    percentile: float = 50.0  # percentile: keep a trial while its metric is within the best this many %
    # hyperband / successive_halving: evaluation points every trial gets; rung: the point every trial
    # pauses at until all n_trials have reached it, when the best `keep` there are continued
    min_resource: int = 1
    reduction_factor: int = 3  # hyperband / successive_halving: keep 1 in this many at each halving
    keep: int = 0  # rung: trials continued to the end; 0 = the most that still save 3x (at least 4)
    spare_until_complete: int = 4  # until this many trials are complete, a trial ahead of the baseline is not stopped

    @property
    def pauses(self) -> bool:
        """``rung``: every trial pauses at one evaluation point until all have reached it, and the best
        there are continued (the one pruner that pauses rather than stops)."""
        return self.name == "rung"

    @property
    def prunes(self) -> bool:
        """Whether trials may end before their budget (every pruner but ``none``)."""
        return self.name != "none"

    def __post_init__(self) -> None:
        require(self.startup_trials >= 0, "startup_trials", f"must be >= 0, got {self.startup_trials}")
        require(self.warmup_evals >= 0, "warmup_evals", f"must be >= 0, got {self.warmup_evals}")
        require(0.0 < self.percentile < 100.0, "percentile", f"must be between 0 and 100, got {self.percentile}")
        require(self.min_resource >= 1, "min_resource", f"must be at least 1, got {self.min_resource}")
        require(self.reduction_factor >= 2, "reduction_factor", f"must be at least 2, got {self.reduction_factor}")
        require(self.keep >= 0, "keep", f"must be >= 0 (0: the most that still save 3x), got {self.keep}")
        n = self.spare_until_complete
        require(n >= 0, "spare_until_complete", f"must be >= 0 (0: no baseline guard), got {n}")


@dataclass(frozen=True)
class WandbSettings:
    project: str  # W&B project; one run per trial, grouped by study
    entity: str | None = None  # team or user; None = the logged-in default
    mode: Literal["online", "offline"] = "online"  # offline writes runs locally (wandb sync uploads them)


@dataclass(frozen=True)
class MlflowSettings:
    tracking_uri: str  # e.g. sqlite:///mlflow.db or http://mlflow:5000
    experiment: str | None = None  # None = the study name


@dataclass(frozen=True)
class TrackingSettings:
    tensorboard: bool = True  # event logs per trial in the artifact store (hpo tensorboard serves them)
    wandb: WandbSettings | None = None  # Weights & Biases (extra: pip install 'hpo[wandb]')
    mlflow: MlflowSettings | None = None  # MLflow (extra: pip install 'hpo[mlflow]')


SECTIONS = ("study", "data", "train", "sampling", "score", "sampler", "pruner", "tracking", "search", "baselines")
TRAIN_TYPES = get_type_hints(TrainConfig)
SAMPLING_TYPES = get_type_hints(SamplingConfig)
_V = TypeVar("_V")  # a parameter's value
BASELINE_NAME, NAME_LENGTH = "name", 40  # a baseline's optional name (not a parameter) and its longest
LEGACY_SAMPLING = {"guidance_scale": "guidance_scale", "ddim_steps": "steps", "ddim_eta": "eta"}


@dataclass(frozen=True)
class Spec:
    study: StudySettings
    data: DataConfig
    train: TrainConfig  # fixed settings; searched parameters override them per trial
    sampling: SamplingSweep  # sampling combinations scored on every trained model
    score: ScoreConfig
    sampler: SamplerSettings
    pruner: PrunerSettings
    tracking: TrackingSettings
    search: Mapping[str, Param]
    baselines: tuple[Mapping[str, Any], ...]  # each enqueued start's parameters (its `name` is not one)
    baseline_names: tuple[str | None, ...] = ()  # each baseline's optional `name`, in the same order
    file: str = "<spec>"

    def baseline_name(self, i: int) -> str:
        """The ``i``-th baseline's name: its `name`, else "baseline N" by its position (1-based)."""
        named = self.baseline_names[i] if i < len(self.baseline_names) else None
        return named or f"baseline {i + 1}"

    def split_params(self, params: Mapping[str, _V]) -> tuple[dict[str, _V], dict[str, _V]]:
        """A trial's parameters (``Params``; ``hpo train``'s also its ``--set train.…`` values) → (training
        parameters, sampling parameters); a parameter stored under a setting's former name (a study
        searched ``ddim_steps``) reads as its name."""
        params = current_names(params)
        train = {k: v for k, v in params.items() if k not in SAMPLING_FIELDS}
        return train, {k: v for k, v in params.items() if k in SAMPLING_FIELDS}

    def train_config(self, params: Mapping[str, Any]) -> TrainConfig:
        """The fixed settings with training ``params`` applied (``network.NAME`` sets a factory
        keyword); invalid combinations are ConfigErrors naming ``train.KEY``."""
        plain = {k: v for k, v in params.items() if not k.startswith("network.")}
        check_keys(plain, list(TRAIN_TYPES), "train")
        typed: dict[str, Any] = {k: coerce(v, TRAIN_TYPES[k], f"train.{k}") for k, v in plain.items()}
        kwargs = {k.split(".", 1)[1]: v for k, v in params.items() if k.startswith("network.")}
        if kwargs:
            net = typed.get("network", self.train.network)
            typed["network"] = dataclasses.replace(net, kwargs={**net.kwargs, **kwargs})
        try:
            return self.train.replace(**typed)
        except ConfigError as err:
            raise ConfigError(f"train.{err.key}", f"{err.message} (parameters {dict(params)})") from None

    def sampling_combinations(self, cfg: TrainConfig, params: Mapping[str, Any]) -> list[SamplingConfig]:
        """The combinations one trained model is scored at; ``params`` fix searched sampling settings."""
        combos = self.sampling.combinations(params, conditional=cfg.conditional)
        check_steps(max(c.steps for c in combos), cfg.timesteps, key="sampling.steps")
        return combos

    def to_dict(self) -> dict[str, Any]:  # JsonObject would need a section check in every reader (narrow)
        out: JsonObject = {
            s: to_plain(getattr(self, s)) for s in ("study", "data", "train", "score", "sampler", "pruner")
        }
        out["sampling"] = {k: v for k, v in self.sampling.to_dict().items() if k not in self.search}
        out["tracking"] = to_plain(self.tracking)
        out["search"] = {name: {"type": p.kind, **to_plain(p)} for name, p in self.search.items()}
        names = self.baseline_names + (None,) * (len(self.baselines) - len(self.baseline_names))
        out["baselines"] = [
            {**({} if n is None else {BASELINE_NAME: n}), **b} for b, n in zip(self.baselines, names, strict=True)
        ]
        return out

    def fingerprint(self) -> str:
        """Hash of everything that defines the study's trials (``study.n_trials`` may grow, and
        ``study.target_kimg`` only guides the confirmation)."""
        return hashlib.sha256(json.dumps(comparable(self.to_dict()), sort_keys=True).encode()).hexdigest()


def comparable(spec: JsonObject) -> JsonObject:
    """The spec's keys that define its trials: not n_trials, target_kimg or a baseline's name."""
    study, baselines = spec["study"], spec.get("baselines") or []
    assert isinstance(study, Mapping), study  # Spec.to_dict writes every section as a mapping
    assert isinstance(baselines, list), baselines
    return {
        **spec,
        "study": {k: v for k, v in study.items() if k not in ("n_trials", "target_kimg")},
        "baselines": [{k: v for k, v in b.items() if k != BASELINE_NAME} for b in baselines if isinstance(b, Mapping)],
    }


def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths whose values differ between two plain spec dicts."""
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        path = f"{prefix}.{key}" if prefix else str(key)
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += changed_keys(a, b, path)
        elif a != b:
            out.append(path)
    return out


def parse_stored(text: str, *, study_name: str) -> Spec:
    """The one parser of a spec stored in a study (by any version of ``hpo launch``)."""
    return spec_from_dict(json.loads(text), file=f"study {study_name}")


def renamed_settings(raw: Mapping[str, Any]) -> list[str]:
    """The settings ``raw`` gives under a former name (:data:`RENAMED`), as ``section.old → section.new``."""
    out = []
    for section, moved_to in (("train", "sampling"), ("sampling", "sampling"), ("search", "search")):
        values = raw.get(section)
        if isinstance(values, Mapping):
            out += [f"{section}.{k} → {moved_to}.{RENAMED[k]}" for k in values if k in RENAMED]
    baselines = raw.get("baselines")
    if isinstance(baselines, list) and any(isinstance(b, Mapping) and set(b) & set(RENAMED) for b in baselines):
        out += [f"baselines[].{k} → baselines[].{v}" for k, v in RENAMED.items()]
    return out


def rename_settings(values: Any, path: str) -> Any:
    """``values`` (a section's mapping) with former names replaced; both names given is refused."""
    if not isinstance(values, Mapping):
        return values
    for old, new in RENAMED.items():
        if old in values and new in values:
            raise ConfigError(f"{path}.{old}", f"is also set as {path}.{new}; keep {new} (its name now) only")
    return current_names(values)


def migrate_legacy(raw: Mapping[str, Any]) -> JsonObject:
    """Settings under a former name (``ddim_steps``) read as their name, and specs written before
    sampling had its own section (guidance, steps and η in train) read as now."""
    out: JsonObject = dict(raw)
    for section in ("sampling", "search"):
        if section in out:
            out[section] = rename_settings(out[section], section)
    baselines = out.get("baselines")
    if isinstance(baselines, list):
        out["baselines"] = [rename_settings(b, f"baselines[{i}]") for i, b in enumerate(baselines)]
    train = out.get("train")
    raw_sampling = out.get("sampling") or {}
    if isinstance(train, Mapping) and isinstance(raw_sampling, Mapping) and any(k in train for k in LEGACY_SAMPLING):
        sampling = dict(raw_sampling)
        for old, new in LEGACY_SAMPLING.items():
            if old in train and new in sampling:
                raise ConfigError(
                    f"train.{old}",
                    f"is also set as sampling.{new}; keep one (sampling.{new} is the current place, "
                    f"train.{old} the old one)",
                )
            if old in train:
                sampling[new] = train[old]
        out["train"] = {k: v for k, v in train.items() if k not in LEGACY_SAMPLING}
        out["sampling"] = sampling
    search = out.get("search")
    if isinstance(search, Mapping) and "ddim_eta" in search:
        out["search"] = {("eta" if k == "ddim_eta" else k): v for k, v in search.items()}
    return out


def spec_from_dict(raw: Mapping[str, Any], *, file: str = "<spec>") -> Spec:
    check_keys(raw, SECTIONS, "")
    raw = migrate_legacy(raw)
    train = build(TrainConfig, raw.get("train"), "train")
    search = build_search(raw.get("search") or {}, train)
    sampling = build_sweep(raw.get("sampling"))
    swept = raw.get("sampling") or {}  # a mapping: build_sweep refused anything else
    for name in (n for n in SAMPLING_FIELDS if n in search and isinstance(swept, Mapping) and n in swept):
        raise ConfigError(
            f"search.{name}",
            f"is also listed under sampling.{name}; keep it in one place (sampling: scored on every trained "
            "model at no training cost)",
        )
    spec = Spec(
        study=build(StudySettings, raw.get("study"), "study"),
        data=build(DataConfig, raw.get("data"), "data"),
        train=with_posthoc_profiles(train, sampling, search, raw.get("train")),
        sampling=sampling,
        score=build(ScoreConfig, raw.get("score"), "score"),
        sampler=build(SamplerSettings, raw.get("sampler"), "sampler"),
        pruner=build(PrunerSettings, raw.get("pruner"), "pruner"),
        tracking=build(TrackingSettings, raw.get("tracking"), "tracking"),
        search=search,
        baselines=build_baselines(raw.get("baselines") or [], search),
        baseline_names=baseline_names(raw.get("baselines") or []),
        file=file,
    )
    check_consistency(spec)
    return spec


def param_type(name: str, train: TrainConfig) -> Any:
    """The type a searched parameter must have, or a ConfigError naming the valid names."""
    if name in TRAIN_TYPES and name != "network":
        return TRAIN_TYPES[name]
    if name in SAMPLING_TYPES:
        return SAMPLING_TYPES[name]
    if name.startswith("network.") and len(name) > len("network."):
        if train.network.factory == "builtin":
            raise ConfigError(
                f"search.{name}",
                "the builtin UNet takes no factory keywords; search its train fields (base_channels, ...) "
                "or set train.network.factory",
            )
        return Any
    names = [n for n in [*TRAIN_TYPES, *SAMPLING_TYPES] if n != "network"]
    raise ConfigError(f"search.{name}", f"not a trainer or sampling setting{did_you_mean(str(name), names)}")


def build_search(raw: Any, train: TrainConfig) -> dict[str, Param]:
    if not isinstance(raw, Mapping):
        raise ConfigError("search", "expected a mapping of parameter name → {type: float|int|categorical, ...}")
    out: dict[str, Param] = {}
    for name, body in raw.items():
        kind = param_type(str(name), train)
        out[name] = param = build_param(body, f"search.{name}")
        if isinstance(param, CategoricalParam):
            for i, choice in enumerate(param.choices):
                coerce(choice, kind, f"search.{name}.choices[{i}]")
        for value in candidates(param):
            check_field_value(str(name), value, train, f"search.{name}")
    return out


def check_field_value(name: str, value: Any, train: TrainConfig, path: str) -> None:
    """A searched value must pass its own setting's validation (cross-field rules come later)."""
    if name.startswith("network."):
        return
    try:
        if name in SAMPLING_TYPES:
            SamplingConfig(**{name: coerce(value, SAMPLING_TYPES[name], path)})
        else:
            train.replace(**{name: coerce(value, TRAIN_TYPES[name], path)})
    except ConfigError as err:
        if err.key == name:
            raise ConfigError(path, f"{value!r}: {err.message}") from None


def build_baselines(raw: Any, search: Mapping[str, Param]) -> tuple[Mapping[str, Any], ...]:
    """Each baseline's parameters (its `name`, checked by :func:`baseline_names`, left out)."""
    if not isinstance(raw, list):
        raise ConfigError("baselines", "expected a list of {parameter: value} mappings")
    out = []
    for i, item in enumerate(raw):
        path = f"baselines[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(path, f"expected a mapping of parameter values, got {item!r}")
        params = {k: v for k, v in item.items() if k != BASELINE_NAME}
        check_keys(params, list(search), path)
        missing = [name for name in search if name not in params]
        if missing:
            raise ConfigError(path, f"missing value for searched parameter(s) {', '.join(missing)}")
        for name, value in params.items():
            kind = TRAIN_TYPES.get(name) or SAMPLING_TYPES.get(name) or Any
            coerce(value, kind, f"{path}.{name}")
            search[name].check_contains(value, f"{path}.{name}")
        out.append(params)
    return tuple(out)


def baseline_names(raw: Any) -> tuple[str | None, ...]:
    """Each baseline's optional `name` (what the report calls it: "by hand", "known start"), checked;
    ``raw`` is a list of mappings (:func:`build_baselines` refused anything else)."""
    out: list[str | None] = []
    for i, item in enumerate(raw):
        name = item.get(BASELINE_NAME)
        ok = name is None or (isinstance(name, str) and 1 <= len(name) <= NAME_LENGTH and "\n" not in name)
        require(
            ok,
            f"baselines[{i}].{BASELINE_NAME}",
            f"must be one line of 1-{NAME_LENGTH} characters (what the report calls this start), got {name!r}",
        )
        out.append(name)
    return tuple(out)


def with_posthoc_profiles(
    train: TrainConfig, sampling: SamplingSweep, search: Mapping[str, Param], raw_train: Any
) -> TrainConfig:
    """A swept (or searched) EMA length is rebuilt from snapshots of power EMAs: track EDM2's two
    profiles unless ``train.ema_profiles`` names others."""
    if not (sampling.posthoc_ema or "ema_sigma_rel" in search):
        return train
    if isinstance(raw_train, Mapping) and "ema_profiles" in raw_train:
        require(
            bool(train.ema_profiles),
            "train.ema_profiles",
            "is empty, but the EMA length (ema_sigma_rel) is rebuilt from these profiles' snapshots; "
            f"remove the key (default {list(POSTHOC_PROFILES)}) or list σ_rel values",
        )
        return train
    return train.replace(ema_profiles=POSTHOC_PROFILES)


def sampling_values(spec: Spec, name: str) -> list[Any]:
    """The values that bound what a sampling setting takes across trials and combinations: its
    searched candidates (both ends of a range, or every choice), else the sweep's own values."""
    return candidates(spec.search[name]) if name in spec.search else list(spec.sampling.values(name))


def sampling_bounds(spec: Spec, name: str) -> tuple[Any, Any]:
    """(smallest, largest) value a sampling setting takes across trials and combinations."""
    values = sampling_values(spec, name)
    return min(values), max(values)


def check_consistency(spec: Spec) -> None:
    """Cross-field rules that no single section can check alone."""
    lo_T, _ = param_bounds(spec.search.get("timesteps"), spec.train.timesteps)
    _, hi_steps = sampling_bounds(spec, "steps")
    check_steps(hi_steps, lo_T, key="search.steps" if "steps" in spec.search else "sampling.steps")
    check_guidance(spec)
    check_guidance_intervals(spec)
    _, hi_batch = param_bounds(spec.search.get("batch_size"), spec.train.batch_size)
    lo_kimg, _ = param_bounds(spec.search.get("kimg"), spec.train.kimg)
    check_budget(lo_kimg, hi_batch, spec.train.num_evals, spec.train.eval_spacing, key="train.kimg")
    if spec.pruner.pauses:
        point, evals = spec.pruner.min_resource, spec.train.num_evals
        require(
            point < evals,
            "pruner.min_resource",
            f"the rung (evaluation point {point}) must come before the last of train.num_evals={evals}; "
            f"lower min_resource or raise num_evals",
        )
    if spec.train.network.factory == "builtin":
        levels = len(spec.train.channel_mult) - 1
        require(
            spec.data.image_size % (2**levels) == 0,
            "data.image_size",
            f"{spec.data.image_size} is not divisible by 2^{levels} (channel_mult has {levels + 1} levels); "
            f"pick a multiple of {2**levels}",
        )
    if spec.sampler.name == "grid":
        for name, p in spec.search.items():
            p.grid_values(f"search.{name}")
    for problem in sample_count_problems(spec):
        require(not problem.fatal, problem.key, problem.message)


def sample_count_problems(spec: Spec, channels: int | None = None) -> list[CountProblem]:
    """:func:`hpo.spec.counts.count_problems` for this spec (channels from the data source unless known)."""
    return count_problems(
        features=spec.score.features,
        channels=source_channels(spec.data.source) if channels is None else channels,
        num_samples=spec.score.num_samples,
        screen_samples=spec.sampling.screen_samples,
        screen_by=spec.sampling.screen_by,
        combinations=len(spec.sampling.combinations()),
    )


def check_guidance_intervals(spec: Spec) -> None:
    """Every trial's guidance interval must be non-empty: the largest lower end a trial can draw below
    the smallest upper end (``null``: none)."""
    lows = sampling_values(spec, "guidance_sigma_min")
    highs = sampling_values(spec, "guidance_sigma_max")
    low, high = max(lows), min(math.inf if h is None else h for h in highs)
    key = "search.guidance_sigma_min" if "guidance_sigma_min" in spec.search else "sampling.guidance_sigma_max"
    require(
        high > low,
        key,
        f"a trial can draw guidance_sigma_min {low:g} with guidance_sigma_max {high:g}: an empty interval "
        "(min, max]; keep every lower end below every upper end",
    )


def check_guidance(spec: Spec) -> None:
    """Classifier-free guidance needs a conditional model whose null class was trained."""
    lo, hi = sampling_bounds(spec, "guidance_scale")
    if lo == hi == 1.0:
        return
    key = "search.guidance_scale" if "guidance_scale" in spec.search else "sampling.guidance_scale"
    require(
        spec.train.conditional,
        key,
        "guidance other than 1, but train.conditional is false: classifier-free guidance needs a "
        "class-conditional model; set conditional: true or keep guidance_scale at 1",
    )
    require(
        spec.train.p_uncond > 0.0 or "p_uncond" in spec.search,
        key,
        "guidance other than 1, but train.p_uncond is 0: the null class is never trained, so guidance has "
        "nothing to push against; set p_uncond to 0.1-0.2",
    )
