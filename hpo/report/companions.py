"""How a companion's report section looks: the typed blocks each kind's reading gives
(:mod:`hpo.companions.blocks`), as HTML. Formats only: every verdict is the kind's, read by
:func:`hpo.report.build.build`."""

from __future__ import annotations

from html import escape

from hpo.companions.blocks import Block, Chart, Items, NextStep, Paragraph, Table
from hpo.report import figures


def next_step(text: str) -> str:
    return f"<p class='next'><b>Next:</b> {escape(text)}</p>"


def paragraph_html(p: Paragraph) -> str:
    label = f"<b>{escape(p.label)}</b> " if p.label else ""
    if p.style == "lead":
        return f"<p>{label}<b>{escape(p.text)}</b></p>"
    css = " class='note'" if p.style == "note" else ""
    return f"<p{css}>{label}{escape(p.text)}</p>"


def table_html(t: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in t.header)
    rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    return f"<table><tr>{head}</tr>{rows}</table>"


def block_html(block: Block) -> str:
    if isinstance(block, Paragraph):
        return paragraph_html(block)
    if isinstance(block, Table):
        return table_html(block)
    if isinstance(block, Items):
        return "<ul>" + "".join(f"<li>{escape(i)}</li>" for i in block.items) + "</ul>"
    if isinstance(block, Chart):
        return figures.figure_html(block.figure, block.caption)
    if isinstance(block, NextStep):
        return next_step(f"run `{block.command}` ({block.why}).")
    raise TypeError(f"no HTML for report block {block!r}")


def blocks_html(blocks: list[Block]) -> str:
    return "".join(block_html(b) for b in blocks)
