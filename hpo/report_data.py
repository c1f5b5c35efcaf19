"""What the report says, computed from a study: summary, importances, failure groups.
Pure functions of the trials; ``hpo/report.py`` turns them into HTML."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.importance import FanovaImportanceEvaluator
from optuna.trial import FrozenTrial, TrialState

from hpo.commands.status import fail_reason, metric_of
from hpo.study import SPEC_ATTR, progress


@dataclass(frozen=True)
class Summary:
    study_name: str
    metric_name: str
    counts: dict[str, int]
    best: FrozenTrial | None
    compute_seconds: float
    saved_seconds: float  # the budget pruned trials did not use, at the study's mean seconds per kimg
    n_trials: int


def spec_of(study: optuna.Study) -> dict[str, Any]:
    return dict(json.loads(study.user_attrs.get(SPEC_ATTR, "{}")))


def trial_seconds(t: FrozenTrial) -> float:
    if t.datetime_start is None or t.datetime_complete is None:
        return 0.0
    return (t.datetime_complete - t.datetime_start).total_seconds()


def summarise(study: optuna.Study, trials: Sequence[FrozenTrial]) -> Summary:
    n_trials = int(spec_of(study).get("study", {}).get("n_trials", len(trials)))
    p = progress(study, n_trials, trials)
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    best = min(complete, key=lambda t: float(t.value)) if complete else None  # type: ignore[arg-type]
    per_kimg = [
        trial_seconds(t) / float(t.user_attrs["budget_kimg"]) for t in complete if t.user_attrs.get("budget_kimg")
    ]
    mean_per_kimg = sum(per_kimg) / len(per_kimg) if per_kimg else 0.0
    saved = 0.0
    for t in trials:
        if t.state == TrialState.PRUNED and "budget_kimg" in t.user_attrs:
            unused = float(t.user_attrs["budget_kimg"]) - float(t.user_attrs.get("stopped_at_kimg", 0.0))
            saved += max(unused, 0.0) * mean_per_kimg
    return Summary(
        study_name=study.study_name,
        metric_name=metric_of(study),
        counts={
            "complete": p.complete,
            "pruned": p.pruned,
            "failed": p.failed,
            "running": p.running,
            "waiting": p.waiting,
        },
        best=best,
        compute_seconds=sum(trial_seconds(t) for t in trials),
        saved_seconds=saved,
        n_trials=n_trials,
    )


@dataclass(frozen=True)
class Importances:
    target: str
    default: dict[str, float] = field(default_factory=dict)  # Optuna's default evaluator (PED-ANOVA)
    fanova: dict[str, float] = field(default_factory=dict)
    note: str = ""

    def reading(self) -> str:
        if not self.default:
            return self.note
        (top, share), *_ = sorted(self.default.items(), key=lambda kv: -kv[1])
        total = sum(self.default.values()) or 1.0
        return f"{top} matters most for {self.target}: {share / total:.0%} of the total importance."


def importances(study: optuna.Study, *, target_attr: str | None, label: str) -> Importances:
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if target_attr is not None:
        complete = [t for t in complete if isinstance(t.user_attrs.get(target_attr), (int, float))]
    varied = {k for t in complete for k in t.params if len({str(u.params.get(k)) for u in complete}) > 1}
    if len(complete) < 3 or not varied:
        return Importances(
            label,
            note=f"Importances for {label} need at least 3 complete trials with varied "
            f"parameters ({len(complete)} complete so far).",
        )

    def target(t: FrozenTrial) -> float:
        return float(t.user_attrs[target_attr]) if target_attr else float(t.value)  # type: ignore[arg-type]

    try:
        default = optuna.importance.get_param_importances(study, target=target)
        fanova = optuna.importance.get_param_importances(
            study, target=target, evaluator=FanovaImportanceEvaluator(seed=0)
        )
    except (ValueError, RuntimeError) as err:
        return Importances(label, note=f"Importances for {label} could not be computed: {err}")
    return Importances(label, dict(default), dict(fanova))


@dataclass(frozen=True)
class FailureGroup:
    reason: str
    trials: list[int]
    shared: list[str]  # readings like "lr ≥ 0.006 in 5 of 6"


def failure_groups(trials: Sequence[FrozenTrial]) -> list[FailureGroup]:
    groups: dict[str, list[FrozenTrial]] = defaultdict(list)
    for t in trials:
        reason = fail_reason(t) if t.state in (TrialState.FAIL, TrialState.PRUNED) else None
        if reason:
            groups[reason].append(t)
    finished = [t for t in trials if t.params]
    return [FailureGroup(r, [t.number for t in g], shared_ranges(g, finished)) for r, g in sorted(groups.items())]


def shared_ranges(group: Sequence[FrozenTrial], everyone: Sequence[FrozenTrial]) -> list[str]:
    """Parameter regions that a failure group concentrates in, compared with all trials."""
    out = []
    names = sorted({k for t in group for k in t.params})
    for name in names:
        values = [t.params[name] for t in group if name in t.params]
        others = [t.params[name] for t in everyone if name in t.params and t not in group]
        if len(values) < 2:
            continue
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values + others):
            out += _numeric_reading(name, [float(v) for v in values], [float(v) for v in others])
        else:
            top = max(set(map(str, values)), key=lambda v: [str(x) for x in values].count(v))
            count = [str(x) for x in values].count(top)
            share_others = sum(1 for v in others if str(v) == top) / len(others) if others else 0.0
            if count / len(values) >= 0.75 and share_others < count / len(values):
                out.append(f"{name} = {top} in {count} of {len(values)}")
    return out


def _numeric_reading(name: str, values: list[float], others: list[float]) -> list[str]:
    if not others:
        return []
    low = sorted(values)[len(values) // 4]  # most of the group lies above this
    high = sorted(values)[-(len(values) // 4) - 1]
    above = sum(1 for v in values if v >= low)
    if sum(1 for v in others if v >= low) / len(others) < 0.5 * above / len(values):
        return [f"{name} ≥ {_fmt(low)} in {above} of {len(values)}"]
    below = sum(1 for v in values if v <= high)
    if sum(1 for v in others if v <= high) / len(others) < 0.5 * below / len(values):
        return [f"{name} ≤ {_fmt(high)} in {below} of {len(values)}"]
    return []


def _fmt(v: float) -> str:
    return f"{v:.3g}" if math.isfinite(v) else str(v)
