"""The report's Plotly figures: importances with their bootstrap intervals, learning curves, the
per-level validation profile, the sampling sweep heatmaps, and Optuna's own plots."""

from __future__ import annotations

import html
import logging
import warnings
from collections.abc import Mapping, Sequence

import optuna
import plotly.graph_objects as go
from optuna.trial import FrozenTrial, TrialState
from plotly.colors import qualitative

from hpo.analysis.frontier import Frontier
from hpo.analysis.importance import Importances
from hpo.records import PRUNING_METRIC, ComboScore, TrialRecord, named_study, params_of
from hpo.report.bundle import CARTESIAN_TRACES, defer
from hpo.report.data import SweepRows, grid_statistic, relative_sweep, row_label, sweep_grid

log = logging.getLogger("hpo.report")
STOPPED = (TrialState.PRUNED, TrialState.FAIL)
PALETTE = qualitative.Dark24  # 24 distinct colours; a study's trials take them in order of their number
Colours = Mapping[int, str]


def trial_colours(trials: Sequence[FrozenTrial]) -> dict[int, str]:
    """One colour per trial, the same in every chart of the report."""
    return {t.number: PALETTE[i % len(PALETTE)] for i, t in enumerate(sorted(trials, key=lambda t: t.number))}


def points_in(fig: go.Figure) -> int:
    """Data points over all traces (a heatmap's filled cells)."""
    total = 0
    for trace in fig.data:
        z = getattr(trace, "z", None)
        if z is not None:
            total += sum(1 for row in z for v in row if v is not None)
        else:
            total += len(trace.x if trace.x is not None else trace.y if trace.y is not None else ())
    return total


def figure_html(fig: go.Figure, title: str, *, empty: str = "no trial has reported these values yet") -> str:
    """The figure, or a sentence instead of a chart with fewer than 2 points."""
    outside = {trace.type for trace in fig.data} - CARTESIAN_TRACES
    if outside:
        raise ValueError(f"trace types {sorted(outside)} are not in the report's plotly.js bundle (report/bundle.py)")
    if points_in(fig) < 2:
        return f"<p><b>{html.escape(title)}</b>: not drawn, {html.escape(empty)}.</p>"
    fig.update_layout(
        title=None, margin={"l": 50, "r": 20, "t": 30, "b": 40}, height=420, template="plotly_white", autosize=True
    )
    fig.update_layout(width=None)
    body = fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True})
    return f'<figure class="plot"><figcaption>{html.escape(title)}</figcaption>{defer(body)}</figure>'


def optuna_figure(name: str, study: optuna.Study, **kwargs: object) -> go.Figure | None:
    """An optuna.visualization figure, or None when the study cannot support it yet."""
    plot = {
        "history": optuna.visualization.plot_optimization_history,
        "slice": optuna.visualization.plot_slice,
        "contour": optuna.visualization.plot_contour,
    }[name]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fig = plot(named_study(study), **kwargs)  # type: ignore[operator]
    except (ValueError, RuntimeError) as err:
        log.info("no %s plot: %s", name, err)
        return None
    return fig if fig.data else None


def importance_figure(imp: Importances) -> go.Figure:
    """fANOVA's bootstrap median with its 80 % interval (which contains it), beside PED-ANOVA."""
    names = sorted(imp.fanova, key=lambda k: imp.fanova[k])
    middle = {n: imp.medians.get(n, imp.fanova[n]) for n in names}
    lows = [middle[n] - imp.intervals.get(n, (middle[n], 0))[0] for n in names]
    highs = [imp.intervals.get(n, (0, middle[n]))[1] - middle[n] for n in names]
    fig = go.Figure()
    fig.add_bar(
        y=names,
        x=[middle[n] for n in names],
        orientation="h",
        name="fANOVA (bootstrap median, 80% interval)",
        error_x={"type": "data", "symmetric": False, "array": highs, "arrayminus": lows},
    )
    fig.add_bar(y=names, x=[imp.default.get(n, 0.0) for n in names], orientation="h", name="PED-ANOVA (Optuna default)")
    fig.update_layout(barmode="group", xaxis_title="importance (share of the explained variation)")
    return fig


def trial_name(t: FrozenTrial) -> str:
    """``#3 pruned at 4 kimg``, ``#1 known start complete``: the legend's and the hover's name of a trial."""
    state, points = t.state.name.lower(), TrialRecord.current(t).points
    where = f" at {points[-1].kimg:.3g} kimg" if t.state in STOPPED and points else ""
    start = TrialRecord.of(t).baseline_label  # "known start", "by hand"; "baseline" in older studies
    return f"#{t.number}{f' {start}' if start else ''} {state}{where}"


def curve_figure(trials: Sequence[FrozenTrial], colours: Colours) -> go.Figure:
    """The pruning metric at each evaluation point; dotted and ending in a ✕ (of the trial's own
    colour, named on hover) where a trial was stopped."""
    fig = go.Figure()
    for t in trials:
        points = TrialRecord.current(t).points
        if not points:
            continue
        x = [p.kimg for p in points]
        y = [p.entry.val_rel for p in points]
        stopped, name, colour = t.state in STOPPED, trial_name(t), colours.get(t.number)
        hover = f"{name}: %{{y:.3g}}<extra></extra>"
        fig.add_scatter(
            x=x, y=y, mode="lines+markers", name=name, legendgroup=name, hovertemplate=hover,
            line={"dash": "dot" if stopped else "solid", "width": 1 if stopped else 2, "color": colour},
            opacity=0.7 if stopped else 1,
        )  # fmt: skip
        if stopped:
            fig.add_scatter(
                x=[x[-1]], y=[y[-1]], mode="markers", marker={"symbol": "x", "size": 11, "color": colour},
                showlegend=False, legendgroup=name, name=name, hovertemplate=hover,
            )  # fmt: skip
    fig.update_layout(xaxis_title="kimg (thousands of images seen)", yaxis_title=f"{PRUNING_METRIC} (lower is better)")
    fig.update_yaxes(type="log")
    return fig


def level_figure(trials: Sequence[FrozenTrial], colours: Colours) -> go.Figure:
    """Where along the noise range each model is weak: the error ratio per log-SNR level at its
    last evaluation point (1 = no better than the per-pixel linear denoiser)."""
    fig = go.Figure()
    for t in trials:
        points = TrialRecord.current(t).points
        if not points:
            continue
        levels = points[-1].entry.per_level(PRUNING_METRIC)
        fig.add_scatter(
            x=[lam for lam, _ in levels], y=[v for _, v in levels], mode="lines+markers", name=trial_name(t),
            line={"color": colours.get(t.number)},
        )  # fmt: skip
    fig.update_layout(xaxis_title="log-SNR level (left: noisy, right: nearly clean)", yaxis_title="error ratio")
    return fig


def sweep_figure(scores: Sequence[ComboScore], metric: str, rows: SweepRows = "steps") -> go.Figure:
    """The score over guidance × sampler steps, or guidance × EMA length (``rows``)."""
    scales, values, grid, stage = sweep_grid(scores, rows)
    metric = {"kid": "KID", "pca": f"{metric}, PCA"}.get(grid_statistic(scores), metric)
    name = {"steps": "steps", "ema_sigma_rel": "EMA σ_rel"}[rows]
    fig = go.Figure(
        go.Heatmap(
            z=grid, x=[f"{w:g}" for w in scales], y=[row_label(v) for v in values], colorscale="Viridis_r",
            colorbar={"title": metric}, texttemplate="%{z:.3g}", hovertemplate=f"w=%{{x}} {name}=%{{y}}: %{{z:.4g}}",
        )
    )  # fmt: skip
    title = {"steps": "sampler steps", "ema_sigma_rel": "EMA length σ_rel"}[rows]
    fig.update_layout(xaxis_title="guidance scale", yaxis_title=f"{title} ({stage} stage)")
    return fig


def frontier_figure(frontiers: Sequence[Frontier], floor: float | None) -> go.Figure:
    """Quality against sampling cost: each trial's best score within each number of network
    evaluations per image, one line per trial (completed combinations: the trials' own statistic),
    the real images' score dashed."""
    fig = go.Figure()
    for f in frontiers:
        fig.add_trace(
            go.Scatter(
                x=[p.nfe for p in f.points], y=[p.value for p in f.points], mode="lines+markers", name=f"#{f.trial}",
                line_shape="hv", text=[p.sampling.words for p in f.points],
                hovertemplate="%{x} NFE: %{y:.4g} (%{text})<extra></extra>",
            )
        )  # fmt: skip
    if floor is not None and frontiers:
        fig.add_hline(y=floor, line_dash="dash", line_color="#2a2", annotation_text="real images")
    statistic = frontiers[0].statistic if frontiers else ""
    fig.update_layout(xaxis_title="network evaluations per image (NFE)", yaxis_title=statistic)
    return fig


def relative_sweep_figure(sweeps: Sequence[Sequence[ComboScore]]) -> go.Figure:
    """Across trials: each combination's rank within its trial's sweep, averaged (1 = always best)."""
    rel = relative_sweep(sweeps)
    steps, scales = sorted({n for n, _ in rel}), sorted({w for _, w in rel})
    z = [[rel.get((n, w)) for w in scales] for n in steps]
    fig = go.Figure(
        go.Heatmap(
            z=z, x=[f"{w:g}" for w in scales], y=[n.label for n in steps], colorscale="Viridis_r",
            colorbar={"title": "mean rank"}, texttemplate="%{z:.2g}",
        )
    )  # fmt: skip
    fig.update_layout(xaxis_title="guidance scale", yaxis_title="sampler steps")
    return fig


def scatter_figure(trials: Sequence[FrozenTrial], param: str, metric: str, colours: Colours) -> go.Figure | None:
    named = [(t, params_of(t)) for t in trials if t.value is not None]
    points = [(t, params[param]) for t, params in named if param in params]
    if len(points) < 2:
        return None
    fig = go.Figure(
        go.Scatter(
            x=[p for _, p in points], y=[t.value for t, _ in points], mode="markers",
            marker={"size": 10, "color": [colours.get(t.number) for t, _ in points]},
            text=[trial_name(t) for t, _ in points],
        )
    )  # fmt: skip
    fig.update_layout(xaxis_title=param, yaxis_title=metric)
    return fig
