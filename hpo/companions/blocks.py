"""The typed pieces a companion's report section is made of. A companion says what its section
holds; :mod:`hpo.report.render` decides how it looks (and escapes every string)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import plotly.graph_objects as go


@dataclass(frozen=True)
class Paragraph:
    text: str
    style: Literal["plain", "lead", "note"] = "plain"  # lead: the verdict, in bold; note: small print
    label: str = ""  # a bold lead-in before the text


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Items:
    items: list[str]


@dataclass(frozen=True)
class Chart:
    figure: go.Figure
    caption: str


@dataclass(frozen=True)
class NextStep:
    """What to run next: the command and why."""

    command: str
    why: str


Block = Paragraph | Table | Items | Chart | NextStep
