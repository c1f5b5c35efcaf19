"""When to stop a long run, and what a longer one would reach.

:func:`stop_verdict` reads a run's evaluation points (score, copy share) against the score's noise and
the copy floor of real held-out images: *still improving* (by so much per doubling of the budget,
more than the noise), *plateaued since X kimg* (the last two doublings within the noise), or
*copying began at Y kimg*. :func:`forecast` fits score = a + b·kimg^−c (a saturating power law) and
says what the run would score at a target budget, with a bootstrap interval; it refuses to reach
more than :data:`MAX_EXTRAPOLATION` × past the last point.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import curve_fit

from hpo.analysis.noise import Noise
from hpo.records import CurvePoint, StopVerdict
from hpo.spec.rules import MAX_EXTRAPOLATION

MIN_POINTS = 3


@dataclass(frozen=True)
class Point:
    kimg: float
    score: float
    copy_low: float | None = None  # bootstrap 95 % interval of the copy share (the larger of pixels and features)
    copy_share: float | None = None


def points_from_curve(curve: Sequence[CurvePoint]) -> list[Point]:
    """Evaluation points that carry a score (a trial's or summary.json's ``points``, or ``curve_points``
    of the curve ``hpo train`` is writing)."""
    out = [Point(p.kimg, p.score, p.worst_copy("_low"), p.worst_copy()) for p in curve if p.score is not None]
    return sorted(out, key=lambda p: p.kimg)


def stop_verdict(points: Sequence[Point], *, noise: float | None, copy_floor: float | None = None) -> StopVerdict:
    """``noise``: the sd of one score (re-sampling the same weights); None estimates it from the
    scatter around the trend of the last two doublings. ``copy_floor``: the upper end of the held-out
    images' copy-share interval."""
    pts = sorted((p for p in points if math.isfinite(p.score) and p.kimg > 0), key=lambda p: p.kimg)
    if len(pts) < MIN_POINTS:
        return StopVerdict("too_early", f"too early to tell: {len(pts)} scored evaluation point(s), need {MIN_POINTS}")
    onset = copy_onset(pts, copy_floor)
    if onset is not None:
        last = pts[-1]
        return StopVerdict(
            "copying",
            f"copying began at {onset:.3g} kimg: {100 * (last.copy_share or 0):.0f} % of samples copy a training "
            f"image at {last.kimg:.3g} kimg (held-out real images: up to {100 * (copy_floor or 0):.0f} %); "
            "stop, or use more data / augmentation / a smaller model",
            since_kimg=onset,
        )
    recent = [p for p in pts if p.kimg >= pts[-1].kimg / 4 - 1e-9]
    if len(recent) < 2:
        recent = pts[-2:]
    x = np.log2([p.kimg for p in recent])
    y = np.array([p.score for p in recent])
    slope = float(np.polyfit(x, y, 1)[0]) if np.ptp(x) > 0 else 0.0
    sd = noise if noise is not None and noise > 0 else _scatter(x, y)
    margin = Noise(sd, 0).tie_margin
    span = math.log2(pts[-1].kimg / recent[0].kimg)
    noise_text = f"noise sd {sd:.3g}" + ("" if noise else ", estimated from the curve's scatter")
    if -slope * span > margin:
        return StopVerdict(
            "improving",
            f"still improving: {slope:+.3g} per doubling of the budget over the last {span:.1f} doublings, "
            f"{slope * span:+.3g} in all (a gain larger than the tie margin {margin:.3g}; {noise_text}); train longer",
            per_doubling=slope,
        )
    best = min(pts, key=lambda p: p.score)
    worse = pts[-1].score - best.score > margin
    if worse:
        since = best.kimg
        text = f"no better since {since:.3g} kimg: the last score is {pts[-1].score - best.score:.3g} above the best"
    else:
        since = next(p.kimg for p in pts if all(q.score - best.score <= margin for q in pts if q.kimg >= p.kimg))
        text = f"plateaued since {since:.3g} kimg: every later score is within the noise of the best"
    return StopVerdict("plateau", f"{text} ({slope:+.3g} per doubling, {noise_text}); stop here", since, slope)


FLAT_PER_DOUBLING = 0.02  # the validation metric moving less than 2 % per doubling of the budget is flat


def validation_trend(
    points: Sequence[tuple[float, float]], metric: str, flat: float = FLAT_PER_DOUBLING
) -> StopVerdict:
    """A trial's own curve of the validation metric ((kimg, value), lower is better) read for *when to
    stop* before any budget ladder exists: still improving over its last doubling of the budget by
    more than ``flat`` (relative), else flat (or rising) since the first point from which every later
    doubling moved it less than that."""
    pts = sorted((k, v) for k, v in points if k > 0 and math.isfinite(v) and v > 0)
    if len(pts) < 2:
        return StopVerdict("too_early", f"too early to tell: {len(pts)} evaluation point(s) of {metric}, need 2")
    last_k, last_v = pts[-1]
    half_k, half_v = min(pts[:-1], key=lambda p: abs(math.log2(p[0] / (last_k / 2))))
    doublings = math.log2(last_k / half_k)
    change = (last_v / half_v) ** (1 / doublings) - 1  # relative change per doubling
    window = f"{metric} {half_v:.3g} → {last_v:.3g} from {half_k:.3g} to {last_k:.3g} kimg"
    if change < -flat:
        return StopVerdict(
            "improving", f"still improving: {window} ({100 * change:+.0f} % per doubling): a longer budget should pay",
            per_doubling=change,
        )  # fmt: skip
    if change > flat:
        best_k = min(pts, key=lambda p: p[1])[0]
        return StopVerdict(
            "plateau", f"no better since {best_k:.3g} kimg: {window} ({100 * change:+.0f} % per doubling): a longer "
            "budget alone will not help this configuration", since_kimg=best_k, per_doubling=change,
        )  # fmt: skip
    since = pts[-2][0]
    for a, b in reversed(list(itertools.pairwise(pts))):
        if abs((b[1] / a[1]) ** (1 / math.log2(b[0] / a[0])) - 1) >= flat:
            break
        since = a[0]
    return StopVerdict(
        "plateau", f"flat since {since:.3g} kimg: {window} ({100 * change:+.0f} % per doubling; under "
        f"{100 * flat:.0f} % counts as flat): a longer budget alone is unlikely to help this configuration",
        since_kimg=since, per_doubling=change,
    )  # fmt: skip


def _scatter(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 3:
        return float(np.std(y, ddof=1)) if len(y) > 1 else 0.0
    residual = y - np.polyval(np.polyfit(x, y, 1), x)
    return float(np.sqrt(np.sum(residual**2) / (len(x) - 2)))


def copy_onset(points: Sequence[Point], floor: float | None) -> float | None:
    """The first kimg from which every later point's copy interval lies above the floor."""
    if floor is None:
        return None
    onset = None
    for p in points:
        above = p.copy_low is not None and p.copy_low > floor
        onset = (onset if onset is not None else p.kimg) if above else None
    return onset


@dataclass(frozen=True)
class Forecast:
    target_kimg: float
    value: float | None  # None when refused
    low: float | None  # 80 % bootstrap interval
    high: float | None
    text: str


def power_law(kimg: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    return a + b * np.power(kimg, -c)


Values = Sequence[float] | np.ndarray


def fit_power_law(kimg: Values, score: Values) -> tuple[float, float, float]:
    """Least-squares a, b, c of score = a + b·kimg^−c with a ≥ 0, b ≥ 0, 0.05 ≤ c ≤ 3."""
    x, y = np.asarray(kimg, dtype=float), np.asarray(score, dtype=float)
    p0 = (max(float(y.min()) * 0.8, 0.0), max(float(y.max() - y.min()), 1e-3) * float(x.min()) ** 0.5, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params, _ = curve_fit(power_law, x, y, p0=p0, bounds=([0.0, 0.0, 0.05], [np.inf, np.inf, 3.0]), maxfev=20_000)
    return float(params[0]), float(params[1]), float(params[2])


def forecast(points: Sequence[Point], target_kimg: float, *, draws: int = 200, seed: int = 0) -> Forecast:
    """The score at ``target_kimg`` from the fitted power law, with an 80 % residual-bootstrap interval."""
    pts = sorted(points, key=lambda p: p.kimg)
    if len(pts) < 4:
        return Forecast(target_kimg, None, None, None, f"no forecast: {len(pts)} scored points, the fit needs 4")
    last = pts[-1].kimg
    if target_kimg > MAX_EXTRAPOLATION * last:
        return Forecast(
            target_kimg,
            None,
            None,
            None,
            f"no forecast at {target_kimg:g} kimg: over {MAX_EXTRAPOLATION:g}× past the last point ({last:g} kimg); "
            f"add a budget of at least {target_kimg / MAX_EXTRAPOLATION:g} kimg",
        )
    x = np.array([p.kimg for p in pts])
    y = np.array([p.score for p in pts])
    params = fit_power_law(x, y)
    fitted = power_law(x, *params)
    residual = y - fitted
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(draws):
        resampled = fitted + rng.choice(residual, size=residual.size, replace=True)
        try:
            values.append(float(power_law(np.array([target_kimg]), *fit_power_law(x, resampled))[0]))
        except RuntimeError:
            continue
    value = float(power_law(np.array([target_kimg]), *params)[0])
    low, high = (float(np.quantile(values, 0.1)), float(np.quantile(values, 0.9))) if values else (value, value)
    return Forecast(
        target_kimg,
        value,
        low,
        high,
        f"forecast at {target_kimg:g} kimg: {value:.3g} (80 % interval {low:.3g}–{high:.3g}; "
        f"fit {params[0]:.3g} + {params[1]:.3g}·kimg^−{params[2]:.2f} over {len(pts)} points)",
    )
