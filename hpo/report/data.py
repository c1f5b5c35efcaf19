"""What the report says, computed from a study: summary, score noise and ties, the sampling sweep's
answer, failure groups. Pure functions of the trials; ``model`` builds the page's sections from them
and ``render`` turns those into HTML."""

from __future__ import annotations

import datetime
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo.analysis.noise import Noise, noise_of
from hpo.analysis.ranking import best_first, score_of
from hpo.analysis.seeds import TIE_SDS
from hpo.records import ComboScore, Stage, TrialRecord, ValueStatistic
from hpo.service.study import metric_of, n_trials_of, progress
from hpo.service.trials import continued_numbers, fail_reason
from hpo.spec.counts import pca_dims
from hpo.spec.samplers import DEFAULT_SAMPLER, DEFAULT_SPACING
from hpo.spec.sampling import SamplingConfig, ScreenBy


def complete(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """Complete trials, best first."""
    return best_first(trials)


@dataclass(frozen=True)
class Summary:
    study_name: str
    metric_name: str
    counts: dict[str, int]
    best: FrozenTrial | None
    starts: tuple[FrozenTrial, ...]  # each named baseline's best complete trial ("known start", "by hand"), best first
    noise: Noise
    compute_seconds: float  # finished trials, and running ones so far
    saved_seconds: float  # the budget pruned trials did not use, at the study's mean seconds per kimg
    n_trials: int
    stopped_baseline: FrozenTrial | None = None  # a baseline the pruner stopped (none complete)


def validation_points(t: FrozenTrial, metric: str) -> list[tuple[float, float]]:
    """(kimg, ``metric``) at each evaluation point of the trial's stored curve, in order."""
    return [(p.kimg, value) for p in TrialRecord.current(t).points if (value := p.get(metric)) is not None]


def wall_seconds(trials: Sequence[FrozenTrial], now: datetime.datetime | None = None) -> float:
    """From the first trial's start to the last one's end (or ``now`` while one runs)."""
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    ends = [t.datetime_complete for t in trials if t.datetime_complete is not None]
    if any(t.state == TrialState.RUNNING for t in trials) and now is not None:
        ends.append(now)
    return (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0


def trial_seconds(t: FrozenTrial, now: datetime.datetime | None = None) -> float:
    if t.datetime_start is None:
        return 0.0
    end = t.datetime_complete or (now if t.state == TrialState.RUNNING else None)
    return (end - t.datetime_start).total_seconds() if end is not None else 0.0


def kimg_trained_here(t: FrozenTrial, trials: Sequence[FrozenTrial]) -> float | None:
    """The kimg a complete trial trained itself: its budget, less where the paused trial it continues
    (pruner: rung) had stopped; its checkpoint held that part."""
    record = TrialRecord.of(t)
    if record.budget_kimg is None or record.continues is None:
        return record.budget_kimg
    paused = next((p for p in trials if p.number == record.continues), None)
    before = TrialRecord.of(paused).stopped_at_kimg if paused is not None else None
    return record.budget_kimg - before if before is not None and before < record.budget_kimg else None


def stopped_baseline(t: FrozenTrial, continued: set[int]) -> bool:
    return TrialRecord.of(t).baseline and t.state == TrialState.PRUNED and t.number not in continued


def best_per_start(done: Sequence[FrozenTrial]) -> tuple[FrozenTrial, ...]:
    """Of complete trials (best first), each baseline name's first: a continued or retried start keeps
    its name, so it counts once; a study's unnamed baselines (stored before names) count as one."""
    seen: dict[str, FrozenTrial] = {}
    for t in done:
        if (label := TrialRecord.of(t).baseline_label) and label not in seen:
            seen[label] = t
    return tuple(seen.values())


def start_words(t: FrozenTrial) -> str:
    """A baseline as a sentence names it: its name ("known start", "baseline 2"), or "the baseline"
    (one enqueued before names were stored)."""
    return TrialRecord.of(t).baseline_name or "the baseline"


def capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def summarise_study(study: optuna.Study, trials: Sequence[FrozenTrial]) -> Summary:
    p = progress(study, n_trials_of(study), trials)
    done = complete(trials)
    per_kimg = [trial_seconds(t) / kimg for t in done if (kimg := kimg_trained_here(t, trials))]
    mean_per_kimg = statistics.fmean(per_kimg) if per_kimg else 0.0
    saved = 0.0
    continued = continued_numbers(trials)
    for t in trials:
        record = TrialRecord.of(t)
        if t.state == TrialState.PRUNED and record.budget_kimg is not None and t.number not in continued:
            unused = record.budget_kimg - (record.stopped_at_kimg or 0.0)
            saved += max(unused, 0.0) * mean_per_kimg
    now = datetime.datetime.now()
    counts = {"complete": p.complete, "pruned": p.pruned, "failed": p.failed, "retried": p.retried}
    counts |= {"continued": p.continued} if p.continued else {}
    counts |= {"running": p.running, "waiting": p.waiting}
    return Summary(
        study_name=study.study_name,
        metric_name=metric_of(study),
        counts=counts,
        best=done[0] if done else None,
        starts=best_per_start(done),
        noise=noise_of(trials),
        compute_seconds=sum(trial_seconds(t, now) for t in trials),
        saved_seconds=saved,
        n_trials=p.n_trials,
        stopped_baseline=next((t for t in trials if stopped_baseline(t, continued)), None),
    )


def best_vs_baseline(s: Summary) -> str:
    """The best trial against each enqueued start that completed, and whether each gap is larger than
    the noise."""
    if s.best is not None and not s.starts and (stopped := s.stopped_baseline) is not None:
        return (
            f"{capitalised(start_words(stopped))} (trial #{stopped.number}) was stopped by the pruner "
            f"({fail_reason(stopped)}), so there is no complete baseline to compare with."
        )
    if s.best is None or not s.starts:
        return "No complete baseline to compare with yet: baselines are enqueued first, so wait for them."
    best = score_of(s.best)
    others = [versus(s, best, t) for t in s.starts if t is not s.best]
    if s.best in s.starts:
        head = (
            f"{capitalised(start_words(s.best))} (trial #{s.best.number}, {best:.4g}) is still the best configuration"
        )
        return head + "".join(f"; {o}" for o in others) + "."
    head = f"Trial #{s.best.number} scores {best:.4g}: {'; '.join(others)}"
    if s.noise.sd is None:
        return f"{head}. The noise is not measured yet, so this is not yet evidence."
    return f"{head} (tie margin {s.noise.tie_margin:.2g}, {s.noise.text()})."


def versus(s: Summary, best: float, start: FrozenTrial) -> str:
    """How far ``best`` (the best trial's score) is ahead of one start: "0.12 better than known start
    (#1, 1.11), more than the noise"."""
    base = score_of(start)
    gain, who = base - best, f"{start_words(start)} (#{start.number}, {base:.4g})"
    if s.noise.sd is None:
        return f"{gain:.3g} better than {who}"
    if s.noise.within_tie_margin(best, base):
        return f"tied with {who}: the {gain:.3g} difference is within the noise"
    return f"{gain:.3g} better than {who}, more than the noise"


def sweep_of(t: FrozenTrial) -> list[ComboScore]:
    return TrialRecord.current(t).sweep


SweepRows = Literal["steps", "ema_sigma_rel"]


class StepsRow(NamedTuple):
    """A sweep grid's row: a number of steps and the sampler and spacing that take them, kept apart so
    that no cell compares a Heun step (two network evaluations) with a DDIM one."""

    sampler: str
    spacing: str
    steps: int

    @property
    def label(self) -> str:
        """``10``, or ``10 dpmpp_2m karras`` beside the default sampler and spacing."""
        extra = [n for n, default in ((self.sampler, DEFAULT_SAMPLER), (self.spacing, DEFAULT_SPACING)) if n != default]
        return " ".join([str(self.steps), *extra])


def steps_row(c: SamplingConfig) -> StepsRow:
    return StepsRow(c.sampler, c.spacing, c.steps)


def row_of(c: SamplingConfig, rows: SweepRows) -> Any:
    """The grid row a combination falls in: its steps (with their sampler), or its EMA length."""
    return steps_row(c) if rows == "steps" else c.ema_sigma_rel


def row_label(row: Any) -> str:
    return row.label if isinstance(row, StepsRow) else f"{row:g}"


def sweep_grid(
    scores: Sequence[ComboScore], rows: SweepRows = "steps"
) -> tuple[list[float], list[Any], list[list[float | None]], str]:
    """(guidance values, row values (:class:`StepsRow` or EMA lengths), FID[row][guidance] at the other
    settings' best, stage): screening scores when every combination was screened (equal counts),
    else the full-count ones."""
    stage = grid_stage(scores)
    chosen = [s for s in scores if s.stage == stage and row_of(s.sampling, rows) is not None]
    scales = sorted({s.sampling.guidance_scale for s in chosen})
    steps = sorted({row_of(s.sampling, rows) for s in chosen})
    grid: list[list[float | None]] = [[None] * len(scales) for _ in steps]
    for s in chosen:
        i, j = steps.index(row_of(s.sampling, rows)), scales.index(s.sampling.guidance_scale)
        current = grid[i][j]
        grid[i][j] = s.rank_value if current is None else min(current, s.rank_value)
    return scales, steps, grid, stage


def grid_stage(scores: Sequence[ComboScore]) -> Stage:
    """The stage that scored every combination: screening when there was one (equal counts)."""
    return "screen" if any(s.stage == "screen" for s in scores) else "full"


def grid_label(scores: Sequence[ComboScore], metric: str) -> str:
    """What a sweep grid shows: the screen's statistic, or ``metric`` (FID or classifier-FID)."""
    by = grid_statistic(scores)
    if by == "fid":
        return metric
    count = next(s.num_samples for s in scores if s.stage == "screen")
    if by == "kid":
        return f"KID of {count} screening samples"
    return f"{metric} of {count} screening samples in {pca_dims(count, count)} principal components"


def grid_statistic(scores: Sequence[ComboScore]) -> ScreenBy:
    """What the grid's numbers are: the screen's statistic when it ranked by one, else FID."""
    stage = grid_stage(scores)
    return next((s.ranked_by for s in scores if s.stage == stage), "fid")


def combo_cells(scores: Sequence[ComboScore]) -> dict[tuple[StepsRow, float], float]:
    """{(steps row, guidance): the grid's value} of one trial's sweep (the screen's statistic when it
    ranked by one)."""
    scales, steps, grid, _ = sweep_grid(scores)
    return {(n, w): v for i, n in enumerate(steps) for j, w in enumerate(scales) if (v := grid[i][j]) is not None}


def combo_ranks(scores: Sequence[ComboScore]) -> dict[tuple[StepsRow, float], int]:
    """Each combination's rank within its own trial's sweep (1 = that trial's best)."""
    cells = combo_cells(scores)
    return {k: 1 + sum(v < cells[k] for v in cells.values()) for k in cells}


def relative_sweep(sweeps: Sequence[Sequence[ComboScore]]) -> dict[tuple[StepsRow, float], float]:
    """{(steps row, guidance): that combination's rank within each trial's sweep, averaged over the
    trials} (1 = best in every trial). Ranks, not score gaps: a weak trial's large gaps (a baseline
    scoring 130 beside a winner scoring 5) would otherwise outvote the winner's own sweep."""
    ranks: dict[tuple[StepsRow, float], list[int]] = defaultdict(list)
    for scores in sweeps:
        for key, rank in combo_ranks(scores).items():
            ranks[key].append(rank)
    return {k: statistics.fmean(v) for k, v in ranks.items()}


def cell_words(c: SamplingConfig) -> str:
    """A grid cell's best combination in words: guidance (and its interval), steps and their sampler."""
    interval = f" for σ in {c.interval_text}" if c.interval_set else ""
    return f"guidance {c.guidance_scale:g}{interval} at {c.steps_words}"


NO_NOISE_SHARE = 0.05  # without a measured noise, combinations this close to the best count as level


def combo_margin(statistic: ValueStatistic | None, noise: Noise, best: float) -> tuple[float, str]:
    """How close to one trial's best combination another of its completed combinations must come to be
    level with it, and why: 2 sd of their difference on the same samples where the sweep measured it
    (the noise the two values share cancels); for a trial stored before it was measured, the study's
    tie margin of two independent values (wider); with neither, NO_NOISE_SHARE of the best."""
    if statistic is not None and statistic.paired_sd is not None:
        sd = statistic.paired_sd
        return TIE_SDS * sd, f"2 × the sd of a difference between two combinations on the same samples, {sd:.2g}"
    if noise.sd is not None:
        return noise.tie_margin, f"2·√2 × the score's noise {noise.sd:.2g}: no difference noise stored with this trial"
    return NO_NOISE_SHARE * best, f"{NO_NOISE_SHARE:.0%} of it: no noise measured"


def sweep_answer(done: Sequence[FrozenTrial], noise: Noise, top: int = 5) -> str:
    """Which sampling combination, for the best trial's own model: its best completed combination
    (the trial's value) and the cheapest completed one within the noise of their difference
    (:func:`combo_margin`), both at the trial's own count; then how far the trials behind it agree
    (by rank within each trial, never by averaging their scores)."""
    sweeps = [(t, scores) for t in done[:top] if len(scores := sweep_of(t)) > 1]
    if not sweeps:
        return "No sampling sweep yet: list several guidance_scale / steps values under sampling in the spec."
    best_trial, scores = sweeps[0]
    full = [s for s in scores if s.stage == "full" and math.isfinite(s.score)]
    if not full:
        return f"The best trial (#{best_trial.number}) completed no sampling combination to the full count."
    best = min(full, key=lambda s: s.score)
    margin, why = combo_margin(TrialRecord.of(best_trial).statistic, noise, best.score)
    near = [s for s in full if s.score - best.score <= margin]
    cheapest = min(near, key=lambda s: (s.evaluations(True), s.score))
    text = (
        f"For the best trial (#{best_trial.number}): {cell_words(best.sampling)} samples best "
        f"({best.score:.3g} at {best.num_samples} samples, {best.evaluations(True)} network evaluations per image); "
    )
    if cheapest.evaluations(True) >= best.evaluations(True):
        text += f"no cheaper combination it completed comes within {margin:.2g} of that ({why})."
    else:
        text += (
            f"{cell_words(cheapest.sampling)} ({cheapest.evaluations(True)} evaluations) comes within {margin:.2g} "
            f"of that at {cheapest.score:.3g} ({why})."
        )
    best_steps, best_w = steps_row(best.sampling), best.sampling.guidance_scale
    cells = combo_cells(scores)
    others = [combo_ranks(sc) for _, sc in sweeps[1:]]
    others = [r for r in others if (best_steps, best_w) in r]
    if not others:
        return text
    agree = sum(r[(best_steps, best_w)] == 1 for r in others)
    mean_rank = statistics.fmean(r[(best_steps, best_w)] for r in others)
    return text + (
        f" In the next {len(others)} trial(s) that combination is the best in {agree} and ranks "
        f"{mean_rank:.1f} of {len(cells)} on average (each trial's own sweep, 1 = its best)."
    )


@dataclass(frozen=True)
class FailureGroup:
    reason: str
    trials: list[int]
    shared: list[str]  # readings like "lr ≥ 0.006 in 5 of 6"


def failure_groups(trials: Sequence[FrozenTrial]) -> list[FailureGroup]:
    groups: dict[str, list[FrozenTrial]] = defaultdict(list)
    continued = continued_numbers(trials)  # paused at the rung and continued: stopped for nothing
    for t in trials:
        reason = fail_reason(t)
        if reason and t.number not in continued:
            groups[reason].append(t)
    finished = [t for t in trials if t.params]
    return [FailureGroup(r, [t.number for t in g], shared_ranges(g, finished)) for r, g in sorted(groups.items())]


def shared_ranges(group: Sequence[FrozenTrial], everyone: Sequence[FrozenTrial]) -> list[str]:
    """Parameter regions that a failure group concentrates in, compared with all trials."""
    out = []
    for name in sorted({k for t in group for k in t.params}):
        values = [t.params[name] for t in group if name in t.params]
        others = [t.params[name] for t in everyone if name in t.params and t not in group]
        if len(values) < 2:
            continue
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values + others):
            out += _numeric_reading(name, [float(v) for v in values], [float(v) for v in others])
            continue
        texts = [str(x) for x in values]
        top = max(set(texts), key=texts.count)
        share_others = sum(1 for v in others if str(v) == top) / len(others) if others else 0.0
        if texts.count(top) / len(values) >= 0.75 and share_others < texts.count(top) / len(values):
            out.append(f"{name} = {top} in {texts.count(top)} of {len(values)}")
    return out


def _numeric_reading(name: str, values: list[float], others: list[float]) -> list[str]:
    if not others:
        return []
    low = sorted(values)[len(values) // 4]  # most of the group lies above this
    high = sorted(values)[-(len(values) // 4) - 1]
    above = sum(1 for v in values if v >= low)
    if sum(1 for v in others if v >= low) / len(others) < 0.5 * above / len(values):
        return [f"{name} ≥ {bound_text(low)} in {above} of {len(values)}"]
    below = sum(1 for v in values if v <= high)
    if sum(1 for v in others if v <= high) / len(others) < 0.5 * below / len(values):
        return [f"{name} ≤ {bound_text(high)} in {below} of {len(values)}"]
    return []


def bound_text(v: float) -> str:
    return f"{v:.3g}" if math.isfinite(v) else str(v)
