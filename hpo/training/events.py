"""What a training run tells its caller: evaluation and sync points, its result, and why it stopped."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpo.records import HardwareSummary
from hpo.training.model import DiffusionModel
from hpo.training.telemetry import Hardware

SYNC_EVERY = 8  # steps between host syncs (losses to the host, NaN / divergence checks, on_sync)
DIVERGE_WINDOW, DIVERGE_MIN_HISTORY = 10, 50


class TrainingAborted(RuntimeError):
    """The run cannot continue: ``reason`` is ``nan_loss`` or ``diverged``."""

    def __init__(self, reason: str, step: int, detail: str) -> None:
        self.reason, self.step = reason, step
        super().__init__(f"{reason} at step {step}: {detail}")


class TrainingStopped(RuntimeError):
    """``should_stop`` asked the run to stop; nothing was saved after it did."""

    def __init__(self, step: int) -> None:
        self.step = step
        super().__init__(f"stopped at step {step}")


@dataclass(frozen=True)
class EvalPoint:
    index: int  # 1..K
    step: int
    kimg: float
    metrics: dict[str, float]
    replayed: bool = False  # re-emitted from a checkpoint on resume


@dataclass(frozen=True)
class SyncPoint:
    """What the host learned at one sync: the steps since the last one, each with its values."""

    steps: list[int]
    losses: list[float]
    grad_norms: list[float]  # before clipping
    lrs: list[float]
    images_per_second: float
    hardware: Hardware | None = None  # memory, CPU / GPU use and data wait since the last sync


@dataclass
class TrainResult:
    model: DiffusionModel  # the EMA weights, ready to sample
    history: list[EvalPoint]
    steps: int
    images_seen: int
    seconds: float
    images_per_second: float
    peak_memory_bytes: int
    eval_seconds: float  # of ``seconds``: evaluation points (probe, checkpoint, ``on_eval``)
    eval_points: int  # evaluation points this call ran (not those replayed from a checkpoint)
    device: str
    num_parameters: int
    snapshot_dir: Path | None = None  # the post-hoc EMA snapshots (with train.ema_profiles)
    hardware: HardwareSummary | None = None  # the run's hardware readings in a few numbers
    continued_from_step: int | None = None  # continued a shorter run's branch state from this step
    cooldown_from_step: int | None = None  # wsd: where its cooldown started (planned or early)

    def kimg_at(self, step: int | None) -> float | None:
        """``step`` in thousands of images (None stays None)."""
        return None if step is None or self.steps == 0 else round(step * self.images_seen / self.steps / 1000, 3)


OnEval = Callable[[EvalPoint, DiffusionModel], None]  # (the point, the EMA network in eval mode)
OnSync = Callable[[SyncPoint], None]


def check_losses(losses: list[float], factor: float, step: int) -> None:
    """Raise TrainingAborted on a non-finite loss, or a recent mean far above the running median."""
    if not all(math.isfinite(v) for v in losses[-SYNC_EVERY:]):
        raise TrainingAborted("nan_loss", step, "loss or gradient norm is not finite")
    if len(losses) >= DIVERGE_MIN_HISTORY:
        recent = statistics.fmean(losses[-DIVERGE_WINDOW:])
        median = statistics.median(losses[-200 - DIVERGE_WINDOW : -DIVERGE_WINDOW])
        if recent > factor * median:
            raise TrainingAborted(
                "diverged", step, f"loss {recent:.4g} is over {factor:g}× its running median {median:.4g}"
            )


@dataclass(frozen=True)
class Hooks:
    """What :func:`train` was given besides the config and data, defaults filled in."""

    on_eval: OnEval | None
    on_sync: OnSync | None
    should_stop: Callable[[], bool]
    may_save: Callable[[], bool]  # asked before every save: False stops the run
    end_early: Callable[[], bool]
    cool_when: Callable[[int, int], bool] | None
    checkpoint: Path | None
    snapshot_dir: Path | None
    branch: Path | None
