"""The typed read of stored attributes: absent or malformed values read as None, the base of the views
(:class:`Stored`) that ``TrialRecord`` and ``StudyRecord`` build on, and the base of every payload stored
inside an attribute (:class:`Payload`: its dict derived from its fields)."""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, Literal, Protocol, TypeVar, Union, get_args, get_origin, get_type_hints

from hpo.errors import HpoError
from hpo.files import JsonObject


class HasAttrs(Protocol):
    @property
    def user_attrs(self) -> dict[str, Any]: ...


def as_number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def as_mapping(value: object) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, dict) else None


_S = TypeVar("_S", bound="Stored")


@dataclass(frozen=True)
class Stored:
    attrs: Mapping[str, Any]

    @classmethod
    def of(cls: type[_S], owner: HasAttrs) -> _S:
        """The attributes of a trial or study (frozen or live)."""
        return cls(owner.user_attrs)


_P = TypeVar("_P", bound="Payload")


@dataclass(frozen=True)
class Payload:
    """A value stored inside an attribute (a floor, a plan, a verdict), typed. ``as_dict`` is derived
    from the fields (a field that is None is left out; tuples are written as lists); ``from_dict``
    reads them back, accepting a field's former key (``FORMER``) and ignoring keys it does not know, so
    that what an older or newer release stored still reads."""

    FORMER: ClassVar[Mapping[str, str]] = {}  # a key stored by an earlier release → its field
    NESTED: ClassVar[Mapping[str, type[Payload]]] = {}  # a field that is a payload itself → its type
    KEEP_NONE: ClassVar[bool] = False  # write a field that is None as null (what JSON readers already expect)

    def as_dict(self) -> JsonObject:
        out: JsonObject = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Payload):
                value = value.as_dict()
            if value is not None or self.KEEP_NONE:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls: type[_P], raw: Mapping[str, Any]) -> _P:
        """``raw`` as this payload; an HpoError names a required field it lacks."""
        known = {f.name: f for f in fields(cls)}
        values = {name: value for key, value in raw.items() if (name := cls.FORMER.get(key, key)) in known}
        missing = [
            name
            for name, f in known.items()
            if name not in values and f.default is MISSING and f.default_factory is MISSING
        ]
        if missing:
            raise HpoError(f"a stored {cls.__name__} lacks {', '.join(missing)}; it was not written by hpo")
        for name, kind in cls.NESTED.items():
            if isinstance(values.get(name), Mapping):
                values[name] = kind.from_dict(values[name])
        hints = field_types(cls)
        wrong = [name for name, value in values.items() if name in hints and not fits(value, hints[name])]
        if wrong:
            found = ", ".join(f"{name} = {values[name]!r}" for name in wrong)
            raise HpoError(f"a stored {cls.__name__} has {found}, not of the field's type; it was not written by hpo")
        return cls(**{name: tuple(v) if isinstance(v, list) else v for name, v in values.items()})

    @classmethod
    def read(cls: type[_P], raw: object) -> _P | None:
        """``raw`` as this payload; None when it is absent, not a mapping or lacks a required field."""
        if not isinstance(raw, Mapping):
            return None
        try:
            return cls.from_dict(raw)
        except (HpoError, TypeError):
            return None


_HINTS: dict[type, dict[str, object]] = {}


def field_types(cls: type) -> dict[str, object]:
    """A payload's field annotations, resolved once (empty where one cannot be: nothing is checked then)."""
    if cls not in _HINTS:
        try:
            _HINTS[cls] = get_type_hints(cls)
        except (NameError, TypeError):
            _HINTS[cls] = {}
    return _HINTS[cls]


def fits(value: object, hint: object) -> bool:
    """Whether a stored JSON value fits a field annotation: numbers for int and float (never a bool), a
    list for a tuple (each element checked), one of a Literal's values, a mapping for a Mapping, a nested
    payload read as one; what this does not know (Any) fits."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        return any(fits(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if hint in (int, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint in (str, bool):
        return type(value) is hint
    if origin is Literal:
        return value in args
    if origin is tuple:
        return isinstance(value, (list, tuple)) and all(fits(v, args[0]) for v in value)
    if origin is Mapping or origin is dict:
        return isinstance(value, Mapping)
    if isinstance(hint, type) and issubclass(hint, Payload):
        return isinstance(value, hint)  # a nested payload, read by NESTED when it was a mapping
    return True
