"""A study's stored attributes, typed (``StudyRecord``)."""

from __future__ import annotations

from typing import TypeVar

from hpo.errors import HpoError
from hpo.files import JsonObject
from hpo.records.keys import DATA_ATTR, FLOOR_ATTR, LADDER, NOISE_ATTR, REAL_GRID_ATTR, RUN_ATTR, WIDTHS
from hpo.records.payload import Stored, as_mapping, as_number
from hpo.records.payloads import DataSummary, FloorRecord, LadderPlan, WidthPlan

_Plan = TypeVar("_Plan", LadderPlan, WidthPlan)


class StudyRecord(Stored):
    """A study's stored attributes, typed."""

    def has(self, key: str) -> bool:
        return key in self.attrs

    def text(self, key: str) -> str | None:
        """A string-valued attribute (the spec, a companion's name, a pointer); None when absent."""
        raw = self.attrs.get(key)
        return str(raw) if raw else None

    def _plan(self, kind: type[_Plan], key: str) -> _Plan:
        plan = kind.read(self.attrs.get(key))
        if plan is None:
            raise HpoError(f"this study has no {key!r} attribute: it is not the companion that stores one")
        return plan

    @property
    def ladder_plan(self) -> LadderPlan:
        """A budget ladder's plan, which every budget ladder stores."""
        return self._plan(LadderPlan, LADDER)

    @property
    def width_plan(self) -> WidthPlan:
        """A width ladder's plan, which every width ladder stores."""
        return self._plan(WidthPlan, WIDTHS)

    @property
    def floor(self) -> FloorRecord | None:
        return FloorRecord.read(self.attrs.get(FLOOR_ATTR))

    @property
    def data(self) -> DataSummary | None:
        return DataSummary.read(self.attrs.get(DATA_ATTR))

    @property
    def real_grid(self) -> str | None:
        return self.text(REAL_GRID_ATTR)

    @property
    def run(self) -> JsonObject | None:
        """The ledger of the budgeted run (``hpo run``) whose search this study is; None for other studies."""
        return as_mapping(self.attrs.get(RUN_ATTR))

    @property
    def noise_sd(self) -> float | None:
        """The pooled sd of a score over the study's repeated pairs, once one was measured."""
        return as_number((as_mapping(self.attrs.get(NOISE_ATTR)) or {}).get("sd"))
