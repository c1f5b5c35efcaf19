"""Rules that tie settings together, each in one function that every caller uses: a single config
(``TrainConfig``), a whole search space (``Spec``), and a trial's sampling combinations."""

from __future__ import annotations

import math
import re
from typing import Literal

from hpo.errors import ConfigError

# Study names become parts of paths and database keys: letters, digits, '.', '_', '-' only.
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_STUDY_NAME = 100


def require(ok: bool, key: str, message: str) -> None:
    """Validation where values enter: ``message`` should echo the offending value."""
    if not ok:
        raise ConfigError(key, message)


def steps_in_budget(kimg: float, batch_size: int) -> int:
    """Optimizer steps in a budget of ``kimg`` thousand images (at least one)."""
    return max(1, math.ceil(kimg * 1000 / batch_size))


EvalSpacing = Literal["even", "doubling"]
MAX_DOUBLING_EVALS = 16  # doubling: the first point at 1/2^15 of the budget is already below any sensible probe


def eval_fractions(num_evals: int, spacing: EvalSpacing = "even") -> tuple[float, ...]:
    """Where the K evaluation points fall, as shares of the budget: even at 1/K, 2/K, ..., 1;
    doubling at 1/2^(K-1), ..., 1/4, 1/2, 1 (a pruned trial then costs as little as its first point)."""
    if spacing == "even":
        return tuple(k / num_evals for k in range(1, num_evals + 1))
    return tuple(2.0 ** (k - num_evals) for k in range(1, num_evals + 1))


RUNG_SAVING = 3.0  # rung: continue the most trials that still cost a third of training every trial to the end
RUNG_MIN_KEEP = 4  # ... but never fewer: a report ranks complete trials (the quickstart's guard, 4 of 10)


def rung_continued(n_trials: int, share: float, keep: int = 0) -> int:
    """Trials ``pruner: rung`` continues past a rung at ``share`` of the budget: ``keep``, else the most
    whose cost (every trial to the rung, those to the end) stays within 1/RUNG_SAVING of training all
    to the end, at least RUNG_MIN_KEEP."""
    if keep:
        return min(keep, n_trials)
    most = math.floor((n_trials / RUNG_SAVING - n_trials * share) / (1.0 - share) + 1e-9)
    return min(n_trials, max(RUNG_MIN_KEEP, most))


def eval_points_words(num_evals: int, spacing: EvalSpacing = "even") -> str:
    """ "4 evaluation points" (even), "5 evaluation points, at 1/16, 1/8, 1/4, 1/2 and all of the budget"."""
    if spacing == "even" or num_evals == 1:
        return f"{num_evals} evaluation point{'s' if num_evals > 1 else ''}"
    shares = [f"1/{round(1 / f)}" for f in eval_fractions(num_evals, spacing)[:-1]]
    return f"{num_evals} evaluation points, at {', '.join(shares)} and all of the budget"


def min_eval_steps(num_evals: int, spacing: EvalSpacing = "even") -> int:
    """The fewest optimizer steps that give every evaluation point a step of its own."""
    return num_evals if spacing == "even" else 2 ** (num_evals - 1)


def check_budget(
    kimg: float, batch_size: int, num_evals: int, spacing: EvalSpacing = "even", *, key: str = "kimg"
) -> None:
    """The budget must give every evaluation point an optimizer step of its own."""
    steps, needed = steps_in_budget(kimg, batch_size), min_eval_steps(num_evals, spacing)
    require(
        steps >= needed,
        key,
        f"budget of {kimg:g} kimg at batch_size={batch_size} is {steps} steps, fewer than the {needed} that "
        f"num_evals={num_evals} ({spacing} spacing) needs; raise kimg or lower num_evals",
    )


def check_steps(steps: int, timesteps: int, *, key: str = "steps") -> None:
    """Every sampler visits a subset of the T training timesteps."""
    require(
        steps <= timesteps,
        key,
        f"up to {steps} sampler steps but timesteps can be as low as {timesteps}; a sampler visits a subset "
        "of the T steps, so keep steps <= timesteps",
    )


def check_guidance(scale: float, *, key: str = "guidance_scale") -> None:
    """Classifier-free guidance w: 0 is the unconditional model, 1 the conditional one alone."""
    require(0.0 <= scale <= 100.0, key, f"must be in [0, 100], got {scale:g}")


def check_guidance_interval(low: float, high: float | None) -> None:
    """Guidance applies where σ/α lies in (low, high] (Kynkäänniemi et al. 2024): a non-empty interval
    of noise levels, high None for no upper bound."""
    require(math.isfinite(low) and low >= 0.0, "guidance_sigma_min", f"must be a noise level σ/α >= 0, got {low:g}")
    top = math.inf if high is None else high
    require(
        high is None or math.isfinite(high), "guidance_sigma_max", f"must be finite (null: no upper bound), got {high}"
    )
    require(
        top > low,
        "guidance_sigma_max",
        f"{top:g} is not above guidance_sigma_min {low:g}: the interval (min, max] would be empty "
        "(null for no upper bound)",
    )


def check_study_name(name: str, *, key: str = "study.name") -> None:
    """Names a user chooses: a safe set, so that no name decides where files go."""
    if len(name) > MAX_STUDY_NAME:
        raise ConfigError(key, f"is {len(name)} characters long; use at most {MAX_STUDY_NAME}")
    if not STUDY_NAME.fullmatch(name):
        raise ConfigError(
            key,
            f"{name!r} is not a safe study name; use letters, digits, '.', '_' and '-' only, starting with a "
            "letter or digit (e.g. bikes-64)",
        )


MAX_EXTRAPOLATION = 4.0  # the stop forecast reaches at most this many times past its last point
SIGMA_REL_RANGE = (0.01, 0.28)  # post-hoc EMA lengths; above ≈0.289 (γ = 0) a power profile stops growing
MAX_SCHEDULE_SHIFT = 8.0  # log-SNR; 2·ln(64/d) reaches it only at d ≈ 3.5k px or below 2 px (and rejects NaN)


def check_sigma_rel(value: float, key: str) -> None:
    """An EMA length σ_rel (Karras et al. 2024): the profile's width relative to the run's length."""
    low, high = SIGMA_REL_RANGE
    require(
        math.isfinite(value) and low <= value <= high,
        key,
        f"σ_rel must be in [{low}, {high}] (EDM2's best lengths lie in 0.03-0.2), got {value}",
    )


HEARTBEAT_INTERVAL = 30  # seconds between a running trial's heartbeats, unless study.heartbeat_interval says


def grace_seconds(heartbeat_interval: int, grace_period: int | None) -> int:
    """Seconds without a heartbeat before a running trial is stale: ``grace_period``, by default two
    heartbeat intervals (one missed beat is not yet a lost worker)."""
    return grace_period if grace_period is not None else 2 * heartbeat_interval
