"""Mapping → frozen dataclass, with errors that name the key path.

YAML stops here: everything past this module sees typed, validated, frozen objects.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from hpo.errors import ConfigError

T = TypeVar("T")


def did_you_mean(name: str, valid: typing.Iterable[str]) -> str:
    """`` (did you mean 'lr'?)`` when a close valid name exists, else ``''``."""
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def check_keys(mapping: Mapping[str, Any], valid: typing.Iterable[str], path: str) -> None:
    """Fail on the first key of ``mapping`` that is not in ``valid``."""
    valid = list(valid)
    for key in mapping:
        if key not in valid:
            where = f"{path}.{key}" if path else str(key)
            raise ConfigError(where, f"unknown key{did_you_mean(str(key), valid)}; valid keys: {', '.join(valid)}")


def field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def build(cls: type[T], mapping: Any, path: str) -> T:
    """Build dataclass ``cls`` from ``mapping``: unknown keys and wrong types are ConfigErrors."""
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, Mapping):
        raise ConfigError(path, f"expected a mapping of settings, got {type(mapping).__name__} {mapping!r}")
    check_keys(mapping, field_names(cls), path)
    required = [
        f.name
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in mapping
    ]
    if required:
        raise ConfigError(f"{path}.{required[0]}" if path else required[0], "is required")
    hints = get_type_hints(cls)
    values = {key: coerce(value, hints[key], f"{path}.{key}" if path else key) for key, value in mapping.items()}
    try:
        return cls(**values)
    except ConfigError as err:
        raise ConfigError(f"{path}.{err.key}" if path else err.key, err.message) from None


def coerce(value: Any, hint: Any, path: str) -> Any:
    """Check ``value`` against the type hint ``hint``; convert lists to tuples and ints to floats."""
    origin = get_origin(hint)
    if origin is Literal:
        choices = get_args(hint)
        if value not in choices:
            names = ", ".join(str(c) for c in choices)
            raise ConfigError(
                path, f"unknown value {value!r}{did_you_mean(str(value), map(str, choices))}; expected one of {names}"
            )
        return value
    if origin in (Union, types.UnionType):
        args = get_args(hint)
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(value, arg, path)
            except ConfigError:
                continue
        raise ConfigError(path, f"expected {_describe(hint)}, got {value!r}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(path, f"expected a list, got {value!r}")
        item = get_args(hint)[0] if get_args(hint) else Any  # tuple[X, ...]
        return tuple(coerce(v, item, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise ConfigError(path, f"expected a mapping of names to values, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return build(hint, value, path)
    if hint is Any:
        return value
    if hint is float:
        return _finite_float(value, path)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is bool and isinstance(value, bool):
        return value
    if hint is str and isinstance(value, str):
        return value
    raise ConfigError(path, f"expected {_describe(hint)}, got {value!r}")


def _finite_float(value: Any, path: str) -> float:
    """Numbers, and strings YAML 1.1 leaves unparsed (``1e-3`` without a dot); never inf or NaN."""
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None:
        raise ConfigError(path, f"expected a number, got {value!r}")
    if not math.isfinite(number):
        raise ConfigError(path, f"expected a finite number, got {value!r}")
    return number


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(hint))
    if origin is tuple:
        return "a list"
    if hint is type(None):
        return "null"
    return {float: "a number", int: "an integer", bool: "true or false", str: "a string"}.get(hint, str(hint))


def to_plain(obj: Any) -> Any:
    """A dataclass tree as plain JSON-able values (tuples become lists)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj
