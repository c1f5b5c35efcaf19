"""The report's budget-ladder section: score against kimg per configuration (spread over seeds), the
rank correlation and verdict per rung, the ladder's one sentence, stop verdicts and forecasts."""

from __future__ import annotations

from functools import partial
from html import escape

import optuna
import plotly.graph_objects as go

from hpo.analysis.record import LADDER_BY
from hpo.report import figures
from hpo.report.companions import companion_section, not_yet
from hpo.service.ladder import Ladder, copy_floor_text, ladder_rows, ladder_verdict


def ladder_figure(ladder: Ladder, metric: str) -> go.Figure:
    fig = go.Figure()
    baseline = {c.trial for c in ladder.rungs[0].configs if c.baseline}
    for number, curve in ladder.curves.items():
        name = f"#{number}" + (" (baseline)" if number in baseline else "")
        fig.add_trace(
            go.Scatter(
                x=[c.kimg for c in curve],
                y=[c.mean for c in curve],
                error_y={"type": "data", "array": [c.sd for c in curve], "visible": True},
                mode="lines+markers",
                name=name,
            )
        )
    for r in ladder.rungs:
        fig.add_vline(x=r.kimg, line_dash="dot", line_color="#bbb")
    if ladder.floor:
        fig.add_hline(y=ladder.floor["score"], line_dash="dash", line_color="#2a2", annotation_text="real images")
    fig.update_layout(xaxis_title="kimg (log)", yaxis_title=metric, xaxis_type="log")
    return fig


def ladder_html(study: optuna.Study, storage: optuna.storages.BaseStorage, metric: str) -> str:
    absent = not_yet(
        "No budget ladder yet: nothing says how this ranking carries over to longer runs.",
        f"hpo confirm {study.study_name} --budgets 1,4,16",
        "one run per configuration and seed gives every rung",
    )
    body = partial(ladder_body, study, metric=metric)
    return companion_section(study, storage, LADDER_BY, body, absent=absent, kind="ladder")


def ladder_body(study: optuna.Study, companion: optuna.Study, *, metric: str) -> str:
    ladder = ladder_verdict(study, companion)
    head = "".join(f"<th>{r.multiple}× ({r.kimg:g} kimg)</th>" for r in ladder.rungs)
    rows = [
        f"<tr><td>{escape(label)}</td><td>{value:.4g}</td>{''.join(f'<td>{c}</td>' for c in cells)}</tr>"
        for label, value, cells in ladder_rows(ladder)
    ]
    per_rung = "".join(
        f"<li>{r.multiple}×: rank correlation "
        f"{f'{r.rank_correlation:+.2f}' if r.rank_correlation is not None else 'n/a (fewer than 3)'}; "
        f"{escape(r.text)}</li>"
        for r in ladder.rungs
    )
    stops = "".join(
        f"<li>#{n}: {escape(v.text)}"
        + (f"<br>{escape(ladder.forecasts[n].text)}" if n in ladder.forecasts else "")
        + "</li>"
        for n, v in ladder.stops.items()
    )
    floor = ""
    if ladder.floor:
        floor = (
            f"<p class='note'>Real held-out images score {ladder.floor['score']:.4g} against the same training "
            f"reference ({ladder.floor.get('num_images', 0):g} images; fewer images score higher). A model well "
            "below that matches the training images more closely than new real images do: read its copy share. Up "
            f"to {copy_floor_text(ladder.floor)} of the held-out images look like copies of a training image, so "
            "only copy shares above that count.</p>"
        )
    return (
        f"<p><b>{escape(ladder.summary)}</b></p><table><tr><th>configuration</th><th>in the study</th>{head}</tr>"
        f"{''.join(rows)}</table><p class='note'>Mean ± sd over seeds; {ladder.finished} of {ladder.expected} runs "
        f"finished.</p><ul>{per_rung}</ul>"
        + figures.figure_html(ladder_figure(ladder, metric), f"{metric} against kimg, mean ± sd over seeds")
        + floor
        + f"<p><b>When to stop</b> (seed-mean curve of each configuration):</p><ul>{stops}</ul>"
    )
