"""What a trained and scored run stores (``RunRecord``), and ``hpo train``'s summary.json
(``TrainRecord``): one set of keys for a trial's attributes and a run outside a study."""

from __future__ import annotations

from dataclasses import dataclass

from hpo.files import JsonObject
from hpo.records.combo import ComboScore
from hpo.records.hardware import HardwareSummary
from hpo.records.keys import (
    CURVE_ATTR,
    CURVE_NOISE_ATTR,
    EMA_SNAPSHOTS_ATTR,
    FLOOR_ATTR,
    HARDWARE_ATTR,
    LINEAGE_ATTR,
    METRIC_NAME_ATTR,
    SAMPLES_ATTR,
    STATISTIC_ATTR,
    STOP_ATTR,
    SWEEP_ATTR,
    TENSORBOARD_ATTR,
    VALUE_ATTR,
    WATCH_SAMPLING_ATTR,
)
from hpo.records.payloads import EmaSnapshots, FloorRecord, StopVerdict, ValueStatistic
from hpo.spec.sampling import SamplingConfig


@dataclass(frozen=True)
class RunRecord:
    """What a trained and scored run stores, under one set of keys: a trial's attributes and
    ``hpo train``'s summary.json (each adds what only it knows)."""

    val_loss: float
    validation: dict[str, float]  # the pruning metric under its own name
    sampling: SamplingConfig  # the sweep's best combination
    kid: float | None
    class_accuracy: float | None
    precision: float | None
    recall: float | None
    num_samples: int
    combinations: int
    train_seconds: float
    eval_seconds: float  # of train_seconds: the evaluation points this process ran
    eval_points: int
    score_seconds: float
    images_per_second: float
    peak_memory_mb: float
    num_parameters: int
    hardware: HardwareSummary | None
    ema_snapshots: EmaSnapshots | None  # None: the EMA length was not swept
    statistic: ValueStatistic  # what the value is (analysis.sweep.value_statistic)
    lineage: JsonObject | None = None  # wsd: {"continued_from_kimg": kimg or None, "cooldown_kimg": kimg}

    def as_attrs(self) -> JsonObject:
        attrs: JsonObject = {
            "val_loss": self.val_loss, **self.validation, "sampling": self.sampling.as_dict(), "kid": self.kid,
            "class_accuracy": self.class_accuracy, "precision": self.precision, "recall": self.recall,
            "num_samples": self.num_samples, "combinations": self.combinations, "train_seconds": self.train_seconds,
            "eval_seconds": self.eval_seconds, "eval_points": self.eval_points, "score_seconds": self.score_seconds,
            "images_per_second": self.images_per_second, "peak_memory_mb": self.peak_memory_mb,
            "num_parameters": self.num_parameters,
            STATISTIC_ATTR: self.statistic.as_dict(),
        }  # fmt: skip
        if self.hardware is not None:
            attrs[HARDWARE_ATTR] = self.hardware.as_dict()
        if self.ema_snapshots is not None:
            attrs[EMA_SNAPSHOTS_ATTR] = self.ema_snapshots.as_dict()
        if self.lineage is not None:
            attrs[LINEAGE_ATTR] = self.lineage
        return attrs


@dataclass(frozen=True, kw_only=True)
class TrainRecord:
    """``hpo train``'s summary.json: the run's record under the keys a trial stores the same things
    under (its sweep, curve, watched combination, noise, floor and sample grid), plus what only a
    run outside a study has (its value, stop verdict and TensorBoard folder)."""

    run: RunRecord
    metric_name: str
    value: float
    sweep: list[ComboScore]
    curve: dict[str, dict[str, float]]
    watch_sampling: SamplingConfig  # the combination every evaluation point was scored at
    curve_noise: float  # one pair's estimate of an evaluation point's sd: the last point against the final weights
    floor: FloorRecord
    stop: StopVerdict
    samples: str  # the grid's path (a trial stores an artifact id)
    tensorboard: str

    def as_attrs(self) -> JsonObject:
        return {
            **self.run.as_attrs(), METRIC_NAME_ATTR: self.metric_name, VALUE_ATTR: self.value,
            SWEEP_ATTR: [s.to_dict() for s in self.sweep], CURVE_ATTR: self.curve,
            WATCH_SAMPLING_ATTR: self.watch_sampling.as_dict(),
            CURVE_NOISE_ATTR: self.curve_noise, FLOOR_ATTR: self.floor.as_dict(), STOP_ATTR: self.stop.as_dict(),
            SAMPLES_ATTR: self.samples, TENSORBOARD_ATTR: self.tensorboard,
        }  # fmt: skip
