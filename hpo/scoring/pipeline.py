"""One train-and-score path, shared by ``hpo train`` and the trial objective: train (keeping the
post-hoc EMA snapshots when the EMA length is swept), score every sampling combination on the
trained weights, and hand back the weights each combination samples. The callers differ only in
what they do with the events (Optuna reports and attributes, or a log and a summary file)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hpo.analysis.sweep import SweepResult, value_statistic
from hpo.files import JsonObject
from hpo.records import PRUNING_METRIC, ComboScore, EmaSnapshots, RunRecord, ValueStatistic
from hpo.scoring.score import Scorer
from hpo.scoring.sweep import run_sweep
from hpo.spec.sampling import SamplingConfig, SamplingSweep
from hpo.training.data import ImageData
from hpo.training.model import DiffusionModel
from hpo.training.posthoc_ema import PosthocEma
from hpo.training.trainer import TrainResult


@dataclass(frozen=True)
class Scored:
    result: TrainResult
    sweep: SweepResult
    ema: PosthocEma | None  # the rebuilt EMA lengths, when they were swept
    score_seconds: float
    statistic: ValueStatistic  # what the value is (analysis.sweep.value_statistic)

    @property
    def best(self) -> ComboScore:
        return self.sweep.best

    def model(self, sampling: SamplingConfig) -> DiffusionModel:
        """The weights ``sampling`` is drawn from (its EMA length rebuilt when it names one)."""
        return self.ema.model(sampling.ema_sigma_rel) if self.ema is not None else self.result.model

    def record(self, combos: Sequence[SamplingConfig]) -> RunRecord:
        """What a trained and scored run stores (a trial's attributes, ``hpo train``'s summary.json)."""
        result, best = self.result, self.best
        last = result.history[-1].metrics
        return RunRecord(
            val_loss=last["val_loss"], validation={PRUNING_METRIC: last[PRUNING_METRIC]},
            sampling=best.sampling, kid=best.kid, class_accuracy=best.class_accuracy,
            precision=best.precision, recall=best.recall, num_samples=best.num_samples, combinations=len(combos),
            train_seconds=round(result.seconds, 2), eval_seconds=round(result.eval_seconds, 2),
            eval_points=result.eval_points, score_seconds=round(self.score_seconds, 2),
            images_per_second=round(result.images_per_second, 1),
            peak_memory_mb=round(result.peak_memory_bytes / 2**20, 1), num_parameters=result.num_parameters,
            hardware=result.hardware,
            ema_snapshots=self.ema_summary(combos), statistic=self.statistic, lineage=self.lineage(),
        )  # fmt: skip

    def lineage(self) -> JsonObject | None:
        """wsd: the kimg the run continued a shorter run's state from (None: from scratch) and where its
        cooldown started; None for another schedule."""
        result = self.result
        if result.cooldown_from_step is None:
            return None
        return {
            "continued_from_kimg": result.kimg_at(result.continued_from_step),
            "cooldown_kimg": result.kimg_at(result.cooldown_from_step),
        }

    def tracker_metrics(self, floor: float | None) -> dict[str, float]:
        """The final numbers a run sends to its trackers (TensorBoard, W&B, MLflow), a trial's and
        ``hpo train``'s alike: the best combination's score, KID, class accuracy, precision and recall,
        the validation metric at the last point, and where real held-out images score (``floor``)."""
        best, last = self.best, self.result.history[-1].metrics
        values = {"fid": best.score, "kid": best.kid, PRUNING_METRIC: last[PRUNING_METRIC],
                  "class_accuracy": best.class_accuracy, "precision": best.precision, "recall": best.recall,
                  "floor": floor}  # fmt: skip
        return {k: float(v) for k, v in values.items() if v is not None}

    def ema_summary(self, combos: Sequence[SamplingConfig]) -> EmaSnapshots | None:
        """What the post-hoc EMA kept and how faithfully each swept length was rebuilt (the profile's
        relative least-squares residual: 0 for a tracked length); None without an EMA sweep."""
        if self.ema is None:
            return None
        lengths = sorted({c.ema_sigma_rel for c in combos if c.ema_sigma_rel is not None})
        return EmaSnapshots(
            folder=str(self.ema.folder),
            count=len(self.ema.snapshots),
            megabytes=round(self.ema.disk_bytes / 2**20, 2),
            profiles=tuple(sorted({s.sigma_rel for s in self.ema.snapshots})),
            residual={f"{sigma:g}": round(self.ema.fit(sigma).residual, 5) for sigma in lengths},
        )


def weights_at(
    base: DiffusionModel, snapshot_dir: Path | None, sampling: SamplingConfig, *, step: int | None = None
) -> DiffusionModel:
    """The weights of ``sampling`` while the run trains: its EMA length rebuilt as of ``step`` from the
    snapshots taken so far, or the run's own EMA (``base``) when it names none."""
    if sampling.ema_sigma_rel is None:
        return base
    if snapshot_dir is None:
        raise ValueError(f"{sampling.label} names an EMA length, but the run keeps no EMA snapshots")
    return PosthocEma(base, snapshot_dir, upto=step).model(sampling.ema_sigma_rel)


def train_and_score(
    training: Callable[[], TrainResult],
    data: ImageData,
    scorer: Scorer,
    combos: Sequence[SamplingConfig],
    sweep: SamplingSweep,
    *,
    known: Sequence[ComboScore] = (),
    on_score: Callable[[ComboScore], None] | None = None,
) -> Scored:
    """Run ``training`` (a call of :func:`hpo.training.trainer.train` with the caller's hooks), then
    score every combination on its weights; ``known`` scores of an earlier attempt on the same
    weights are kept, not recomputed."""
    result = training()
    started = time.perf_counter()
    ema = PosthocEma(result.model, result.snapshot_dir) if result.snapshot_dir is not None else None
    swept = run_sweep(
        scorer,
        result.model,
        combos,
        screen_samples=sweep.screen_samples,
        rescore_top=sweep.rescore_top,
        screen_by=sweep.screen_by,
        class_frequencies=data.class_frequencies(),
        known=known,
        on_score=on_score,
        ema=ema,
    )
    statistic = value_statistic(swept, scorer.config.metric_name, scorer.reference.space.dim)
    return Scored(result, swept, ema, time.perf_counter() - started, statistic)
