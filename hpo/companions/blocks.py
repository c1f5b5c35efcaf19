"""The typed pieces a companion's verdict is made of: the one presentation of a companion. A companion
says what its verdict holds; :mod:`hpo.report.companions` renders the blocks as the report's section
(and escapes every string), :func:`blocks_text` as the text ``hpo confirm`` prints. The numbers a
script reads come from the reading's ``json()``, the verdict's data, not from these words."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import plotly.graph_objects as go

from hpo.analysis.tables import table


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


def block_text(block: Block) -> str | None:
    """One block as terminal text; a chart has none (the report, whose path ``hpo confirm`` prints,
    draws it)."""
    if isinstance(block, Paragraph):
        return f"{block.label} {block.text}" if block.label else block.text
    if isinstance(block, Table):
        return table(block.rows, block.header)
    if isinstance(block, Items):
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, NextStep):
        return f"next: {block.command} ({block.why})"
    if isinstance(block, Chart):
        return None
    raise TypeError(f"no text for block {block!r}")


def blocks_text(blocks: Sequence[Block]) -> str:
    """The blocks as ``hpo confirm`` prints them, one paragraph each."""
    return "\n\n".join(text for text in map(block_text, blocks) if text is not None)
