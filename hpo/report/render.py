"""``hpo report``: one self-contained HTML file (Plotly inlined, images embedded) that says which
hyperparameters mattered and how sure that is, whether models learned, how to sample them, what the
best ones generate, whether the winner holds at full length, and why trials failed. Every section
says the number it rests on and what to do next. Every string from the study is HTML-escaped."""

from __future__ import annotations

import base64
import datetime
import logging
from collections.abc import Sequence
from html import escape
from pathlib import Path

import optuna
from optuna.artifacts import FileSystemArtifactStore
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from hpo.analysis.hardware import hardware_of
from hpo.analysis.importance import Importances, study_importances
from hpo.analysis.narrow import narrow
from hpo.analysis.placement import Placement
from hpo.analysis.progress import fidelity_text, floor_reading
from hpo.analysis.ranking import ties_with_best
from hpo.analysis.record import PRUNING_METRIC, StudyRecord, TrialRecord
from hpo.analysis.stopping import validation_trend
from hpo.analysis.sweep import ema_sentence, statistic_text
from hpo.errors import HpoError
from hpo.files import atomic_write
from hpo.report import figures
from hpo.report.bundle import loader_html
from hpo.report.companions import companions_html, next_step
from hpo.report.data import (
    FailureGroup,
    Summary,
    best_vs_baseline,
    complete,
    failure_groups,
    grid_label,
    summarise_study,
    sweep_answer,
    sweep_of,
    validation_points,
    wall_seconds,
)
from hpo.service.names import DEFAULT_ARTIFACTS, artifact_file, path_component
from hpo.service.study import require_spec, stored_spec
from hpo.service.trials import carried_text, explain, leak_text, own_trials

log = logging.getLogger("hpo.report")
MIN_SEARCH_POINTS = 3  # complete trials before the search's charts (history, slices, contour) say anything


def image_tag(store: FileSystemArtifactStore | None, artifact_id: object, alt: str) -> str:
    if store is None or not isinstance(artifact_id, str):
        return f'<div class="missing">{escape(alt)}: no image</div>'
    try:
        with store.open_reader(artifact_id) as reader:
            data = base64.b64encode(reader.read()).decode()
    except Exception:
        return f'<div class="missing">{escape(alt)}: image not found in the artifact store</div>'
    return f'<img src="data:image/png;base64,{data}" alt="{escape(alt)}" title="{escape(alt)}">'


def params_text(t: FrozenTrial) -> str:
    return ", ".join(f"{escape(str(k))}={escape(param_text(v))}" for k, v in sorted(t.params.items()))


def sampling_text(t: FrozenTrial) -> str:
    choice = TrialRecord.current(t).sampling
    return "" if choice is None else f"sampled with {choice.words}"


def param_text(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def narrow_step(study: optuna.Study, trials: Sequence[FrozenTrial], metric: str) -> str:
    """``hpo narrow`` suggested only when it would succeed on this study; else what it still needs."""
    if not complete(trials):
        return next_step("more trials: `hpo narrow` needs a complete trial (`hpo launch SPEC` resumes the study).")
    try:
        changes = narrow(require_spec(study), trials, metric)
    except HpoError as err:
        return next_step(f"more trials before narrowing: {err}")
    basis = "the validation metric" if any("validation metric" in c.evidence for c in changes) else metric
    return next_step(
        f"`hpo narrow {study.study_name} -o next.yaml` writes the next spec from the importances of {basis}: the "
        "parameters that mattered narrowed around the best trials, the others fixed at the best value, each change "
        f"with its evidence; `hpo launch next.yaml --warm-start {study.study_name}` starts it from this study's trials."
    )


def summary_html(s: Summary, floor: dict[str, float] | None = None) -> str:
    best = "no complete trial yet"
    if s.best is not None:
        kid_text = kid_html(TrialRecord.of(s.best).kid, floor)
        noise = f" {s.noise.text()}" if s.noise.sd is not None else ""
        seeds = (
            " (± is the noise of re-sampling one trained model; another training seed moves a score more: "
            f"`hpo confirm {s.study_name}` measures that spread)"
            if noise
            else ""
        )
        second = fidelity_text(TrialRecord.of(s.best).fidelity, floor)
        best = (
            f"trial #{s.best.number}: {escape(s.metric_name)} {s.best.value:.4g}{escape(noise)}{kid_text} with "
            f"{params_text(s.best)}; {escape(sampling_text(s.best))}{escape(seeds)}"
            + (f"<br>{escape(second[0].upper() + second[1:])}" if second else "")
        )
    note = (
        "classifier-FID: FID on features of a CNN trained on this dataset — not comparable with Inception FID."
        if s.metric_name == "classifier-FID"
        else "FID: clean-fid (clean mode, Inception); not numerically equal to the TensorFlow FID quoted in papers."
    )
    return (
        f"<ul><li><b>Best</b>: {best}</li><li><b>Against the baseline</b>: {escape(best_vs_baseline(s))}</li>"
        f"{scale_html(s, floor)}"
        f"<li><b>Compute</b>: {s.compute_seconds / 3600:.2f} h of worker time, running trials included; pruning "
        f"saved about {s.saved_seconds / 3600:.2f} h</li><li><b>Metric</b>: {escape(note)}</li></ul>"
    )


def kid_html(kid: object, floor: dict[str, float] | None) -> str:
    """KID beside the value real held-out images reach on it (0 = the reference's own distribution)."""
    if not isinstance(kid, (int, float)):
        return ""
    real = (floor or {}).get("kid")
    scale = f"; real held-out images: {real:.3g}" if isinstance(real, (int, float)) else ""
    return f", KID {kid:.3g} (unbiased MMD² of the same features, 0 = indistinguishable from the reference{scale})"


def scale_html(s: Summary, floor: dict[str, float] | None) -> str:
    """Where real held-out images land on the same score: the scale every score is read against."""
    text = floor_reading(s.best.value if s.best is not None else None, s.noise, floor)
    if not text:
        return ""
    return f"<li><b>Real images on this score</b>: {escape(text[0].upper() + text[1:])}</li>"


def header_html(study: optuna.Study, trials: Sequence[FrozenTrial], s: Summary) -> str:
    """What the study was: data, budget, trials, wall time, score: the facts every section rests on."""
    spec = stored_spec(study)
    facts = StudyRecord.of(study).data or {}
    items = []
    if spec is not None:
        data = f"{spec.data.source} at {facts.get('image_size', spec.data.image_size)} px"
        if facts:
            classes = f"{facts['classes']} classes" if facts.get("classes", 0) > 1 else "unlabelled"
            data += f": {facts['train']:,} training + {facts['held_out']:,} held-out images, {classes}"
        items.append(("Data", data))
        target = f"; the winner is meant for {spec.study.target_kimg:g} kimg" if spec.study.target_kimg else ""
        items.append(
            ("Budget", f"{spec.train.kimg:g} kimg per trial (thousands of images seen), {spec.train.num_evals} "
             f"evaluation points{target}")
        )  # fmt: skip
        stat = TrialRecord.of(s.best).statistic if s.best is not None else None
        plain = f"{s.metric_name} of {spec.score.num_samples} samples per trial"
        items.append(("Score", f"per trial, {statistic_text(stat)}" if stat else plain))
    counts = ", ".join(f"{v} {k}" for k, v in s.counts.items() if v)
    items.append(("Trials", f"{sum(s.counts[k] for k in ('complete', 'pruned', 'failed'))} of {s.n_trials} ({counts})"))
    wall = wall_seconds(trials, datetime.datetime.now())
    items.append(("Wall time", f"{wall / 60:.1f} min from the first trial's start to the last one's end"))
    return "<ul class='facts'>" + "".join(f"<li><b>{k}</b>: {escape(v)}</li>" for k, v in items) + "</ul>"


def importance_html(imp: Importances) -> str:
    out = f"<p><b>{escape(imp.reading())}</b></p>"
    if imp.fanova:
        out += figures.figure_html(
            figures.importance_figure(imp), f"Importance for {imp.target} ({imp.n_trials} trials)"
        )
    return out


def failures_html(groups: list[FailureGroup]) -> str:
    if not groups:
        return "<p>No trial failed or was pruned.</p>"
    rows = "".join(
        f"<tr><td>{escape(g.reason)}</td><td>{len(g.trials)}</td>"
        f"<td>{escape(', '.join(f'#{n}' for n in g.trials))}</td>"
        f"<td>{escape('; '.join(g.shared)) or '—'}</td><td>{escape(explain(g.reason))}</td></tr>"
        for g in groups
    )
    return (
        "<table><tr><th>reason</th><th>trials</th><th>which</th><th>parameter ranges they share</th>"
        f"<th>what it means</th></tr>{rows}</table>"
    )


def samples_html(
    trials: Sequence[FrozenTrial], study: optuna.Study, store: FileSystemArtifactStore | None, s: Summary
) -> str:
    done = complete(trials)
    tied = set(ties_with_best(done, s.noise))
    shown = done[:3] + [t for t in done[3:] if TrialRecord.of(t).baseline]
    cells = [
        f"<div class='cell'>{image_tag(store, StudyRecord.of(study).real_grid, 'real validation images')}"
        "<p>real validation images, for comparison</p></div>"
    ]
    for t in shown:
        tie = f" — tied with #{done[0].number} (within the noise)" if t.number in tied else ""
        cells.append(
            f"<div class='cell'>{image_tag(store, TrialRecord.of(t).samples, f'trial {t.number}')}"
            f"<p>#{t.number}{' (baseline)' if TrialRecord.of(t).baseline else ''}: {escape(s.metric_name)} "
            f"{t.value:.4g}{escape(tie)}<br><small>{params_text(t)}<br>{escape(sampling_text(t))}</small></p></div>"
        )
    out = f"<h3>Best trials and the baseline ({len(done)} complete)</h3><div class='grid'>{''.join(cells)}</div>"
    if done:
        best = done[0]
        record = TrialRecord.current(best)
        grids, curve = record.grids, record.curve
        rows = "".join(
            f"<tr><td>{escape(k)}</td><td>{curve.get(k, {}).get('kimg', 0):.3g} kimg</td>"
            f"<td class='strip'>{image_tag(store, grids[k], f'evaluation {k}')}</td></tr>"
            for k in sorted(grids, key=int)
        )
        out += (
            f"<h3>Trial #{best.number} while it trained</h3><p class='note'>one row per evaluation point: the same "
            "noise and labels (one sample per class) each time</p>"
            f"<table class='strips'><tr><th>point</th><th>seen</th><th>samples</th></tr>{rows}</table>"
        )
    return out


def sweep_html(done: Sequence[FrozenTrial], s: Summary) -> str:
    sweeps = [(t, scores) for t in done[:5] if len(scores := sweep_of(t)) > 1]
    out = f"<p><b>{escape(sweep_answer(done, s.noise))}</b></p>"
    if not sweeps:
        return out
    best, scores = sweeps[0]
    shown = grid_label(scores, s.metric_name)
    out += figures.figure_html(
        figures.sweep_figure(scores, s.metric_name),
        f"{shown} over guidance × DDIM steps, trial #{best.number} (same noise for every combination)",
    )
    ema_line = ema_sentence(scores)
    if ema_line is not None:
        out += f"<p><b>{escape(ema_line)}</b> (trial #{best.number}; EMA lengths rebuilt after training).</p>"
        out += figures.figure_html(
            figures.sweep_figure(scores, s.metric_name, rows="ema_sigma_rel"),
            f"{shown} over guidance × EMA length, trial #{best.number}: every length from one training run "
            "(post-hoc EMA, Karras et al. 2024)",
        )
    if len(sweeps) > 1:
        out += figures.figure_html(
            figures.relative_sweep_figure([sc for _, sc in sweeps]),
            f"Across the top {len(sweeps)} trials: each combination's rank within its trial's own sweep "
            f"({shown}; 1 = that trial's best), averaged",
        )
    return out


def _ran_on(t: FrozenTrial) -> str:
    placement = Placement.from_dict(TrialRecord.of(t).ran_on)
    return "" if placement is None else f" on {escape(placement.cell())}"


def hardware_html(trials: Sequence[FrozenTrial], most: int = 40) -> str:
    """One line per trial that trained (memory, data wait, GPU use), and a leak when one shows."""
    rows = [(t, h) for t in trials if (h := hardware_of(TrialRecord.current(t).hardware)) is not None]
    if not rows:
        return "<p>No hardware readings yet (trials record them as they train).</p>"
    leak = leak_text(trials)
    lines = "".join(f"<li>#{t.number}{_ran_on(t)}: {escape(h.line())}</li>" for t, h in rows[-most:])
    more = f"<p class='note'>the last {most} of {len(rows)} trials</p>" if len(rows) > most else ""
    warn = f"<p><b>{escape(leak)}</b></p>" if leak else ""
    return f"{warn}<ul>{lines}</ul>{more}"


STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222;
box-sizing:border-box}h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;max-width:100%}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;
vertical-align:top}.grid{display:flex;flex-wrap:wrap;gap:1em}.cell{width:340px;max-width:100%}
.cell img{width:100%;image-rendering:pixelated}.note{color:#666;font-size:.9em}.next{color:#225}
figure.plot{margin:1em 0;max-width:100%;overflow-x:auto}figcaption{font-weight:600}
.plotly-graph-div{max-width:100%}.strip img{height:40px;image-rendering:pixelated}"""


def search_html(
    study: optuna.Study, trials: Sequence[FrozenTrial], fid_imp: Importances, metric: str, colours: figures.Colours
) -> str:
    done = complete(trials)
    if len(done) < MIN_SEARCH_POINTS:
        return (
            "<h2>The search</h2><p>The search's charts (optimisation history, slices, contour, the score against "
            f"guidance and steps) are drawn from {MIN_SEARCH_POINTS} complete trials; this study has {len(done)}"
            f"{': ' + ', '.join(f'#{t.number}' for t in done) if done else ''}. Their scores are in the summary, their "
            "samples below; the learning curves above cover every trial.</p>"
        )
    plots: list[tuple[str, str, dict[str, object]]] = [
        ("history", "Optimization history", {}),
        ("slice", "Slice plots per parameter", {}),
    ]
    top = fid_imp.ranked[:2]
    if len(top) == 2:
        plots.append(("contour", f"Contour of the two most important parameters: {top[0]}, {top[1]}", {"params": top}))
    parts = []
    for name, title, kwargs in plots:
        fig = figures.optuna_figure(name, study, **kwargs)
        if fig is not None:
            parts.append(figures.figure_html(fig, title))
    for param in ("guidance_scale", "ddim_steps"):
        fig = figures.scatter_figure(trials, param, metric, colours)
        if fig is not None:
            parts.append(figures.figure_html(fig, f"{metric} against {param} (searched per trial)"))
    if not parts:
        return ""
    return (
        f"<h2>The search</h2><p class='note'>{len(done)} complete trials; the dashboard (`hpo dashboard`) has "
        f"Optuna's parallel-coordinate plot too.</p>{''.join(parts)}"
    )


def stop_html(done: Sequence[FrozenTrial], most: int = 3) -> str:
    """*When to stop?* from the best trials' own curves of the validation metric, before any ladder."""
    if not done:
        return "<p>No complete trial yet: nothing says whether longer training would help.</p>"
    lines = [(t, validation_trend(validation_points(t, PRUNING_METRIC), PRUNING_METRIC)) for t in done[:most]]
    improving = [f"#{t.number}" for t, v in lines if v.kind == "improving"]
    if improving:
        who = " and ".join(improving) if len(improving) <= 2 else f"{', '.join(improving[:-1])} and {improving[-1]}"
        verb = "still improves" if len(improving) == 1 else "still improve"
        head = (
            f"{who} {verb} at the study's budget: the ranking is of unfinished models, and a longer budget should pay."
        )
    else:
        head = "None of the best trials still improves at the study's budget by its own curve."
    rows = "".join(f"<li>#{t.number}: {escape(v.text)}</li>" for t, v in lines)
    return f"<p><b>{escape(head)}</b> (validation metric, each trial's own curve)</p><ul>{rows}</ul>"


def winner_html(study: optuna.Study, s: Summary, artifact_dir: Path | None) -> str:
    """Where the best trial's weights are and the commands that retrain and sample it."""
    best = s.best
    if best is None:
        return "<p>No complete trial yet.</p>"
    spec = stored_spec(study)
    record = TrialRecord.of(best)
    ckpt = record.checkpoint
    path = artifact_file(artifact_dir, ckpt) if artifact_dir is not None and ckpt is not None else None
    where = (
        f"<li><b>Weights</b>: <code>{escape(str(path))}</code> — the EMA network's state_dict "
        f"(<code>torch.load</code>), {record.num_parameters:,} parameters, trained "
        f"{record.budget_kimg or 0:g} kimg; the architecture is the study's spec with "
        f"{params_text(best)}</li>"
        if path is not None and path.is_file()
        else "<li><b>Weights</b>: not in the artifact store this report was made from (`--artifacts`).</li>"
    )
    target = spec.study.target_kimg if spec is not None and spec.study.target_kimg else 4 * (record.budget_kimg or 16)
    name = study.study_name
    folder = f"{path_component(name)}-{best.number}"
    retrain = f"hpo train --from {name}:{best.number} --set train.kimg={target:g} -o runs/{folder}-longer"
    store = "" if artifact_dir is None or artifact_dir == DEFAULT_ARTIFACTS else f" --artifacts {artifact_dir}"
    export = f"hpo export {name}:{best.number} -o exports/{folder}{store}"
    sample = f"hpo sample {name}:{best.number} -n 64 -o {folder}-samples.png{store}"
    return (
        f"<p>Trial #{best.number} ({escape(sampling_text(best))}).</p><ul>{where}"
        f"<li><b>Train it for longer</b>: <code>{escape(retrain)}</code> — the trial's spec and parameters at "
        f"{target:g} kimg; writes a checkpoint, a sample grid at its best sampling setting and the sweep's table "
        "(add <code>--storage URL</code> when the study is not in ./hpo.db)</li>"
        f"<li><b>Check that it holds</b>: <code>hpo confirm {escape(name)}</code> retrains the top configurations "
        "with fresh seeds</li>"
        f"<li><b>Take it away</b>: <code>{escape(export)}</code> writes its EMA weights (safetensors), a spec "
        f"that retrains it (<code>spec.yaml</code>) and its best sampling settings; <code>{escape(sample)}</code> "
        "draws a grid at those settings (from the study, or from the exported folder)</li></ul>"
    )


def render(study: optuna.Study, storage: BaseStorage, artifact_dir: Path | None) -> str:
    """The report page; ``storage`` is the study's (its confirmation and budget ladder live there too)."""
    store = FileSystemArtifactStore(str(artifact_dir)) if artifact_dir is not None and artifact_dir.is_dir() else None
    trials = own_trials(study)
    colours = figures.trial_colours(trials)
    s = summarise_study(study, trials)
    done = complete(trials)
    fid_imp, val_imp = study_importances(trials, s.metric_name)
    learning = [t for t in trials if t.state != TrialState.WAITING]
    top = done[:5] + [t for t in done[5:] if TrialRecord.of(t).baseline]
    parts = [
        f"<h1>Study {escape(s.study_name)}</h1><p class='note'>generated {datetime.datetime.now():%Y-%m-%d %H:%M}</p>",
        header_html(study, trials, s),
        "<h2>Summary</h2>",
        summary_html(s, StudyRecord.of(study).floor),
        f"<p class='note'>{escape(carried)}.</p>" if (carried := carried_text(study)) else "",
        "<h2>Which hyperparameters mattered</h2>",
        importance_html(fid_imp),
        importance_html(val_imp),
        narrow_step(study, trials, s.metric_name),
        "<h2>Is it learning?</h2>",
        figures.figure_html(
            figures.curve_figure(learning, colours),
            f"Learning curves of {len(learning)} trials: {PRUNING_METRIC} at the fixed evaluation points "
            "(dotted + ✕: pruned or failed)",
        ),
        figures.figure_html(
            figures.level_figure(top, colours),
            f"Where along the noise range the top {len(top)} models are weak: error ratio to a linear denoiser "
            "per log-SNR level, last evaluation (1 = learned nothing there)",
        ),
        next_step(
            f"a curve that stays flat near 1 did not learn: check `hpo doctor {study.study_name}` (the checklist on "
            "the study's spec); a level stuck near 1 is where to look."
        ),
        "<h2>Sampling: guidance, DDIM steps, EMA length</h2>",
        sweep_html(done, s),
        search_html(study, trials, fid_imp, s.metric_name, colours),
        "<h2>Samples</h2>",
        samples_html(trials, study, store, s),
        "<h2>Use the winner</h2>",
        winner_html(study, s, artifact_dir),
        "<h2>When to stop?</h2>",
        stop_html(done),
        companions_html(study, storage, s.metric_name),
        "<h2>Failures and pruned trials</h2>",
        failures_html(failure_groups(trials)),
        "<h2>Hardware</h2>",
        hardware_html(trials),
    ]
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>hpo report: {escape(s.study_name)}</title>"
        f"<meta name='viewport' content='width=device-width'><style>{STYLE}</style>{loader_html()}"
        f"</head><body>{''.join(parts)}</body></html>"
    )


def report_path(study_name: str, folder: Path = Path("reports")) -> Path:
    return folder / f"{path_component(study_name)}.html"


def write_report(study: optuna.Study, storage: BaseStorage, path: Path, *, artifact_dir: Path | None) -> Path:
    html = render(study, storage, artifact_dir)  # the launcher and a worker may both write it
    return atomic_write(path, lambda tmp: tmp.write_text(html, encoding="utf-8"))
