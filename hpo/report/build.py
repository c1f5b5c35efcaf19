"""The report's one computing step: :func:`build` reads the study, its storage and the artifact store
once, asks ``hpo.analysis``, ``hpo.service``, :mod:`hpo.report.data` and the companion kinds for
every number, verdict and figure, and returns the :class:`~hpo.report.model.ReportModel`."""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping, Sequence
from pathlib import Path

import optuna
from optuna.artifacts import FileSystemArtifactStore
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from hpo.analysis.frontier import Frontier
from hpo.analysis.importance import Importances, study_importances
from hpo.analysis.narrow import narrow
from hpo.analysis.progress import fidelity_text, floor_reading
from hpo.analysis.ranking import ties_with_best
from hpo.analysis.stopping import validation_trend
from hpo.analysis.sweep import ema_sentence, statistic_text
from hpo.analysis.tables import duration
from hpo.companions import KINDS
from hpo.companions.base import Kind, find_companion
from hpo.companions.blocks import Block, Paragraph, Table
from hpo.errors import HpoError
from hpo.records import PRUNING_METRIC, ComboScore, FloorRecord, StudyRecord, TrialRecord, params_of
from hpo.report import figures
from hpo.report.data import (
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
from hpo.report.model import (
    Best,
    Chart,
    CompanionSection,
    EmaReading,
    Fact,
    FailureRow,
    HardwareLine,
    HardwareSection,
    Image,
    ImportanceReading,
    ImportanceSection,
    LearningSection,
    ReportModel,
    SampleCell,
    SamplesSection,
    SearchSection,
    StopSection,
    Strip,
    SummarySection,
    SweepSection,
    TrendLine,
    TrialLine,
    Weights,
    WinnerSection,
)
from hpo.run.ledger import Ledger
from hpo.service.frontiers import study_frontiers
from hpo.service.names import DEFAULT_ARTIFACTS, artifact_file, path_component
from hpo.service.study import require_spec, stored_spec
from hpo.service.trials import carried_text, explain, leak_text, own_trials
from hpo.spec.rules import eval_points_words

MIN_SEARCH_POINTS = 3  # complete trials before the search's charts (history, slices, contour) say anything
TOP_SWEEPS = 5  # the best trials whose sampling sweeps are compared
TOP_LEVELS = 5  # the best trials drawn in the per-level profile (and every complete baseline)
SHOWN_SAMPLES = 3  # the best trials whose samples are shown (and every complete baseline)
STOP_TRIALS = 3  # the best trials whose own curves answer *when to stop?*


# --- building it ---------------------------------------------------------------------------------


def trial_line(t: FrozenTrial) -> TrialLine:
    """How the page names ``t``: number, parameters, and this attempt's chosen sampling setting."""
    choice = TrialRecord.current(t).sampling
    params = params_of(t)
    return TrialLine(t.number, tuple(sorted(params.items())), None if choice is None else choice.words)


def value_of(t: FrozenTrial) -> float:
    """A complete trial's value (every study here has one objective)."""
    if t.value is None:
        raise ValueError(f"trial #{t.number} has no value")
    return t.value


def read_image(store: FileSystemArtifactStore | None, artifact_id: object, alt: str) -> Image:
    """The artifact's bytes as base64, or why there are none (no artifact, or not in the store)."""
    if store is None or not isinstance(artifact_id, str):
        return Image(alt, None)
    try:
        with store.open_reader(artifact_id) as reader:
            data = base64.b64encode(reader.read()).decode()
    except Exception:
        return Image(alt, None, "image not found in the artifact store")
    return Image(alt, data)


def header_facts(study: optuna.Study, trials: Sequence[FrozenTrial], s: Summary, now: datetime.datetime) -> list[Fact]:
    """What the study was: data, budget, trials, wall time, score: the facts every section rests on."""
    spec = stored_spec(study)
    facts = StudyRecord.of(study).data
    items = []
    if spec is not None:
        data = f"{spec.data.source} at {facts.image_size if facts else spec.data.image_size} px"
        if facts:
            classes = f"{facts.classes} classes" if facts.classes > 1 else "unlabelled"
            data += f": {facts.train:,} training + {facts.held_out:,} held-out images, {classes}"
        items.append(Fact("Data", data))
        target = f"; the winner is meant for {spec.study.target_kimg:g} kimg" if spec.study.target_kimg else ""
        per_trial = f"{spec.train.kimg:g} kimg per trial (thousands of images seen)"
        points = eval_points_words(spec.train.num_evals, spec.train.eval_spacing)
        items.append(Fact("Budget", f"{per_trial}, {points}{target}"))
        stat = TrialRecord.of(s.best).statistic if s.best is not None else None
        plain = f"{s.metric_name} of {spec.score.num_samples} samples per trial"
        items.append(Fact("Score", f"per trial, {statistic_text(stat)}" if stat else plain))
    counts = ", ".join(f"{v} {k}" for k, v in s.counts.items() if v)
    finished = sum(s.counts[k] for k in ("complete", "pruned", "failed"))
    items.append(Fact("Trials", f"{finished} of {s.n_trials} ({counts})"))
    wall = wall_seconds(trials, now)
    items.append(Fact("Wall time", f"{wall / 60:.1f} min from the first trial's start to the last one's end"))
    return items


def best_of(s: Summary, floor: FloorRecord | None) -> Best | None:
    """The best trial's line of the summary, each score beside what real images (``floor``) reach."""
    if s.best is None:
        return None
    record = TrialRecord.of(s.best)
    return Best(
        trial=trial_line(s.best),
        value=value_of(s.best),
        noise=s.noise.text() if s.noise.sd is not None else None,
        kid=record.kid,
        real_kid=floor.kid if floor is not None else None,
        fidelity=fidelity_text(record.fidelity, floor),
    )


def summary_section(study: optuna.Study, s: Summary) -> SummarySection:
    """The best trial, its gain over the baseline, the real-image scale, compute, a warm start's source."""
    floor = StudyRecord.of(study).floor
    return SummarySection(
        name=s.study_name,
        metric=s.metric_name,
        best=best_of(s, floor),
        against_baseline=best_vs_baseline(s),
        real_images=floor_reading(s.best.value if s.best is not None else None, s.noise, floor),
        compute_seconds=s.compute_seconds,
        saved_seconds=s.saved_seconds,
        carried=carried_text(study),
    )


def importance_reading(imp: Importances) -> ImportanceReading:
    """The reading in words, and fANOVA's chart beside PED-ANOVA when fANOVA ran."""
    if not imp.fanova:
        return ImportanceReading(imp.reading(), None)
    plot = Chart(figures.importance_figure(imp), f"Importance for {imp.target} ({imp.n_trials} trials)")
    return ImportanceReading(imp.reading(), plot)


def narrow_text(study: optuna.Study, trials: Sequence[FrozenTrial], metric: str) -> str:
    """``hpo narrow`` suggested only when it would succeed on this study; else what it still needs."""
    if not complete(trials):
        return "more trials: `hpo narrow` needs a complete trial (`hpo launch SPEC` resumes the study)."
    try:
        changes = narrow(require_spec(study), trials, metric)
    except HpoError as err:
        return f"more trials before narrowing: {err}"
    basis = "the validation metric" if any("validation metric" in c.evidence for c in changes) else metric
    return (
        f"`hpo narrow {study.study_name} -o next.yaml` writes the next spec from the importances of {basis}: the "
        "parameters that mattered narrowed around the best trials, the others fixed at the best value, each change "
        f"with its evidence; `hpo launch next.yaml --warm-start {study.study_name}` starts it from this study's trials."
    )


def learning_section(name: str, trials: Sequence[FrozenTrial], colours: figures.Colours) -> LearningSection:
    """Every trial's learning curve and the top models' error per noise level, in the trials' colours."""
    done = complete(trials)
    learning = [t for t in trials if t.state != TrialState.WAITING]
    top = done[:TOP_LEVELS] + [t for t in done[TOP_LEVELS:] if TrialRecord.of(t).baseline]
    curves = Chart(
        figures.curve_figure(learning, colours),
        f"Learning curves of {len(learning)} trials: {PRUNING_METRIC} at the fixed evaluation points "
        "(dotted + ✕: pruned or failed)",
    )
    levels = Chart(
        figures.level_figure(top, colours),
        f"Where along the noise range the top {len(top)} models are weak: error ratio to a linear denoiser "
        "per log-SNR level, last evaluation (1 = learned nothing there)",
    )
    return LearningSection(name, curves, levels)


def sweep_section(
    done: Sequence[FrozenTrial],
    s: Summary,
    frontiers: Mapping[int, Frontier] | None = None,
    floor: FloorRecord | None = None,
) -> SweepSection:
    """The sampling sweep's answer, the best trial's grid (steps, and EMA length when swept), the
    top trials' ranks side by side and their frontiers of quality against sampling cost."""
    sweeps = [(t, scores) for t in done[:TOP_SWEEPS] if len(scores := sweep_of(t)) > 1]
    answer = sweep_answer(done, s.noise)
    if not sweeps:
        return SweepSection(answer, None, None, None)
    best, scores = sweeps[0]
    shown = grid_label(scores, s.metric_name)
    grid = Chart(
        figures.sweep_figure(scores, s.metric_name),
        f"{shown} over guidance × sampler steps, trial #{best.number} (same noise for every combination)",
    )
    ema = ema_reading(best.number, scores, s.metric_name, shown)
    return SweepSection(answer, grid, ema, relative_plot(sweeps, shown), frontier_plot(sweeps, frontiers or {}, floor))


def frontier_plot(
    sweeps: Sequence[tuple[FrozenTrial, list[ComboScore]]],
    frontiers: Mapping[int, Frontier],
    floor: FloorRecord | None,
) -> Chart | None:
    """The top trials' frontiers, when the best one swept more than one cost."""
    shown = [frontiers[t.number] for t, _ in sweeps if t.number in frontiers]
    if not shown or len(shown[0].points) < 2:
        return None
    caption = (
        f"Quality against sampling cost: each of the top {len(shown)} trials' best {shown[0].statistic} within each "
        "number of network evaluations per image (`hpo export --max-nfe N` takes the best within N)"
    )
    return Chart(figures.frontier_figure(shown, floor.score if floor is not None else None), caption)


def ema_reading(trial: int, scores: Sequence[ComboScore], metric: str, shown: str) -> EmaReading | None:
    """Which post-hoc EMA length samples best at each guidance, when the sweep tried several."""
    sentence = ema_sentence(scores)
    if sentence is None:
        return None
    plot = Chart(
        figures.sweep_figure(scores, metric, rows="ema_sigma_rel"),
        f"{shown} over guidance × EMA length, trial #{trial}: every length from one training run "
        "(post-hoc EMA, Karras et al. 2024)",
    )
    return EmaReading(sentence, trial, plot)


def relative_plot(sweeps: Sequence[tuple[FrozenTrial, list[ComboScore]]], shown: str) -> Chart | None:
    """Each combination's rank within its trial's own sweep, averaged over the top trials that swept."""
    if len(sweeps) < 2:
        return None
    return Chart(
        figures.relative_sweep_figure([scores for _, scores in sweeps]),
        f"Across the top {len(sweeps)} trials: each combination's rank within its trial's own sweep "
        f"({shown}; 1 = that trial's best), averaged",
    )


def search_section(
    study: optuna.Study, trials: Sequence[FrozenTrial], fid_imp: Importances, metric: str, colours: figures.Colours
) -> SearchSection:
    """Optuna's history, slices and contour, and the score against the sampling parameters searched per
    trial: drawn from ``MIN_SEARCH_POINTS`` complete trials."""
    done = complete(trials)
    numbers = tuple(t.number for t in done)
    if len(done) < MIN_SEARCH_POINTS:
        return SearchSection(MIN_SEARCH_POINTS, numbers, None)
    wanted: list[tuple[str, str, dict[str, object]]] = [
        ("history", "Optimization history", {}),
        ("slice", "Slice plots per parameter", {}),
    ]
    top = fid_imp.ranked[:2]
    if len(top) == 2:
        wanted.append(("contour", f"Contour of the two most important parameters: {top[0]}, {top[1]}", {"params": top}))
    plots = []
    for name, title, kwargs in wanted:
        fig = figures.optuna_figure(name, study, **kwargs)
        if fig is not None:
            plots.append(Chart(fig, title))
    for param in ("guidance_scale", "steps"):
        fig = figures.scatter_figure(trials, param, metric, colours)
        if fig is not None:
            plots.append(Chart(fig, f"{metric} against {param} (searched per trial)"))
    return SearchSection(MIN_SEARCH_POINTS, numbers, tuple(plots))


def samples_section(
    study: optuna.Study, trials: Sequence[FrozenTrial], store: FileSystemArtifactStore | None, s: Summary
) -> SamplesSection:
    """The best trials' and the baselines' sample grids beside real images, and the best trial's
    strips at each evaluation point."""
    done = complete(trials)
    tied = set(ties_with_best(done, s.noise))
    shown = done[:SHOWN_SAMPLES] + [t for t in done[SHOWN_SAMPLES:] if TrialRecord.of(t).baseline]
    cells = tuple(
        SampleCell(
            trial=trial_line(t),
            baseline=TrialRecord.of(t).baseline_label,
            value=value_of(t),
            tied_with=done[0].number if t.number in tied else None,
            image=read_image(store, TrialRecord.of(t).samples, f"trial {t.number}"),
        )
        for t in shown
    )
    real = read_image(store, StudyRecord.of(study).real_grid, "real validation images")
    if not done:
        return SamplesSection(s.metric_name, 0, real, cells, None, ())
    record = TrialRecord.current(done[0])
    grids, kimg = record.grids, {str(p.index): p.kimg for p in record.points}
    strips = tuple(
        Strip(k, kimg.get(k, 0.0), read_image(store, grids[k], f"evaluation {k}")) for k in sorted(grids, key=int)
    )
    return SamplesSection(s.metric_name, len(done), real, cells, done[0].number, strips)


def winner_section(study: optuna.Study, s: Summary, artifact_dir: Path | None) -> WinnerSection | None:
    """Where the best trial's weights are and the commands that retrain, export and sample it."""
    best = s.best
    if best is None:
        return None
    spec = stored_spec(study)
    record = TrialRecord.of(best)
    ckpt = record.checkpoint
    path = artifact_file(artifact_dir, ckpt) if artifact_dir is not None and ckpt is not None else None
    weights = (
        Weights(path, record.num_parameters, record.budget_kimg or 0) if path is not None and path.is_file() else None
    )
    target = spec.study.target_kimg if spec is not None and spec.study.target_kimg else 4 * (record.budget_kimg or 16)
    name = study.study_name
    folder = f"{path_component(name)}-{best.number}"
    store = "" if artifact_dir is None or artifact_dir == DEFAULT_ARTIFACTS else f" --artifacts {artifact_dir}"
    return WinnerSection(
        name=name,
        trial=trial_line(best),
        weights=weights,
        target_kimg=target,
        retrain=f"hpo train --from {name}:{best.number} --set train.kimg={target:g} -o runs/{folder}-longer",
        export=f"hpo export {name}:{best.number} -o exports/{folder}{store}",
        sample=f"hpo sample {name}:{best.number} -n 64 -o {folder}-samples.png{store}",
    )


def stop_section(done: Sequence[FrozenTrial]) -> StopSection:
    """*When to stop?* from the best trials' own curves of the validation metric, before any ladder."""
    if not done:
        return StopSection("", ())
    trends = [(t, validation_trend(validation_points(t, PRUNING_METRIC), PRUNING_METRIC)) for t in done[:STOP_TRIALS]]
    improving = [f"#{t.number}" for t, v in trends if v.kind == "improving"]
    if improving:
        who = " and ".join(improving) if len(improving) <= 2 else f"{', '.join(improving[:-1])} and {improving[-1]}"
        verb = "still improves" if len(improving) == 1 else "still improve"
        verdict = (
            f"{who} {verb} at the study's budget: the ranking is of unfinished models, and a longer budget should pay."
        )
    else:
        verdict = "None of the best trials still improves at the study's budget by its own curve."
    return StopSection(verdict, tuple(TrendLine(t.number, v.text) for t, v in trends))


def run_section(study: optuna.Study) -> CompanionSection | None:
    """The budgeted run this study is the search of: where it is, each phase planned and spent, and
    what it decided; None for a study ``hpo run`` did not create."""
    ledger = Ledger.read(StudyRecord.of(study).run)
    if ledger is None:
        return None
    rows = [
        [p.name, p.state, duration(p.spent_s), duration(p.planned_s) if p.planned_s else "—", p.note]
        for p in ledger.phases
    ]
    d = ledger.decisions
    blocks: list[Block] = [
        Paragraph(ledger.status_line(), "lead"),
        Table(["phase", "state", "spent", "planned", "what it did"], rows),
    ]
    if d.winner_why:
        blocks.append(Paragraph(d.winner_why, label="The final run trains"))
    if d.value is not None:
        blocks.append(Paragraph(
            f"{d.score_words()} (real held-out images: {d.floor:.4g}); {d.stop}",
            label="The model",
        ))  # fmt: skip
    if d.bigger:
        blocks.append(Paragraph(d.bigger, label="A bigger budget"))
    return CompanionSection(f"The budgeted run: {duration(ledger.budget_s)} from {ledger.folder}", tuple(blocks))


def companion_section(kind: Kind, study: optuna.Study, storage: BaseStorage, metric: str) -> CompanionSection:
    """The kind's reading of its companion, what to run when there is none, a line when the companion
    the study points to is gone."""
    found = find_companion(study, storage, kind.pointer)
    if found is None:
        blocks = kind.absent(study.study_name)
    elif isinstance(found, str):
        blocks = [Paragraph(f"The {kind.name} study {found} is gone.")]
    else:
        blocks = kind.read(study, found, metric).blocks()
    return CompanionSection(kind.heading, tuple(blocks))


def failure_rows(trials: Sequence[FrozenTrial]) -> tuple[FailureRow, ...]:
    """One row per reason trials failed or were pruned: which, the ranges they share, what it means."""
    return tuple(
        FailureRow(g.reason, tuple(g.trials), tuple(g.shared), explain(g.reason)) for g in failure_groups(trials)
    )


def hardware_section(trials: Sequence[FrozenTrial]) -> HardwareSection:
    """One line per trial that trained (memory, data wait, GPU use), and a leak when one shows."""
    lines = tuple(
        HardwareLine(t.number, ran_on(t), h.line())
        for t in trials
        if (h := TrialRecord.current(t).hardware) is not None
    )
    return HardwareSection(lines, leak_text(trials) if lines else None)


def ran_on(t: FrozenTrial) -> str | None:
    """Where the trial ran (host, worker, device), when it recorded it."""
    placement = TrialRecord.of(t).ran_on
    return None if placement is None else placement.cell()


def build(study: optuna.Study, storage: BaseStorage, artifact_dir: Path | None) -> ReportModel:
    """Everything the report shows, read and computed once; ``storage`` is the study's (its
    confirmation and ladders live there too), ``artifact_dir`` the artifact store the images and
    checkpoints are read from (None or missing: the page says they are not there)."""
    store = FileSystemArtifactStore(str(artifact_dir)) if artifact_dir is not None and artifact_dir.is_dir() else None
    trials = own_trials(study)
    colours = figures.trial_colours(trials)
    s = summarise_study(study, trials)
    done = complete(trials)
    fid_imp, val_imp = study_importances(trials, s.metric_name)
    now = datetime.datetime.now()
    return ReportModel(
        name=s.study_name,
        generated=now,
        facts=tuple(header_facts(study, trials, s, now)),
        run=run_section(study),
        summary=summary_section(study, s),
        importance=ImportanceSection(
            (importance_reading(fid_imp), importance_reading(val_imp)), narrow_text(study, trials, s.metric_name)
        ),
        learning=learning_section(s.study_name, trials, colours),
        sweep=sweep_section(done, s, study_frontiers(study), StudyRecord.of(study).floor),
        search=search_section(study, trials, fid_imp, s.metric_name, colours),
        samples=samples_section(study, trials, store, s),
        winner=winner_section(study, s, artifact_dir),
        stopping=stop_section(done),
        companions=tuple(companion_section(kind, study, storage, s.metric_name) for kind in KINDS),
        failures=failure_rows(trials),
        hardware=hardware_section(trials),
    )
