"""The typed read of stored attributes: absent or malformed values read as None, and the base of the
views (:class:`Stored`) that ``TrialRecord`` and ``StudyRecord`` build on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar


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
