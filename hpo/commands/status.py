"""``hpo status``: studies, or one study's trials, as plain-text tables. States and reasons are the
same words as in the report (``hpo.service.trials``)."""

from __future__ import annotations

from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo.scoring.progress import copy_floor_of, fidelity_pair, fidelity_text, floor_reading
from hpo.scoring.stopping import points_from_curve, stop_verdict
from hpo.service.placement import Placement
from hpo.service.storage import open_storage
from hpo.service.study import FLOOR_ATTR, Progress, load, metric_of, n_trials_of, progress
from hpo.service.trials import (
    best_own,
    carried_text,
    current_attrs,
    fail_reason,
    leak_text,
    noise_of,
    own_trials,
    retried_numbers,
)
from hpo.service.urls import redact
from hpo.spec.sampling import SamplingConfig
from hpo.training.telemetry import hardware_of
from hpo.training.validation import PRUNING_METRIC


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header]] + [[cell_text(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cell_text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def best_text(study: optuna.Study, p: Progress) -> str:
    """The best score with the study's pooled noise (±, from second independent sample sets) when measured."""
    if p.best is None:
        return "-"
    noise = noise_of(own_trials(study))
    return f"{p.best:.4g} ± {noise.sd:.2g}" if noise.sd is not None else f"{p.best:.4g}"


def progress_line(p: Progress, metric: str = "FID", best: str | None = None) -> str:
    best = best if best is not None else (f"{p.best:.4g}" if p.best is not None else "-")
    retried = f", {p.retried} retried" if p.retried else ""
    return (
        f"{p.finished}/{p.n_trials} finished: {p.complete} complete, {p.pruned} pruned, {p.failed} failed{retried}, "
        f"{p.running} running | best {metric} {best}"
    )


def _state(t: FrozenTrial, retried: dict[int, int]) -> str:
    if t.number in retried:
        return f"{t.state.name} → #{retried[t.number]}"
    return t.state.name


def _sampling(t: FrozenTrial) -> str | None:
    choice = current_attrs(t).get("sampling")
    if not isinstance(choice, dict):
        return None
    return SamplingConfig.from_dict(choice).label


def _last_val(t: FrozenTrial) -> float | None:
    curve = current_attrs(t).get("curve")
    if not isinstance(curve, dict) or not curve:
        return None
    value = curve[max(curve, key=int)].get(PRUNING_METRIC)
    return float(value) if isinstance(value, (int, float)) else None


def _last_gap(t: FrozenTrial) -> float | None:
    curve = current_attrs(t).get("curve")
    if not isinstance(curve, dict) or not curve:
        return None
    value = curve[max(curve, key=int)].get("gap")
    return float(value) if isinstance(value, (int, float)) else None


def _stop(t: FrozenTrial, noise: float | None, copy_floor: float | None) -> str | None:
    """The stop verdict of a trial whose evaluation points were scored (budget ladders): a word and
    since when."""
    curve = current_attrs(t).get("curve")
    points = points_from_curve(curve) if isinstance(curve, dict) else []
    if not points:
        return None
    v = stop_verdict(points, noise=noise, copy_floor=copy_floor)
    return f"{v.kind} since {v.since_kimg:.3g} kimg" if v.since_kimg is not None else v.kind


def _fidelity(t: optuna.trial.FrozenTrial) -> str | None:
    pair = fidelity_pair(current_attrs(t))
    return None if pair is None else f"{pair[0]:.2f}/{pair[1]:.2f}"


def trials_table(study: optuna.Study, metric: str) -> str:
    """One row per attempt: the score only for complete trials, the validation metric and the
    generalisation gap at the last evaluation point for every trial that reached one (pruned trials
    stop there), and the stop verdict where evaluation points were scored."""
    trials = own_trials(study)
    retried = retried_numbers(trials)
    names = sorted({k for t in trials for k in t.params})
    noise = noise_of(trials).sd
    copy_floor = copy_floor_of(study.user_attrs.get(FLOOR_ATTR))
    rows = [
        [
            t.number,
            _state(t, retried),
            t.value if t.state == TrialState.COMPLETE else None,
            _last_val(t),
            _last_gap(t),
            *(t.params.get(n) for n in names),
            _sampling(t),
            _fidelity(t),
            _stop(t, noise, copy_floor),
            hardware.cell() if (hardware := hardware_of(current_attrs(t))) is not None else None,
            placement.cell() if (placement := Placement.from_attrs(t.user_attrs)) is not None else None,
            fail_reason(t),
        ]
        for t in trials
    ]
    header = [
        "#", "state", metric, f"{PRUNING_METRIC}@last", "gap@last", *names, "best sampling", "prec/recall", "stop",
        "hardware", "ran on", "reason",
    ]  # fmt: skip
    return table(rows, header)


def status_text(url: str, study_name: str | None) -> str:
    storage = open_storage(url, must_exist=True)
    if study_name is None:
        summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
        if not summaries:
            return f"no studies in {redact(url)}"
        rows = []
        for s in summaries:
            study = optuna.load_study(study_name=s.study_name, storage=storage)
            p = progress(study, n_trials_of(study))
            rows.append([s.study_name, progress_line(p, metric_of(study), best_text(study, p))])
        return table(rows, ["study", "progress"])
    study = load(storage, study_name, redact(url))
    p, metric = progress(study, n_trials_of(study)), metric_of(study)
    floor = floor_reading(p.best, noise_of(own_trials(study)), study.user_attrs.get(FLOOR_ATTR))
    leak = leak_text(own_trials(study))
    best = best_own(study)
    second = fidelity_text(best.user_attrs, study.user_attrs.get(FLOOR_ATTR)) if best is not None else None
    second = f"best trial: {second}" if second else None
    lines = (floor, second, leak, carried_text(study))
    head = progress_line(p, metric, best_text(study, p)) + "".join(f"\n{line}" for line in lines if line)
    return head + "\n\n" + trials_table(study, metric)
