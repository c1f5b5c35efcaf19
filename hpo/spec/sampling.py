"""How a trained model is sampled, apart from how it is trained.

:class:`SamplingConfig` is one combination (guidance scale, sampler steps, η, ...): generation and scoring
use it, the trainer never sees it. :class:`SamplingSweep` is a spec's ``sampling:`` section: the
values of each setting that every trained model is scored at, so that these three are bought at
sampling price instead of a full training run each.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, TypeVar, get_type_hints

from hpo.errors import ConfigError
from hpo.files import JsonObject
from hpo.spec.rules import check_guidance, check_guidance_interval, check_sigma_rel, require
from hpo.spec.samplers import (
    DEFAULT_SAMPLER,
    DEFAULT_SPACING,
    SAMPLER_NAMES,
    SAMPLER_TABLE,
    SPACING_NAMES,
    SamplerName,
    Spacing,
    sampler_facts,
    spacing_facts,
)
from hpo.spec.typed import check_keys, coerce

MAX_COMBINATIONS = 256
# Screened combinations completed to the full count, beside each guidance scale's best and the screen's
# frontier (hpo.analysis.frontier.finalists): on 24 good models (3 datasets, classifier features) the
# screen's best 1 picked a combination more than 2 sd of a difference (floor 2 %) worse than truth's
# best on 5, its best 3 on 1 (photos-7, 8.7 % worse; benchmarks/sweep_truth.py, docs/screening.md).
RESCORE_TOP = 3
# A screen is planned only where it saves at least this share of the sweep's network evaluations in the
# worst case: with its finalists completed, on grids of a dozen combinations it saves nothing there, and
# a screen can only lose the best combination, never find a better one (docs/screening.md).
SCREEN_PAYS = 0.5
RENAMED = {"ddim_steps": "steps"}  # a setting's former name → its name: still read (specs, stored combinations)
ScreenBy = Literal["pca", "kid", "fid"]
SCREEN_BY: tuple[ScreenBy, ...] = ("pca", "kid", "fid")


@dataclass(frozen=True)
class SamplingConfig:
    guidance_scale: float = 1.0  # classifier-free guidance w; 1 = the conditional model alone
    steps: int = 50  # the sampler's steps (each one or two network evaluations: SamplerFacts.per_step)
    eta: float = 0.0  # 0 = deterministic DDIM, 1 = DDPM-like noise
    ema_sigma_rel: float | None = None  # EMA length rebuilt after training (post-hoc EMA); None: the run's own EMA
    sampler: SamplerName = DEFAULT_SAMPLER  # the solver taking the steps: hpo.spec.samplers.SAMPLER_TABLE
    guidance_sigma_min: float = 0.0  # guidance only where σ/α lies in (min, max] (Kynkäänniemi et al. 2024) ...
    guidance_sigma_max: float | None = None  # ... elsewhere the conditional model alone; None: no upper bound
    spacing: Spacing = DEFAULT_SPACING  # the timesteps: trailing (Lin et al. 2024) or karras (ρ = 7 in σ)

    def __post_init__(self) -> None:
        check_guidance(self.guidance_scale)
        check_guidance_interval(self.guidance_sigma_min, self.guidance_sigma_max)
        require(1 <= self.steps <= 10_000, "steps", f"must be in [1, 10000], got {self.steps}")
        require(0.0 <= self.eta <= 1.0, "eta", f"must be in [0, 1], got {self.eta}")
        require(
            self.sampler in SAMPLER_NAMES, "sampler", f"unknown sampler {self.sampler!r}; expected one of "
            f"{', '.join(SAMPLER_NAMES)}",
        )  # fmt: skip
        require(
            self.spacing in SPACING_NAMES, "spacing", f"unknown spacing {self.spacing!r}; expected one of "
            f"{', '.join(SPACING_NAMES)}",
        )  # fmt: skip
        require(
            sampler_facts(self.sampler).stochastic or self.eta == 0.0, "eta",
            f"{self.sampler} is deterministic: eta must be 0, got {self.eta:g} (sweep eta with sampler "
            f"{' or '.join(s.name for s in SAMPLER_TABLE if s.stochastic)} only)",
        )  # fmt: skip
        if self.ema_sigma_rel is not None:
            check_sigma_rel(self.ema_sigma_rel, "ema_sigma_rel")

    @property
    def guidance_interval(self) -> tuple[float, float]:
        """(σ_lo, σ_hi]: the noise levels σ/α where guidance applies; (0, ∞] is everywhere."""
        return self.guidance_sigma_min, math.inf if self.guidance_sigma_max is None else self.guidance_sigma_max

    def guided(self, conditional: bool = True) -> bool:
        """Whether guidance changes anything: w ≠ 1 on a conditional network."""
        return conditional and self.guidance_scale != 1.0

    def unguided_interval(self) -> SamplingConfig:
        """This combination with the default guidance interval (for one where guidance does nothing)."""
        return replace(self, guidance_sigma_min=0.0, guidance_sigma_max=None)

    @property
    def interval_set(self) -> bool:
        return self.guidance_interval != (0.0, math.inf)

    def evaluations(self, conditional: bool = True) -> int:
        """Network evaluations per sample: one per step (Heun: two, but one on its last step), each
        twice under guidance (w ≠ 1) of a conditional network (the conditional and unconditional passes).
        With a guidance interval this is at most: the steps outside it cost one pass, and which those
        are depends on the noise schedule (``hpo.training.generate.network_evaluations`` counts them;
        a sweep stores that count per combination)."""
        return sampler_facts(self.sampler).evaluations(self.steps) * (2 if self.guided(conditional) else 1)

    @property
    def label(self) -> str:
        ema = "" if self.ema_sigma_rel is None else f" ema={self.ema_sigma_rel:g}"
        solver = "" if self.sampler == DEFAULT_SAMPLER else f" {self.sampler}"
        interval = f" σ∈{self.interval_text}" if self.interval_set else ""
        spacing = "" if self.spacing == DEFAULT_SPACING else f" {self.spacing}"
        return f"w={self.guidance_scale:g} steps={self.steps} eta={self.eta:g}{ema}{solver}{interval}{spacing}"

    @property
    def interval_text(self) -> str:
        lo, hi = self.guidance_interval
        return f"({lo:g}, {hi:g}]" if math.isfinite(hi) else f"({lo:g}, ∞)"

    @property
    def words(self) -> str:
        ema = "" if self.ema_sigma_rel is None else f", EMA σ_rel {self.ema_sigma_rel:g}"
        interval = f" for σ in {self.interval_text}" if self.interval_set else ""
        return f"guidance {self.guidance_scale:g}{interval}, {self.steps_words}, η {self.eta:g}{ema}"

    @property
    def steps_words(self) -> str:
        """How many steps of which sampler, e.g. "10 Heun (EDM) steps on the Karras σ spacing (ρ = 7)"."""
        return f"{self.steps} {sampler_facts(self.sampler).words} steps{spacing_facts(self.spacing).words}"

    def as_dict(self) -> JsonObject:
        """Plain values; ``ema_sigma_rel`` only when set, so combinations stored before post-hoc EMA read
        the same."""
        out: JsonObject = {"guidance_scale": self.guidance_scale, "steps": self.steps, "eta": self.eta}
        if self.ema_sigma_rel is not None:
            out["ema_sigma_rel"] = self.ema_sigma_rel
        if self.sampler != DEFAULT_SAMPLER:
            out["sampler"] = self.sampler
        if self.guidance_sigma_min != 0.0:
            out["guidance_sigma_min"] = self.guidance_sigma_min
        if self.guidance_sigma_max is not None:
            out["guidance_sigma_max"] = self.guidance_sigma_max
        if self.spacing != DEFAULT_SPACING:
            out["spacing"] = self.spacing
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SamplingConfig:
        """The combination stored by :meth:`as_dict` (extra keys, e.g. a score's, are ignored; a
        setting's former name, e.g. ``ddim_steps``, reads as its name)."""
        d = current_names(d)
        sigma = d.get("ema_sigma_rel")
        return cls(
            float(d["guidance_scale"]), int(d["steps"]), float(d["eta"]), None if sigma is None else float(sigma),
            d.get("sampler", DEFAULT_SAMPLER), float(d.get("guidance_sigma_min", 0.0)),
            None if d.get("guidance_sigma_max") is None else float(d["guidance_sigma_max"]),
            d.get("spacing", DEFAULT_SPACING),
        )  # fmt: skip


_V = TypeVar("_V")


def current_names(d: Mapping[str, _V]) -> dict[str, _V]:
    """``d`` with each setting's former name (:data:`RENAMED`) replaced by its name; where both are
    given the current one wins (a caller that must refuse that checks first)."""
    return {RENAMED.get(k, k): v for k, v in d.items() if not (k in RENAMED and RENAMED[k] in d)}


SAMPLING_FIELDS = tuple(f.name for f in fields(SamplingConfig))
SWEEP_KEYS = (*SAMPLING_FIELDS, "screen_samples", "rescore_top", "screen_by")


@dataclass(frozen=True)
class SamplingSweep:
    guidance_scale: tuple[float, ...] = (1.0,)  # values scored on every trained model
    steps: tuple[int, ...] = (50,)
    eta: tuple[float, ...] = (0.0,)
    ema_sigma_rel: tuple[float | None, ...] = (None,)  # EMA lengths rebuilt from snapshots; (None,): the run's EMA
    sampler: tuple[SamplerName, ...] = (DEFAULT_SAMPLER,)
    guidance_sigma_min: tuple[float, ...] = (0.0,)
    guidance_sigma_max: tuple[float | None, ...] = (None,)
    spacing: tuple[Spacing, ...] = (DEFAULT_SPACING,)
    screen_samples: int = 0  # > 0: score every combination with this many samples first, then ...
    rescore_top: int = RESCORE_TOP  # ... complete the best few to score.num_samples (the best: the trial's value)
    screen_by: ScreenBy = "pca"  # the screen's ranking: pca (FID in screen_samples/4 principal components), kid, fid

    def values(self, name: str) -> tuple[Any, ...]:
        values: tuple[Any, ...] = getattr(self, name)
        return values

    def combinations(self, fixed: Mapping[str, Any] | None = None, *, conditional: bool = True) -> list[SamplingConfig]:
        """Every distinct combination; a setting in ``fixed`` (a trial's searched value) replaces its
        axis. Where guidance does nothing (w = 1, or an unconditional network: ``conditional`` False)
        the guidance interval means nothing either: such combinations keep the default and count once."""
        fixed = fixed or {}
        axes = [(fixed[n],) if n in fixed else self.values(n) for n in SAMPLING_FIELDS]
        combos = (
            SamplingConfig(g, int(s), e, m, k, lo, hi, sp) for g, s, e, m, k, lo, hi, sp in itertools.product(*axes)
        )
        return list(dict.fromkeys(c if c.guided(conditional) else c.unguided_interval() for c in combos))

    def evaluations(self, num_samples: int, *, conditional: bool = True, fixed: Mapping[str, Any] | None = None) -> int:
        """Network evaluations one trial's sweep spends at most: with a screen, every combination on
        ``screen_samples``, completed to ``num_samples`` the ``rescore_top`` most expensive, the
        dearest at each guidance scale and one at each cost below the dearest (the screen's frontier,
        whose last point is a finalist; :func:`hpo.analysis.frontier.finalists`); without, every
        combination on ``num_samples``."""
        combos = self.combinations(fixed, conditional=conditional)
        costs = sorted((c.evaluations(conditional) for c in combos), reverse=True)
        if not 0 < self.screen_samples < num_samples or len(costs) < 2:
            return num_samples * sum(costs)
        frontier = sorted(set(costs))[:-1]
        dearest: dict[float, int] = {}
        for c in combos:
            scale = c.guidance_scale if conditional else 1.0
            dearest[scale] = max(dearest.get(scale, 0), c.evaluations(conditional))
        finalists = min(sum(costs[: self.rescore_top]) + sum(dearest.values()) + sum(frontier), sum(costs))
        return self.screen_samples * sum(costs) + finalists * (num_samples - self.screen_samples)

    def screen_saving(self, num_samples: int, *, conditional: bool = True) -> float:
        """The share of the sweep's worst-case network evaluations the screen saves against completing
        every combination (0 without a screen; at most 0 where its finalists may be every combination)."""
        every = replace(self, screen_samples=0).evaluations(num_samples, conditional=conditional)
        return 1 - self.evaluations(num_samples, conditional=conditional) / every

    @property
    def posthoc_ema(self) -> bool:
        """Whether the EMA length is swept (the runs must track power EMAs and keep snapshots)."""
        return self.ema_sigma_rel != (None,)

    def preview(self, fixed: Mapping[str, Any] | None = None) -> SamplingConfig:
        """The combination used for grids while training: the median guidance and steps, least η, the
        first sampler and guidance interval listed, and the run's own EMA (the only one there is before
        training ends)."""
        combos = self.combinations(fixed)
        scales = sorted({c.guidance_scale for c in combos})
        steps = sorted({c.steps for c in combos})
        median = (len(scales) - 1) // 2, (len(steps) - 1) // 2
        names = ("sampler", "guidance_sigma_min", "guidance_sigma_max", "spacing")
        first = {n: (fixed or {}).get(n, self.values(n)[0]) for n in names}
        return SamplingConfig(scales[median[0]], steps[median[1]], min(c.eta for c in combos), **first)

    def to_dict(self) -> JsonObject:
        out: JsonObject = {
            f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)
        }
        if not self.posthoc_ema:
            del out["ema_sigma_rel"]  # specs without it keep their fingerprint
        if self.sampler == (DEFAULT_SAMPLER,):
            del out["sampler"]  # likewise
        for name, default in (("guidance_sigma_min", 0.0), ("guidance_sigma_max", None), ("spacing", DEFAULT_SPACING)):
            if out[name] == [default]:
                del out[name]  # likewise
        if self.screen_by == "pca":
            del out["screen_by"]  # likewise the default screen
        return out


def build_sweep(raw: Any, path: str = "sampling") -> SamplingSweep:
    """A ``sampling:`` section: each setting a value, a list of values, or {low, high, count, log?}."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(path, f"expected a mapping of sampling settings ({', '.join(SWEEP_KEYS)}), got {raw!r}")
    check_keys(raw, SWEEP_KEYS, path)
    hints = {**get_type_hints(SamplingConfig), "ema_sigma_rel": float}
    kwargs: dict[str, Any] = {}
    for name in SAMPLING_FIELDS:
        if name in raw:
            kwargs[name] = axis_values(raw[name], hints[name], f"{path}.{name}")
            for i, value in enumerate(kwargs[name]):
                try:
                    SamplingConfig(**{name: value})
                except ConfigError as err:
                    raise ConfigError(f"{path}.{name}[{i}]", err.message) from None
    for name in ("screen_samples", "rescore_top"):
        if name in raw:
            kwargs[name] = coerce(raw[name], int, f"{path}.{name}")
    if "screen_by" in raw:
        kwargs["screen_by"] = screen_by(raw["screen_by"], f"{path}.screen_by")
    sweep = SamplingSweep(**kwargs)
    require(sweep.screen_samples >= 0, f"{path}.screen_samples", f"must be >= 0, got {sweep.screen_samples}")
    require(sweep.rescore_top >= 1, f"{path}.rescore_top", f"must be at least 1, got {sweep.rescore_top}")
    low = max(sweep.guidance_sigma_min)
    high = min(math.inf if h is None else h for h in sweep.guidance_sigma_max)
    require(
        high > low,
        f"{path}.guidance_sigma_max",
        f"{high:g} is not above guidance_sigma_min {low:g}: every pair must leave a non-empty interval (min, max]",
    )
    n = len(sweep.combinations())
    require(n <= MAX_COMBINATIONS, path, f"{n} combinations; keep at most {MAX_COMBINATIONS}")
    return sweep


def screen_by(raw: Any, path: str) -> ScreenBy:
    for name in SCREEN_BY:
        if raw == name:
            return name
    raise ConfigError(path, f"unknown screen statistic {raw!r}; expected one of {', '.join(SCREEN_BY)}")


def axis_values(raw: Any, kind: type, path: str) -> tuple[Any, ...]:
    if isinstance(raw, Mapping):
        return _range_values(raw, kind, path)
    items: Sequence[Any] = raw if isinstance(raw, list) else [raw]
    if not items:
        raise ConfigError(path, "must list at least one value")
    values = tuple(coerce(v, kind, f"{path}[{i}]") for i, v in enumerate(items))
    if len(set(values)) != len(values):
        raise ConfigError(path, f"has duplicates: {list(values)}")
    return values


def _range_values(raw: Mapping[str, Any], kind: type, path: str) -> tuple[Any, ...]:
    check_keys(raw, ("low", "high", "count", "log"), path)
    missing = [k for k in ("low", "high", "count") if k not in raw]
    if missing:
        raise ConfigError(path, f"a range needs low, high and count (missing {', '.join(missing)})")
    low, high = coerce(raw["low"], float, f"{path}.low"), coerce(raw["high"], float, f"{path}.high")
    count, log = coerce(raw["count"], int, f"{path}.count"), coerce(raw.get("log", False), bool, f"{path}.log")
    require(low <= high, f"{path}.low", f"low={low:g} is greater than high={high:g}")
    require(1 <= count <= 64, f"{path}.count", f"must be in [1, 64], got {count}")
    require(not log or low > 0, f"{path}.low", f"log=true needs low > 0, got low={low:g}")
    if count == 1:
        points = [low]
    elif log:
        points = [math.exp(math.log(low) + i * (math.log(high) - math.log(low)) / (count - 1)) for i in range(count)]
    else:
        points = [low + i * (high - low) / (count - 1) for i in range(count)]
    if kind is int:
        return tuple(dict.fromkeys(round(p) for p in points))
    return tuple(round(p, 6) for p in points)
