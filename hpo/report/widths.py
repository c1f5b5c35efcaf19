"""The report's width-ladder section: score against lr per width for the study's winner, the lr
optimum per width with its tied interval, the fitted rule lr ∝ width^α, and the verdicts in words."""

from __future__ import annotations

import math
from functools import partial
from html import escape

import optuna
import plotly.graph_objects as go

from hpo.analysis.record import WIDTHS_BY
from hpo.report import figures
from hpo.report.companions import companion_section, not_yet
from hpo.service.width_ladder import ConfigTransfer, WidthLadder, width_verdict


def transfer_figure(c: ConfigTransfer, metric: str) -> go.Figure:
    """Seed-mean score against lr (log), one line per width, the optimum marked."""
    if c.result is None:
        raise ValueError(f"trial {c.trial}'s width ladder is not finished: nothing to draw")
    fig = go.Figure()
    for o in c.result.optima:
        finite = [m for m in o.means if math.isfinite(m.mean)]
        fig.add_trace(
            go.Scatter(
                x=[m.lr for m in finite],
                y=[m.mean for m in finite],
                error_y={"type": "data", "array": [2 * m.standard_error for m in finite], "visible": True},
                mode="lines+markers",
                name=f"width {o.width}",
            )
        )
    fig.update_layout(xaxis_title="learning rate (log)", yaxis_title=metric, xaxis_type="log")
    return fig


def optima_table(c: ConfigTransfer) -> str:
    if c.result is None:
        raise ValueError(f"trial {c.trial}'s width ladder is not finished: no optima")
    rows = "".join(
        f"<tr><td>{o.width}</td><td>{o.lr:.3g}{f' ({o.edge} edge)' if o.edge else ''}</td>"
        f"<td>{o.low:.3g}..{o.high:.3g}</td><td>{o.best.mean:.4g}</td><td>×{r:.2g}</td></tr>"
        for o, r in zip(c.result.optima, c.result.residuals, strict=True)
    )
    return (
        "<table><tr><th>width (base channels)</th><th>lr optimum</th><th>lrs the seeds cannot separate</th>"
        f"<th>score at the best lr</th><th>off the fit</th></tr>{rows}</table>"
    )


def config_html(c: ConfigTransfer, metric: str) -> str:
    label = f"Trial {c.trial}" + (" (baseline)" if c.baseline else "")
    head = f"<p><b>{escape(label)}</b>: {escape(c.text)}</p>"
    if c.result is None:
        return head
    fit = f"<p class='note'>Fitted: lr ∝ width^{c.result.alpha:+.2f}.</p>"
    title = f"{metric} against lr per width, mean ± 2 SE over seeds"
    return head + optima_table(c) + fit + figures.figure_html(transfer_figure(c, metric), title)


def ladder_body(ladder: WidthLadder, metric: str) -> str:
    rungs = "".join(f"<li>{escape(r.text)}</li>" for r in ladder.rungs)
    return (
        f"<p><b>{escape(ladder.summary)}</b></p>"
        f"<p class='note'>Parameterisation: {escape(ladder.parameterization)}; {ladder.finished} of "
        f"{ladder.expected} runs finished; each point is the mean over fresh seeds (error bars 2 SE).</p>"
        + "".join(config_html(c, metric) for c in ladder.transfers)
        + f"<ul>{rungs}</ul>"
    )


def widths_html(study: optuna.Study, storage: optuna.storages.BaseStorage, metric: str) -> str:
    absent = not_yet(
        "No width ladder yet: nothing says whether this study's learning rate holds on a wider network.",
        f"hpo confirm {study.study_name} --widths 0.5,1,2",
        "the top configurations over an lr grid at each width; docs/transfer.md",
    )
    body = partial(widths_body, study, metric=metric)
    return companion_section(study, storage, WIDTHS_BY, body, absent=absent, kind="width-ladder")


def widths_body(study: optuna.Study, companion: optuna.Study, *, metric: str) -> str:
    return ladder_body(width_verdict(study, companion), metric)
