"""A study's stored attributes, typed (``StudyRecord``)."""

from __future__ import annotations

from typing import Any

from hpo.errors import HpoError
from hpo.records.keys import DATA_ATTR, FLOOR_ATTR, NOISE_ATTR, REAL_GRID_ATTR, RUN_ATTR
from hpo.records.payload import Stored, as_mapping, as_number


class StudyRecord(Stored):
    """A study's stored attributes, typed."""

    def has(self, key: str) -> bool:
        return key in self.attrs

    def text(self, key: str) -> str | None:
        """A string-valued attribute (the spec, a companion's name, a pointer); None when absent."""
        raw = self.attrs.get(key)
        return str(raw) if raw else None

    def mapping(self, key: str) -> dict[str, Any] | None:
        """A dict-valued attribute (data, floor, ladder or width plan); None when absent."""
        return as_mapping(self.attrs.get(key))

    def plan(self, key: str) -> dict[str, Any]:
        """A companion's plan (``LADDER``, ``WIDTHS``), which its kind of companion always stores."""
        plan = self.mapping(key)
        if plan is None:
            raise HpoError(f"this study has no {key!r} attribute: it is not the companion that stores one")
        return plan

    @property
    def floor(self) -> dict[str, Any] | None:
        return self.mapping(FLOOR_ATTR)

    @property
    def data(self) -> dict[str, Any] | None:
        return self.mapping(DATA_ATTR)

    @property
    def real_grid(self) -> str | None:
        return self.text(REAL_GRID_ATTR)

    @property
    def run(self) -> dict[str, Any] | None:
        """The ledger of the budgeted run (``hpo run``) whose search this study is; None for other studies."""
        return self.mapping(RUN_ATTR)

    @property
    def noise_sd(self) -> float | None:
        """The pooled sd of a score over the study's repeated pairs, once one was measured."""
        return as_number((self.mapping(NOISE_ATTR) or {}).get("sd"))
