"""Searched parameters: float (optionally log or stepped), int (optionally stepped or log),
categorical. Each knows its bounds, whether it holds a value, and its grid."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from hpo.errors import ConfigError
from hpo.spec.typed import build

ParamValue: TypeAlias = float | int | str | bool | None  # what Optuna stores as a parameter (CategoricalChoiceType)
Params: TypeAlias = dict[str, ParamValue]  # a trial's parameters by name (searched, a baseline's, --set train.…)


@dataclass(frozen=True)
class FloatParam:
    low: float
    high: float
    log: bool = False
    step: float | None = None
    kind = "float"

    def __post_init__(self) -> None:
        _check_range(self.low, self.high, self.log, self.step)

    def check_contains(self, value: Any, path: str) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ConfigError(path, f"expected a number in the searched range [{self.low}, {self.high}], got {value!r}")
        if not self.low <= float(value) <= self.high:
            raise ConfigError(path, f"{value} is outside the searched range [{self.low}, {self.high}]")

    def grid_values(self, path: str) -> list[Any]:
        if self.step is None:
            raise ConfigError(
                path,
                "the grid sampler needs categorical, int, or stepped float parameters; add step: or use sampler: tpe",
            )
        n = round((self.high - self.low) / self.step)
        return [self.low + i * self.step for i in range(n + 1)]


@dataclass(frozen=True)
class IntParam:
    low: int
    high: int
    step: int = 1
    log: bool = False
    kind = "int"

    def __post_init__(self) -> None:
        _check_range(self.low, self.high, self.log, self.step)
        if self.log and self.step != 1:
            raise ConfigError("step", f"log=true needs step=1 (Optuna), got step={self.step}")

    def check_contains(self, value: Any, path: str) -> None:
        if not self.low <= int(value) <= self.high:
            raise ConfigError(path, f"{value} is outside the searched range [{self.low}, {self.high}]")

    def grid_values(self, path: str) -> list[Any]:
        return list(range(self.low, self.high + 1, self.step))


@dataclass(frozen=True)
class CategoricalParam:
    choices: tuple[Any, ...]
    kind = "categorical"

    def __post_init__(self) -> None:
        if not self.choices:
            raise ConfigError("choices", "must list at least one value")
        if not all(c is None or isinstance(c, (bool, int, float, str)) for c in self.choices):
            raise ConfigError("choices", f"values must be numbers, strings, booleans or null, got {list(self.choices)}")
        if len(set(map(repr, self.choices))) != len(self.choices):
            raise ConfigError("choices", f"has duplicates: {list(self.choices)}")

    def check_contains(self, value: Any, path: str) -> None:
        if value not in self.choices:
            raise ConfigError(path, f"{value!r} is not among the choices {list(self.choices)}")

    def grid_values(self, path: str) -> list[Any]:
        return list(self.choices)


Param = FloatParam | IntParam | CategoricalParam
PARAM_TYPES: dict[str, type[FloatParam] | type[IntParam] | type[CategoricalParam]] = {
    "float": FloatParam,
    "int": IntParam,
    "categorical": CategoricalParam,
}


def _check_range(low: float, high: float, log: bool, step: float | None) -> None:
    if low > high:
        raise ConfigError("low", f"low={low} is greater than high={high}")
    if log and low <= 0:
        raise ConfigError("low", f"log=true needs low > 0 (the log range cannot include 0), got low={low}")
    if step is not None and step <= 0:
        raise ConfigError("step", f"must be positive, got step={step}")


def build_param(body: Any, path: str) -> Param:
    if not isinstance(body, Mapping) or "type" not in body:
        raise ConfigError(path, "expected {type: float|int|categorical, ...}; fixed values belong in the train section")
    kind = body["type"]
    if not isinstance(kind, str) or kind not in PARAM_TYPES:
        raise ConfigError(f"{path}.type", f"unknown type {kind!r}; expected one of {', '.join(PARAM_TYPES)}")
    rest = {k: v for k, v in body.items() if k != "type"}
    param: Param = build(PARAM_TYPES[kind], rest, path)
    return param


def param_bounds(param: Param | None, fixed: Any) -> tuple[Any, Any]:
    """(smallest, largest) value the parameter can take; the fixed value when not searched."""
    if param is None:
        return fixed, fixed
    if isinstance(param, CategoricalParam):
        return min(param.choices), max(param.choices)
    return param.low, param.high


def candidates(param: Param) -> list[Any]:
    """The values that bound what a trial can draw: both ends of a range, or every choice."""
    if isinstance(param, CategoricalParam):
        return list(param.choices)
    return [param.low, param.high]
