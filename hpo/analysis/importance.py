"""Which parameters mattered, with how sure we are.

Two targets: the final score over complete trials, and the validation metric at the latest
evaluation point that every finished trial reached (pruned trials stop at an evaluation point, so
each has a value there; a parameter that only affects sampling never moves it, so it is never ranked
for it). Two evaluators (Optuna's default PED-ANOVA, and fANOVA), each bootstrapped over trials:
resample the trials, recompute, and read the spread. Few trials, an unstable top parameter, or
evaluators that disagree are said in plain words instead of being hidden behind one bar chart.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import optuna
from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator
from optuna.trial import FrozenTrial, TrialState

from hpo.records import PRUNING_METRIC, TrialRecord, named
from hpo.spec.sampling import SAMPLING_FIELDS

MIN_TRIALS = 10  # below this, importances are a hint, not a ranking
BOOTSTRAP_ROUNDS = 50
STABLE_SHARE = 0.7  # the top parameter must stay on top in this share of resamples


@dataclass(frozen=True)
class Importances:
    target: str
    n_trials: int
    default: dict[str, float] = field(default_factory=dict)  # PED-ANOVA (Optuna's default)
    fanova: dict[str, float] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # 10th-90th percentile, fANOVA
    medians: dict[str, float] = field(default_factory=dict)  # the bootstrap's median: inside its interval
    top_share: float = 0.0  # share of resamples in which fANOVA's top parameter stays on top
    note: str = ""
    confounded: dict[str, float] = field(default_factory=dict)  # other parameter → distance correlation of draws

    @property
    def ranked(self) -> list[str]:
        return sorted(self.fanova, key=lambda k: -self.fanova[k])

    def reading(self) -> str:
        """One line: the parameters that matter and how sure that is."""
        if not self.fanova:
            return self.note
        top = self.ranked[0]
        lo, hi = self.intervals.get(top, (self.fanova[top], self.fanova[top]))
        middle = self.medians.get(top, self.fanova[top])
        head = (
            f"For {self.target}, {top} matters most: fANOVA importance {middle:.2f} (bootstrap median, 80% "
            f"interval {lo:.2f}–{hi:.2f}; {self.fanova[top]:.2f} on all trials at once), on top in "
            f"{self.top_share:.0%} of {BOOTSTRAP_ROUNDS} resamples of {self.n_trials} trials."
        )
        ped_top = max(self.default, key=lambda k: self.default[k]) if self.default else top
        doubts = []
        if self.n_trials < MIN_TRIALS:
            doubts.append(f"only {self.n_trials} trials: treat this as a hint, not a ranking")
        if self.top_share < STABLE_SHARE:
            doubts.append("the ranking changes when trials are resampled: it is not stable")
        if ped_top != top:
            doubts.append(f"PED-ANOVA ranks {ped_top} first instead: the evaluators disagree on the top parameter")
        for other, dcor in self.confounded.items():
            doubts.append(
                f"in these {self.n_trials} trials the drawn values of {top} go with those of {other} (distance "
                f"correlation {dcor:.2f}, above {CONFOUND_QUANTILE:.0%} of {CONFOUND_SHUFFLES} shuffles, "
                "corrected for the parameters tested): "
                "their effects cannot be told apart"
            )
        if top == "batch_size":
            doubts.append("at a fixed budget in kimg a larger batch also takes fewer optimizer steps: its effect "
                          "includes the step count")  # fmt: skip
        second = [k for k in self.ranked[1:] if self.intervals.get(k, (0.0, 0.0))[1] >= lo]
        if second and not doubts:
            doubts.append(f"{', '.join(second)} overlap(s) with it within the bootstrap intervals")
        return head + (" Caution: " + "; ".join(doubts) + "." if doubts else " The ranking is stable.")


Target = Callable[[FrozenTrial], float | None]


def score_target(t: FrozenTrial) -> float | None:
    return float(t.value) if t.state == TrialState.COMPLETE and t.value is not None else None


def common_eval_point(trials: Sequence[FrozenTrial]) -> int | None:
    """The latest evaluation index that every finished trial with a curve reached."""
    reached = [points[-1].index for t in trials if t.state.is_finished() and (points := TrialRecord.current(t).points)]
    return min(reached) if reached else None


def validation_target(index: int) -> Target:
    def target(t: FrozenTrial) -> float | None:
        point = TrialRecord.current(t).point(index)
        value = point.entry.val_rel if point is not None else None
        return value if value is not None and np.isfinite(value) else None

    return target


def importances(
    trials: Sequence[FrozenTrial], target: Target, *, label: str, exclude: Sequence[str] = ()
) -> Importances:
    rows = [(named(t), v) for t in trials if (v := target(t)) is not None and t.params]
    names = sorted({k for t, _ in rows for k in t.params if k not in exclude})
    varied = [k for k in names if len({str(t.params.get(k)) for t, _ in rows}) > 1]
    if len(rows) < 3 or not varied:
        return Importances(
            label, len(rows), note=f"Importances for {label} need at least 3 trials with varied parameters "
            f"({len(rows)} so far): run more trials.",
        )  # fmt: skip
    try:
        default = _evaluate(rows, varied, PedAnovaImportanceEvaluator())
        fanova = _evaluate(rows, varied, FanovaImportanceEvaluator(seed=0))
        top = max(fanova, key=lambda k: fanova[k])
        intervals, medians, share = _bootstrap(rows, varied, top)
    except (ValueError, RuntimeError) as err:
        return Importances(label, len(rows), note=f"Importances for {label} could not be computed: {err}")
    confounded = confounded_with(rows, varied, top)
    return Importances(label, len(rows), default, fanova, intervals, medians, share, confounded=confounded)


CONFOUND_SHUFFLES, CONFOUND_QUANTILE, CONFOUND_MIN, CONFOUND_MAX_ROWS = 300, 0.95, 0.3, 150


def confounded_with(rows: Sequence[tuple[FrozenTrial, float]], params: Sequence[str], top: str) -> dict[str, float]:
    """The parameters whose drawn values depend on ``top``'s over these trials: the distance
    correlation of their values (numbers by rank, and by the rank's distance from the middle, so that
    "every large batch drew an extreme lr", dependence with no monotone trend, shows; choices one-hot),
    the larger of those views, above ``CONFOUND_QUANTILE`` of the same statistic with one side
    shuffled (Bonferroni-corrected over the parameters tested), and at least ``CONFOUND_MIN``."""
    rng = np.random.default_rng(0)
    if len(rows) > CONFOUND_MAX_ROWS:  # the test's power needs no more; its cost grows with the square
        rows = [rows[i] for i in sorted(rng.choice(len(rows), CONFOUND_MAX_ROWS, replace=False))]
    views = {k: _views([t.params.get(k) for t, _ in rows]) for k in params}
    others = [k for k in params if k != top]
    level = 1 - (1 - CONFOUND_QUANTILE) / max(1, len(others))
    out = {}
    for other in others:

        def statistic(order: np.ndarray, other: str = other) -> float:
            return max(distance_correlation(x, y[order]) for x in views[top] for y in views[other])

        n = len(rows)
        observed = statistic(np.arange(n))
        null = [statistic(rng.permutation(n)) for _ in range(CONFOUND_SHUFFLES)]
        if observed >= CONFOUND_MIN and observed > float(np.quantile(null, level)):
            out[other] = observed
    return out


def _views(values: Sequence[object]) -> list[np.ndarray]:
    """Numbers as their ranks and as the ranks' distance from the middle (scale-free: a log-drawn lr
    and a linear one alike); choices one-hot."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) and len(set(values)) > 2:
        ranks = np.argsort(np.argsort(np.asarray(values, dtype=float))).astype(float)
        return [ranks[:, None], np.abs(ranks - ranks.mean())[:, None]]
    labels = sorted({str(v) for v in values})
    return [np.eye(len(labels))[[labels.index(str(v)) for v in values]]]


def distance_correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Székely's distance correlation of two samples (rows are observations): 0 only when independent."""

    def centred(z: np.ndarray) -> np.ndarray:
        d = np.linalg.norm(z[:, None, :] - z[None, :, :], axis=-1)
        return np.asarray(d - d.mean(axis=0) - d.mean(axis=1)[:, None] + d.mean())

    a, b = centred(x), centred(y)
    dcov, vx, vy = (a * b).mean(), (a * a).mean(), (b * b).mean()
    return float(np.sqrt(max(dcov, 0.0) / np.sqrt(vx * vy))) if vx > 0 and vy > 0 else 0.0


def _evaluate(rows: Sequence[tuple[FrozenTrial, float]], params: Sequence[str], evaluator: object) -> dict[str, float]:
    """Importances of ``params`` for the given (trial, value) rows, through an in-memory study (the
    evaluators read complete trials; pruned trials enter with their validation value)."""
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), study_name="importances")
    for t, value in rows:
        shown = {k: t.params[k] for k in params if k in t.params}
        dists = {k: t.distributions[k] for k in shown}
        study.add_trial(optuna.create_trial(params=shown, distributions=dists, value=value))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = optuna.importance.get_param_importances(study, evaluator=evaluator, params=list(params))  # type: ignore[arg-type]
    return {k: float(v) for k, v in out.items()}


def _bootstrap(
    rows: Sequence[tuple[FrozenTrial, float]], params: Sequence[str], top: str
) -> tuple[dict[str, tuple[float, float]], dict[str, float], float]:
    """Per parameter: the 10th-90th percentile and the median of fANOVA over resampled trials (a
    resample's trees differ from the full set's, so its point estimate may fall outside; the median
    cannot), and the share of resamples that keep ``top`` on top."""
    rng = np.random.default_rng(0)
    samples: dict[str, list[float]] = {k: [] for k in params}
    on_top = 0
    for _ in range(BOOTSTRAP_ROUNDS):
        picked = [rows[i] for i in rng.integers(0, len(rows), len(rows))]
        try:
            result = _evaluate(picked, params, FanovaImportanceEvaluator(n_trees=16, seed=0))
        except (ValueError, RuntimeError):
            continue
        for k in params:
            samples[k].append(result.get(k, 0.0))
        on_top += max(result, key=lambda k: result[k]) == top
    intervals = {k: (float(np.percentile(v, 10)), float(np.percentile(v, 90))) for k, v in samples.items() if v}
    medians = {k: float(np.median(v)) for k, v in samples.items() if v}
    return intervals, medians, on_top / BOOTSTRAP_ROUNDS


def study_importances(trials: Sequence[FrozenTrial], metric: str) -> tuple[Importances, Importances]:
    """(for the score, for the validation metric at the latest common evaluation point)."""
    score = importances(trials, score_target, label=metric)
    index = common_eval_point(trials)
    if index is None:
        return score, Importances("the validation metric", 0, note="No trial has reached an evaluation point yet.")
    val = importances(
        [t for t in trials if t.state.is_finished()],
        validation_target(index),
        label=f"the validation metric ({PRUNING_METRIC}) at evaluation point {index}",
        exclude=SAMPLING_FIELDS,
    )
    return score, val
