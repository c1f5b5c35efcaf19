"""The learning rate of each optimizer step: pure functions of the config and the step.

``wsd`` (warm-up, stable, decay) holds ``lr`` flat after the warm-up and cools down over the last
``cooldown_share`` of the budget's steps with the 1 − sqrt shape of Hägele et al. 2024 ("Scaling Laws
and Compute-Optimal Training Beyond Fixed Training Durations", §3). Every state before the cooldown
is a prefix of any longer run of the same configuration, so a longer run can continue it; and the
cooldown can start early (``cooldown_from``), ending the run ``cooldown_steps`` later.
"""

from __future__ import annotations

import math

from hpo.spec.config import TrainConfig


def cooldown_steps(cfg: TrainConfig) -> int:
    """How many steps the ``wsd`` cooldown lasts, wherever it starts (at least one)."""
    return max(1, round(cfg.cooldown_share * cfg.total_steps))


def cooldown_start(cfg: TrainConfig) -> int:
    """The planned first step of the ``wsd`` cooldown: the steps before it run at full ``lr``."""
    return cfg.total_steps - cooldown_steps(cfg)


def end_step(cfg: TrainConfig, cooldown_from: int | None = None) -> int:
    """Where the run ends: the budget's last step, or ``cooldown_steps`` after an early cooldown."""
    if cfg.lr_schedule == "wsd" and cooldown_from is not None:
        return cooldown_from + cooldown_steps(cfg)
    return cfg.total_steps


def lr_at(cfg: TrainConfig, step: int, cooldown_from: int | None = None) -> float:
    """The learning rate of optimizer step ``step`` (0-based): linear warm-up in images, then
    ``lr_schedule``: constant; a cosine / linear decay that reaches ``lr_floor`` × lr at the last step
    of the budget, so that a shortened run is a complete run rather than the start of a long one; or
    ``wsd``: flat, then a 1 − sqrt cooldown to ``lr_floor`` × lr at its last step. The cooldown starts
    at ``cooldown_from`` when given (``wsd`` only), else at :func:`cooldown_start`."""
    warmup = cfg.warmup_kimg * 1000.0
    images = (step + 1) * cfg.batch_size
    ramp = min(1.0, images / warmup) if warmup > 0 else 1.0
    if cfg.lr_schedule == "constant":
        return cfg.lr * ramp
    if cfg.lr_schedule == "wsd":
        shape = wsd_shape(cfg, step, cooldown_start(cfg) if cooldown_from is None else cooldown_from)
    else:
        progress = min(1.0, step / max(cfg.total_steps - 1, 1))
        shape = 0.5 * (1.0 + math.cos(math.pi * progress)) if cfg.lr_schedule == "cosine" else 1.0 - progress
    return cfg.lr * ramp * (cfg.lr_floor + (1.0 - cfg.lr_floor) * shape)


def wsd_shape(cfg: TrainConfig, step: int, start: int) -> float:
    """1 before ``start``; then 1 − sqrt(progress), progress = 1/n at ``start`` and 1 at its n-th step."""
    if step < start:
        return 1.0
    progress = min(1.0, (step - start + 1) / cooldown_steps(cfg))
    return 1.0 - math.sqrt(progress)
