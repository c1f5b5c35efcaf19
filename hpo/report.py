"""``hpo report``: one self-contained HTML file (Plotly inlined, images embedded) that says which
hyperparameters mattered, whether models learned, what the best ones generate, and why trials failed.
Every string from the study is HTML-escaped."""

from __future__ import annotations

import base64
import datetime
import html
import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import optuna
import plotly.graph_objects as go
from optuna.artifacts import FileSystemArtifactStore
from optuna.trial import FrozenTrial, TrialState
from plotly.offline import get_plotlyjs

from hpo.report_data import FailureGroup, Importances, Summary, failure_groups, importances, summarise

log = logging.getLogger("hpo.report")
e = html.escape


def figure_html(fig: go.Figure, title: str) -> str:
    fig.update_layout(title=None, margin={"l": 50, "r": 20, "t": 30, "b": 40}, height=420, template="plotly_white")
    body = fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False})
    return f'<figure class="plot"><figcaption>{e(title)}</figcaption>{body}</figure>'


def optuna_figure(name: str, study: optuna.Study, **kwargs: object) -> go.Figure | None:
    """An optuna.visualization figure, or None when the study cannot support it yet."""
    plot = {
        "history": optuna.visualization.plot_optimization_history,
        "parallel": optuna.visualization.plot_parallel_coordinate,
        "slice": optuna.visualization.plot_slice,
        "contour": optuna.visualization.plot_contour,
    }[name]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fig = plot(study, **kwargs)  # type: ignore[operator]
    except (ValueError, RuntimeError) as err:
        log.info("no %s plot: %s", name, err)
        return None
    return fig if fig.data else None


def importance_figure(imp: Importances) -> go.Figure:
    names = sorted(imp.default, key=lambda k: imp.default[k])
    fig = go.Figure()
    fig.add_bar(y=names, x=[imp.default[n] for n in names], orientation="h", name="PED-ANOVA (Optuna default)")
    fig.add_bar(y=names, x=[imp.fanova.get(n, 0.0) for n in names], orientation="h", name="fANOVA")
    fig.update_layout(barmode="group", xaxis_title="importance")
    return fig


def curve_figure(trials: Sequence[FrozenTrial]) -> go.Figure:
    fig = go.Figure()
    for t in trials:
        curve = t.user_attrs.get("curve") or {}
        if not curve:
            continue
        points = sorted(curve.items(), key=lambda kv: int(kv[0]))
        x = [p["kimg"] for _, p in points]
        y = [p["val_loss"] for _, p in points]
        pruned = t.state != TrialState.COMPLETE
        fig.add_scatter(
            x=x,
            y=y,
            mode="lines+markers",
            name=f"#{t.number} {t.state.name.lower()}",
            line={"dash": "dot" if pruned else "solid", "width": 1 if pruned else 2},
            opacity=0.6 if pruned else 1,
        )
        if pruned:
            fig.add_scatter(
                x=[x[-1]],
                y=[y[-1]],
                mode="markers",
                marker={"symbol": "x", "size": 11, "color": "crimson"},
                showlegend=False,
                name=f"#{t.number} stopped",
            )
    fig.update_layout(
        xaxis_title="kimg (thousands of images seen)", yaxis_title="validation metric (v-space MSE)", yaxis_type="log"
    )
    return fig


def scatter_figure(trials: Sequence[FrozenTrial], param: str, metric: str) -> go.Figure | None:
    points = [(t.params[param], t.value) for t in trials if param in t.params and t.value is not None]
    if len(points) < 2:
        return None
    fig = go.Figure(
        go.Scatter(
            x=[p for p, _ in points],
            y=[v for _, v in points],
            mode="markers",
            marker={"size": 10},
            text=[f"#{t.number}" for t in trials if param in t.params and t.value is not None],
        )
    )
    fig.update_layout(xaxis_title=param, yaxis_title=metric)
    return fig


def image_tag(store: FileSystemArtifactStore | None, artifact_id: object, alt: str) -> str:
    if store is None or not isinstance(artifact_id, str):
        return f'<div class="missing">{e(alt)}: no image</div>'
    try:
        with store.open_reader(artifact_id) as reader:
            data = base64.b64encode(reader.read()).decode()
    except Exception:
        return f'<div class="missing">{e(alt)}: image not found in the artifact store</div>'
    return f'<img src="data:image/png;base64,{data}" alt="{e(alt)}" title="{e(alt)}">'


def params_text(t: FrozenTrial) -> str:
    return ", ".join(f"{e(str(k))}={e(_fmt(v))}" for k, v in sorted(t.params.items()))


def _fmt(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def summary_html(s: Summary) -> str:
    counts = " · ".join(f"{v} {e(k)}" for k, v in s.counts.items() if v)
    best = "no complete trial yet"
    if s.best is not None:
        kid = s.best.user_attrs.get("kid")
        kid_text = f", KID {kid:.4g}" if isinstance(kid, (int, float)) else ""
        best = f"trial #{s.best.number}: {e(s.metric_name)} {s.best.value:.4g}{kid_text} with {params_text(s.best)}"
    note = (
        "classifier-FID: FID on features of a CNN trained on this dataset — not comparable with Inception FID."
        if s.metric_name == "classifier-FID"
        else "FID: clean-fid (clean mode, Inception); not numerically equal to the TensorFlow FID quoted in papers."
    )
    return (
        f"<ul><li><b>Best</b>: {best}</li><li><b>Trials</b>: {counts} (study size {s.n_trials})</li>"
        f"<li><b>Compute</b>: {s.compute_seconds / 3600:.2f} h of worker time; pruning saved about "
        f"{s.saved_seconds / 3600:.2f} h</li><li><b>Metric</b>: {e(note)}</li></ul>"
    )


def failures_html(groups: list[FailureGroup]) -> str:
    if not groups:
        return "<p>No trial failed or was pruned.</p>"
    rows = "".join(
        f"<tr><td>{e(g.reason)}</td><td>{len(g.trials)}</td><td>{e(', '.join(f'#{n}' for n in g.trials))}</td>"
        f"<td>{e('; '.join(g.shared)) or '—'}</td></tr>"
        for g in groups
    )
    return (
        "<table><tr><th>reason</th><th>trials</th><th>which</th><th>parameter ranges they share</th></tr>"
        f"{rows}</table><p class='note'>worker_lost: the worker stopped sending heartbeats and the trial was "
        "retried; pruned_by_median: validation metric above the median of earlier trials at the same point.</p>"
    )


def _value(t: FrozenTrial) -> float:
    return float(t.value) if t.value is not None else float("inf")


def samples_html(trials: Sequence[FrozenTrial], store: FileSystemArtifactStore | None, metric: str) -> str:
    complete = sorted((t for t in trials if t.state == TrialState.COMPLETE and t.value is not None), key=_value)
    shown = complete[:3] + [t for t in complete[3:] if t.user_attrs.get("baseline")]
    cells = "".join(
        f"<div class='cell'>{image_tag(store, t.user_attrs.get('samples'), f'trial {t.number}')}"
        f"<p>#{t.number}{' (baseline)' if t.user_attrs.get('baseline') else ''}: {e(metric)} {t.value:.4g}<br>"
        f"<small>{params_text(t)}</small></p></div>"
        for t in shown
    )
    out = f"<h3>Best trials and the baseline</h3><div class='grid'>{cells or '<p>No complete trial yet.</p>'}</div>"
    if complete:
        best = complete[0]
        grids = best.user_attrs.get("grids") or {}
        curve = best.user_attrs.get("curve") or {}
        steps = "".join(
            f"<div class='cell'>{image_tag(store, grids[k], f'evaluation {k}')}<p>evaluation {e(k)}"
            f" at {curve.get(k, {}).get('kimg', 0):.3g} kimg</p></div>"
            for k in sorted(grids, key=int)
        )
        out += f"<h3>Trial #{best.number} while it trained</h3><div class='grid'>{steps}</div>"
    return out


STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}
.grid{display:flex;flex-wrap:wrap;gap:1em}.cell{width:340px}.cell img{width:100%;image-rendering:pixelated}
.note{color:#666;font-size:.9em}figure.plot{margin:1em 0}figcaption{font-weight:600}"""


def render(study: optuna.Study, store: FileSystemArtifactStore | None) -> str:
    trials = study.get_trials(deepcopy=False)
    s = summarise(study, trials)
    fid_imp = importances(study, target_attr=None, label=s.metric_name)
    val_imp = importances(study, target_attr="val_loss", label="the final validation metric")
    parts = [
        f"<h1>Study {e(s.study_name)}</h1><p class='note'>generated {datetime.datetime.now():%Y-%m-%d %H:%M}</p>",
        "<h2>Summary</h2>",
        summary_html(s),
        "<h2>Which hyperparameters mattered</h2>",
    ]
    for imp in (fid_imp, val_imp):
        parts.append(f"<p><b>{e(imp.reading())}</b></p>")
        if imp.default:
            parts.append(figure_html(importance_figure(imp), f"Importance for {imp.target}"))
    parts.append("<h2>Is it learning?</h2>")
    parts.append(
        figure_html(
            curve_figure(trials),
            "Learning curves: validation metric at the fixed evaluation points (dotted + ✕: pruned or stopped)",
        )
    )
    figures: list[tuple[str, str, dict[str, object]]] = [
        ("history", "Optimization history", {}),
        ("parallel", "Parallel coordinates", {}),
        ("slice", "Slice plots per parameter", {}),
    ]
    top = sorted(fid_imp.default, key=lambda k: -fid_imp.default[k])[:2]
    if len(top) == 2:
        figures.append(
            ("contour", f"Contour of the two most important parameters: {top[0]}, {top[1]}", {"params": top})
        )
    parts.append("<h2>The search</h2>")
    for name, title, kwargs in figures:
        fig = optuna_figure(name, study, **kwargs)
        if fig is not None:
            parts.append(figure_html(fig, title))
    for param in ("guidance_scale", "ddim_steps"):
        fig = scatter_figure(trials, param, s.metric_name)
        if fig is not None:
            parts.append(figure_html(fig, f"{s.metric_name} against {param}"))
    parts += [
        "<h2>Samples</h2>",
        samples_html(trials, store, s.metric_name),
        "<h2>Failures and pruned trials</h2>",
        failures_html(failure_groups(trials)),
    ]
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>hpo report: {e(s.study_name)}</title>"
        f"<style>{STYLE}</style><script>{get_plotlyjs()}</script></head><body>{''.join(parts)}</body></html>"
    )


def write_report(study: optuna.Study, path: Path, *, artifact_dir: Path | None) -> Path:
    store = FileSystemArtifactStore(str(artifact_dir)) if artifact_dir is not None and artifact_dir.is_dir() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # the launcher and a worker may both write it
    tmp.write_text(render(study, store), encoding="utf-8")
    tmp.replace(path)
    return path
