"""``hpo report``: one self-contained HTML file (Plotly inlined, images embedded) that says which
hyperparameters mattered and how sure that is, whether models learned, how to sample them, what the
best ones generate, whether the winner holds at full length, and why trials failed. Every section
says the number it rests on and what to do next. Every string from the study is HTML-escaped.

This module only formats: :func:`hpo.report.build.build` reads the study and computes every number,
verdict and figure into a :class:`~hpo.report.model.ReportModel`; the functions here lay its sections
out as HTML (tests/report/test_report_model.py checks that nothing here reads a study or computes)."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from hpo.files import atomic_write
from hpo.report.build import build
from hpo.report.bundle import loader_html
from hpo.report.companions import blocks_html, next_step
from hpo.report.figures import figure_html
from hpo.report.model import (
    Best,
    CompanionSection,
    Fact,
    FailureRow,
    HardwareSection,
    Image,
    ImportanceReading,
    ImportanceSection,
    LearningSection,
    ReportModel,
    SamplesSection,
    SearchSection,
    StopSection,
    SummarySection,
    SweepSection,
    TrialLine,
    WinnerSection,
)
from hpo.service.names import path_component

if TYPE_CHECKING:  # annotations of the entry points only: they hand the study to ``build``
    import optuna
    from optuna.storages import BaseStorage


def image_tag(image: Image) -> str:
    if image.png_base64 is None:
        return f'<div class="missing">{escape(image.alt)}: {escape(image.missing)}</div>'
    alt = escape(image.alt)
    return f'<img src="data:image/png;base64,{image.png_base64}" alt="{alt}" title="{alt}">'


def params_text(t: TrialLine) -> str:
    return ", ".join(f"{escape(str(k))}={escape(param_text(v))}" for k, v in t.params)


def sampling_text(t: TrialLine) -> str:
    return "" if t.sampling is None else f"sampled with {t.sampling}"


def param_text(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def facts_html(facts: tuple[Fact, ...]) -> str:
    """What the study was: data, budget, trials, wall time, score: the facts every section rests on."""
    items = "".join(f"<li><b>{escape(f.label)}</b>: {escape(f.text)}</li>" for f in facts)
    return f"<ul class='facts'>{items}</ul>"


def best_html(b: Best, s: SummarySection) -> str:
    noise = f" {b.noise}" if b.noise is not None else ""
    seeds = (
        " (± is the noise of re-sampling one trained model; another training seed moves a score more: "
        f"`hpo confirm {s.name}` measures that spread)"
        if noise
        else ""
    )
    second = b.fidelity
    return (
        f"trial #{b.trial.number}: {escape(s.metric)} {b.value:.4g}{escape(noise)}{kid_html(b.kid, b.real_kid)} with "
        f"{params_text(b.trial)}; {escape(sampling_text(b.trial))}{escape(seeds)}"
        + (f"<br>{escape(second[0].upper() + second[1:])}" if second else "")
    )


def summary_html(s: SummarySection) -> str:
    best = "no complete trial yet" if s.best is None else best_html(s.best, s)
    note = (
        "classifier-FID: FID on features of a CNN trained on this dataset — not comparable with Inception FID."
        if s.metric == "classifier-FID"
        else "FID: clean-fid (clean mode, Inception); not numerically equal to the TensorFlow FID quoted in papers."
    )
    return (
        f"<ul><li><b>Best</b>: {best}</li><li><b>Against the baseline</b>: {escape(s.against_baseline)}</li>"
        f"{scale_html(s.real_images)}"
        f"<li><b>Compute</b>: {s.compute_seconds / 3600:.2f} h of worker time, running trials included; pruning "
        f"saved about {s.saved_seconds / 3600:.2f} h</li><li><b>Metric</b>: {escape(note)}</li></ul>"
    )


def kid_html(kid: float | None, real: float | None) -> str:
    """KID beside the value real held-out images reach on it (0 = the reference's own distribution)."""
    if kid is None:
        return ""
    scale = f"; real held-out images: {real:.3g}" if real is not None else ""
    return f", KID {kid:.3g} (unbiased MMD² of the same features, 0 = indistinguishable from the reference{scale})"


def scale_html(text: str) -> str:
    """Where real held-out images land on the same score: the scale every score is read against."""
    if not text:
        return ""
    return f"<li><b>Real images on this score</b>: {escape(text[0].upper() + text[1:])}</li>"


def carried_html(carried: str | None) -> str:
    return f"<p class='note'>{escape(carried)}.</p>" if carried else ""


def importance_html(imp: ImportanceReading) -> str:
    out = f"<p><b>{escape(imp.reading)}</b></p>"
    if imp.plot is not None:
        out += figure_html(imp.plot.figure, imp.plot.caption)
    return out


def importances_html(section: ImportanceSection) -> str:
    return "".join(importance_html(r) for r in section.readings) + next_step(section.narrow)


def learning_html(section: LearningSection) -> str:
    return (
        figure_html(section.curves.figure, section.curves.caption)
        + figure_html(section.levels.figure, section.levels.caption)
        + next_step(
            f"a curve that stays flat near 1 did not learn: check `hpo doctor {section.name}` (the checklist on "
            "the study's spec); a level stuck near 1 is where to look."
        )
    )


def failures_html(rows: tuple[FailureRow, ...]) -> str:
    if not rows:
        return "<p>No trial failed or was pruned.</p>"
    cells = "".join(
        f"<tr><td>{escape(g.reason)}</td><td>{len(g.numbers)}</td>"
        f"<td>{escape(', '.join(f'#{n}' for n in g.numbers))}</td>"
        f"<td>{escape('; '.join(g.shared)) or '—'}</td><td>{escape(g.meaning)}</td></tr>"
        for g in rows
    )
    return (
        "<table><tr><th>reason</th><th>trials</th><th>which</th><th>parameter ranges they share</th>"
        f"<th>what it means</th></tr>{cells}</table>"
    )


def samples_html(s: SamplesSection) -> str:
    cells = [f"<div class='cell'>{image_tag(s.real)}<p>real validation images, for comparison</p></div>"]
    for c in s.cells:
        tie = f" — tied with #{c.tied_with} (within the noise)" if c.tied_with is not None else ""
        cells.append(
            f"<div class='cell'>{image_tag(c.image)}"
            f"<p>#{c.trial.number}{f' ({escape(c.baseline)})' if c.baseline else ''}: {escape(s.metric)} "
            f"{c.value:.4g}{escape(tie)}<br><small>{params_text(c.trial)}<br>{escape(sampling_text(c.trial))}"
            "</small></p></div>"
        )
    out = f"<h3>Best trials and the baseline ({s.complete} complete)</h3><div class='grid'>{''.join(cells)}</div>"
    if s.best is None:
        return out
    rows = "".join(
        f"<tr><td>{escape(k.point)}</td><td>{k.kimg:.3g} kimg</td><td class='strip'>{image_tag(k.image)}</td></tr>"
        for k in s.strips
    )
    return out + (
        f"<h3>Trial #{s.best} while it trained</h3><p class='note'>one row per evaluation point: the same "
        "noise and labels (one sample per class) each time</p>"
        f"<table class='strips'><tr><th>point</th><th>seen</th><th>samples</th></tr>{rows}</table>"
    )


def sweep_html(s: SweepSection) -> str:
    out = f"<p><b>{escape(s.answer)}</b></p>"
    if s.grid is not None:
        out += figure_html(s.grid.figure, s.grid.caption)
    if s.ema is not None:
        out += f"<p><b>{escape(s.ema.sentence)}</b> (trial #{s.ema.trial}; EMA lengths rebuilt after training).</p>"
        out += figure_html(s.ema.plot.figure, s.ema.plot.caption)
    if s.relative is not None:
        out += figure_html(s.relative.figure, s.relative.caption)
    if s.frontier is not None:
        out += figure_html(s.frontier.figure, s.frontier.caption)
    return out


def hardware_html(s: HardwareSection, most: int = 40) -> str:
    """One line per trial that trained (memory, data wait, GPU use), and a leak when one shows."""
    if not s.lines:
        return "<p>No hardware readings yet (trials record them as they train).</p>"
    lines = "".join(
        f"<li>#{h.trial}{'' if h.where is None else f' on {escape(h.where)}'}: {escape(h.reading)}</li>"
        for h in s.lines[-most:]
    )
    more = f"<p class='note'>the last {most} of {len(s.lines)} trials</p>" if len(s.lines) > most else ""
    warn = f"<p><b>{escape(s.leak)}</b></p>" if s.leak else ""
    return f"{warn}<ul>{lines}</ul>{more}"


STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222;
box-sizing:border-box}h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;max-width:100%}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;
vertical-align:top}.grid{display:flex;flex-wrap:wrap;gap:1em}.cell{width:340px;max-width:100%}
.cell img{width:100%;image-rendering:pixelated}.note{color:#666;font-size:.9em}.next{color:#225}
figure.plot{margin:1em 0;max-width:100%;overflow-x:auto}figcaption{font-weight:600}
.plotly-graph-div{max-width:100%}.strip img{height:40px;image-rendering:pixelated}"""


def search_html(s: SearchSection) -> str:
    done = s.complete
    if s.plots is None:
        return (
            "<h2>The search</h2><p>The search's charts (optimisation history, slices, contour, the score against "
            f"guidance and steps) are drawn from {s.needed} complete trials; this study has {len(done)}"
            f"{': ' + ', '.join(f'#{n}' for n in done) if done else ''}. Their scores are in the summary, their "
            "samples below; the learning curves above cover every trial.</p>"
        )
    if not s.plots:
        return ""
    parts = "".join(figure_html(p.figure, p.caption) for p in s.plots)
    return (
        f"<h2>The search</h2><p class='note'>{len(done)} complete trials; the dashboard (`hpo dashboard`) has "
        f"Optuna's parallel-coordinate plot too.</p>{parts}"
    )


def stop_html(s: StopSection) -> str:
    """*When to stop?* from the best trials' own curves of the validation metric, before any ladder."""
    if not s.lines:
        return "<p>No complete trial yet: nothing says whether longer training would help.</p>"
    rows = "".join(f"<li>#{line.trial}: {escape(line.text)}</li>" for line in s.lines)
    return f"<p><b>{escape(s.verdict)}</b> (validation metric, each trial's own curve)</p><ul>{rows}</ul>"


def winner_html(w: WinnerSection | None) -> str:
    """Where the best trial's weights are and the commands that retrain and sample it."""
    if w is None:
        return "<p>No complete trial yet.</p>"
    where = (
        f"<li><b>Weights</b>: <code>{escape(str(w.weights.path))}</code> — the EMA network's state_dict "
        f"(<code>torch.load</code>), {w.weights.num_parameters:,} parameters, trained "
        f"{w.weights.kimg:g} kimg; the architecture is the study's spec with "
        f"{params_text(w.trial)}</li>"
        if w.weights is not None
        else "<li><b>Weights</b>: not in the artifact store this report was made from (`--artifacts`).</li>"
    )
    return (
        f"<p>Trial #{w.trial.number} ({escape(sampling_text(w.trial))}).</p><ul>{where}"
        f"<li><b>Train it for longer</b>: <code>{escape(w.retrain)}</code> — the trial's spec and parameters at "
        f"{w.target_kimg:g} kimg; writes a checkpoint, a sample grid at its best sampling setting and the sweep's "
        "table (add <code>--storage URL</code> when the study is not in ./hpo.db)</li>"
        f"<li><b>Check that it holds</b>: <code>hpo confirm {escape(w.name)}</code> retrains the top configurations "
        "with fresh seeds</li>"
        f"<li><b>Take it away</b>: <code>{escape(w.export)}</code> writes its EMA weights (safetensors), a spec "
        f"that retrains it (<code>spec.yaml</code>) and its best sampling settings; <code>{escape(w.sample)}</code> "
        "draws a grid at those settings (from the study, or from the exported folder)</li></ul>"
    )


def companions_html(sections: tuple[CompanionSection, ...]) -> str:
    """The companion kinds' sections: each kind's blocks, formatted as the companions lay them out."""
    return "".join(f"<h2>{escape(c.heading)}</h2>{blocks_html(list(c.blocks))}" for c in sections)


def page_html(m: ReportModel) -> str:
    """The report page: the model's sections in order, with the page's style and plotly.js."""
    parts = [
        f"<h1>Study {escape(m.name)}</h1><p class='note'>generated {m.generated:%Y-%m-%d %H:%M}</p>",
        facts_html(m.facts),
        companions_html((m.run,) if m.run is not None else ()),
        "<h2>Summary</h2>",
        summary_html(m.summary),
        carried_html(m.summary.carried),
        "<h2>Which hyperparameters mattered</h2>",
        importances_html(m.importance),
        "<h2>Is it learning?</h2>",
        learning_html(m.learning),
        "<h2>Sampling: guidance, steps, solver, EMA length</h2>",
        sweep_html(m.sweep),
        search_html(m.search),
        "<h2>Samples</h2>",
        samples_html(m.samples),
        "<h2>Use the winner</h2>",
        winner_html(m.winner),
        "<h2>When to stop?</h2>",
        stop_html(m.stopping),
        companions_html(m.companions),
        "<h2>Failures and pruned trials</h2>",
        failures_html(m.failures),
        "<h2>Hardware</h2>",
        hardware_html(m.hardware),
    ]
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>hpo report: {escape(m.name)}</title>"
        f"<meta name='viewport' content='width=device-width'><style>{STYLE}</style>{loader_html()}"
        f"</head><body>{''.join(parts)}</body></html>"
    )


def render(study: optuna.Study, storage: BaseStorage, artifact_dir: Path | None) -> str:
    """The report page; ``storage`` is the study's (its confirmation and budget ladder live there too)."""
    return page_html(build(study, storage, artifact_dir))


def report_path(study_name: str, folder: Path = Path("reports")) -> Path:
    return folder / f"{path_component(study_name)}.html"


def write_report(study: optuna.Study, storage: BaseStorage, path: Path, *, artifact_dir: Path | None) -> Path:
    html = page_html(build(study, storage, artifact_dir))  # the launcher and a worker may both write it
    return atomic_write(path, lambda tmp: tmp.write_text(html, encoding="utf-8"))
