"""The objective: a trial's parameters → the shared train-and-score path (one training run, the
sampling sweep) → the best FID. Turns training and scoring events into Optuna reports, pruning
decisions, attributes and artifacts; how a trial ended is written through ``mark_ended``, which the
worker uses too for stops and unexpected errors."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.trial import TrialState

from hpo.analysis.noise import noise_estimates, pair_sd, pooled
from hpo.diffusion.network import ProtocolError
from hpo.errors import ConfigError, disk_full_at, is_disk_full, require_space
from hpo.records import (
    BRANCH_ATTR,
    BUDGET_KIMG_ATTR,
    CHECKPOINT_ATTR,
    CURVE_ATTR,
    DATA_ATTR,
    EMA_SNAPSHOTS_ATTR,
    FID_REPEAT_ATTR,
    FLOOR_ATTR,
    GRIDS_ATTR,
    LADDER,
    METRIC_NAME_ATTR,
    NOISE_ATTR,
    OOM_BATCH_ATTR,
    PRUNING_METRIC,
    SAMPLES_ATTR,
    SWEEP_ATTR,
    ComboScore,
    StudyRecord,
    TrialRecord,
    Watched,
)  # fmt: skip
from hpo.scoring.pipeline import Scored, train_and_score, weights_at
from hpo.scoring.progress import record_point
from hpo.scoring.score import score
from hpo.service.context import StudyContext, sample_grid, sample_strip, upload, upload_real_grid
from hpo.service.optuna_internals import trial_id
from hpo.service.space import suggest
from hpo.service.study import pruned_reason
from hpo.service.trials import PAUSED, mark_ended, own_trials, started_line
from hpo.spec.config import TrainConfig
from hpo.spec.sampling import SamplingConfig
from hpo.tracking.base import RunInfo, Runs
from hpo.tracking.runs import open_runs
from hpo.training.checkpoint import trial_disk_bytes
from hpo.training.lr import cooldown_start
from hpo.training.model import DiffusionModel
from hpo.training.refusal import schedule_refusal
from hpo.training.runtime import release_memory
from hpo.training.trainer import EvalPoint, OnEval, TrainingAborted, TrainingStopped, train

log = logging.getLogger("hpo.objective")

STRIP = 10  # samples in the row saved at each evaluation point (one per class, fixed noise)
REPEAT_SEED = 1  # the second, independent sample set that measures a score's noise


class TrialFailed(Exception):
    """The trial cannot produce a score; ``reason`` is stored as the trial's fail_reason."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


class TrialPaused(optuna.TrialPruned):
    """pruner: rung: the trial stops at the rung with its checkpoint kept; a continuation may resume it."""


class TrialLost(Exception):
    """Another worker failed this trial as stale while this one ran it: its retry takes over."""


def _fail(trial: optuna.Trial, reason: str, detail: str) -> TrialFailed:
    mark_ended(trial, reason, detail=detail)
    return TrialFailed(reason, detail)


def run_objective(
    trial: optuna.Trial,
    ctx: StudyContext,
    on_start: Callable[[], None] = lambda: None,
    hooks: PointHooks | None = None,
) -> float:
    on_start()
    params = suggest(trial, ctx.spec.search)
    log.info(started_line(trial, params))
    train_params, sampling_params = ctx.spec.split_params(params)
    try:
        cfg = ctx.spec.train_config(train_params).replace(device=str(ctx.device))
        combos = ctx.spec.sampling_combinations(cfg, sampling_params)
    except ConfigError as err:
        raise _fail(trial, "invalid_config", str(err)) from None
    refusal = schedule_refusal(cfg)
    if refusal is not None:  # a broken corner of the search space: no training, and TPE learns to avoid it
        mark_ended(trial, "invalid_schedule", detail=refusal)
        raise optuna.TrialPruned(refusal)
    trial.set_user_attr(BUDGET_KIMG_ATTR, cfg.kimg)
    need = trial_disk_bytes(cfg, ctx.data)  # checked before any training: a full disk costs no trial
    require_space(ctx.artifact_dir, need, "this trial's checkpoints")
    root = ctx.trial_root(trial)
    files = TrialFiles(
        ctx.checkpoint_path(root),
        ctx.snapshot_dir(root) if cfg.ema_profiles else None,
        ctx.branch_path(root) if cfg.lr_schedule == "wsd" else None,
    )
    runs = open_runs(
        ctx.spec.tracking,
        RunInfo(ctx.name, root, params),
        tensorboard_dir=ctx.tensorboard_dir(root),
        local_dir=ctx.tracker_dir(),
    )
    preview = ctx.spec.sampling.preview(sampling_params)
    watch = _watched(trial, ctx, preview)
    try:
        on_eval = _reporter(trial, ctx, cfg, runs, preview, watch, files.snapshots, hooks or PointHooks())
        scored = _train_and_score(trial, ctx, cfg, combos, runs, files, on_eval)
        value = _record(trial, ctx, scored, combos, runs)
    except TrialPaused:
        raise  # its checkpoint and snapshots stay for a continuation (service/rung.py removes the others')
    except (optuna.TrialPruned, TrialFailed):
        files.remove()  # nothing will resume it; the report needs only the artifacts
        raise
    except Exception as err:  # a full disk keeps the checkpoint (written atomically): the retry resumes it
        if is_disk_full(err):
            raise disk_full_at(err, ctx.write_places(), need=need, what="this trial's checkpoints") from err
        raise
    finally:
        runs.close()
    files.checkpoint.unlink(missing_ok=True)  # the EMA weights are an artifact now
    _keep_branch(trial, ctx, cfg, files)
    record = TrialRecord.of(trial)
    summary = record.ema_snapshots
    if summary is not None:  # baselines and each new best (their score was repeated) keep their snapshots
        kept = record.repeated
        trial.set_user_attr(EMA_SNAPSHOTS_ATTR, replace(summary, kept=kept).as_dict())
        if not kept:
            files.remove_snapshots()
    return value


def _keep_branch(trial: optuna.Trial, ctx: StudyContext, cfg: TrainConfig, files: TrialFiles) -> None:
    """wsd: say where the trial's stable-phase state is, for a longer run to continue its lineage."""
    if files.branch is not None and files.branch.exists():
        kimg = cooldown_start(cfg) * cfg.batch_size / 1000
        path = files.branch.relative_to(ctx.artifact_dir).as_posix()
        trial.set_user_attr(BRANCH_ATTR, {"path": path, "kimg": kimg})


def _nothing(trial: optuna.Trial, point: EvalPoint) -> None:
    pass


@dataclass(frozen=True)
class PointHooks:
    """Called around each evaluation point's report: ``before`` it reaches Optuna, ``after`` it was
    stored (tests fail or stop a trial there, as another worker or a signal would)."""

    before: Callable[[optuna.Trial, EvalPoint], None] = _nothing
    after: Callable[[optuna.Trial, EvalPoint], None] = _nothing


@dataclass(frozen=True)
class TrialFiles:
    """What a trial keeps on disk while it runs, shared with its retries: the checkpoint and the
    post-hoc EMA snapshots (None when the EMA length is not swept)."""

    checkpoint: Path
    snapshots: Path | None
    branch: Path | None = None  # wsd: the stable-phase state, kept when the trial completes

    def remove(self) -> None:
        self.checkpoint.unlink(missing_ok=True)
        if self.branch is not None:
            self.branch.unlink(missing_ok=True)
        self.remove_snapshots()

    def remove_snapshots(self) -> None:
        if self.snapshots is not None:
            shutil.rmtree(self.snapshots, ignore_errors=True)


def _watched(trial: optuna.Trial, ctx: StudyContext, preview: SamplingConfig) -> SamplingConfig | None:
    """In a budget ladder, the combination every evaluation point is scored at (the source trial's
    best); None in an ordinary study, whose evaluation points carry the validation metric only."""
    if not StudyRecord.of(trial.study).has(LADDER):
        return None
    _ensure_floor(trial, ctx)
    return TrialRecord.of(trial).watch_sampling or preview


def _ensure_floor(trial: optuna.Trial, ctx: StudyContext) -> None:
    """The study's floor: real held-out images scored like samples, measured by the first worker
    that needs it and stored on the study."""
    if not StudyRecord.of(trial.study).has(FLOOR_ATTR):
        trial.study.set_user_attr(FLOOR_ATTR, ctx.get_progress().floor.record().as_dict())


def _train_and_score(
    trial: optuna.Trial,
    ctx: StudyContext,
    cfg: TrainConfig,
    combos: list[SamplingConfig],
    runs: Runs,
    files: TrialFiles,
    on_eval: OnEval,
) -> Scored:
    """The shared train-and-score path, with its events turned into Optuna's: each score is stored
    as it lands, so a retry that resumes rescores nothing it already has."""
    storage = ctx.storage
    known = TrialRecord.of(trial).sweep
    stored = [s.to_dict() for s in known]

    def lost() -> bool:
        return storage.is_lost(trial_id(trial))

    def on_score(entry: ComboScore) -> None:
        stored.append(entry.to_dict())
        trial.set_user_attr(SWEEP_ATTR, stored)
        if lost():
            raise TrialLost(f"trial {trial.number} was failed as stale while scoring")

    try:
        training = functools.partial(
            train,
            cfg,
            ctx.data,
            on_eval=on_eval,
            on_sync=runs.on_sync,
            should_stop=lost,
            may_save=lambda: storage.still_owned(trial_id(trial)),
            checkpoint=files.checkpoint,
            snapshot_dir=files.snapshots,
            branch=files.branch,
        )
        return train_and_score(
            training, ctx.data, ctx.get_scorer(), combos, ctx.spec.sampling, known=known, on_score=on_score
        )
    except TrainingAborted as err:
        mark_ended(trial, err.reason, stopped_at_kimg=err.step * cfg.batch_size / 1000)
        raise optuna.TrialPruned(str(err)) from None
    except TrainingStopped as err:
        raise TrialLost(f"trial {trial.number} was failed as stale at step {err.step}") from None
    except ProtocolError as err:
        raise _fail(trial, "network_protocol", str(err)) from None
    except torch.cuda.OutOfMemoryError:
        release_memory(ctx.device)
        trial.set_user_attr(OOM_BATCH_ATTR, cfg.batch_size)
        raise _fail(trial, "oom", oom_detail(cfg.batch_size, ctx.sharing)) from None


def oom_detail(batch_size: int, sharing: int) -> str:
    detail = f"CUDA out of memory at batch_size={batch_size}"
    if sharing > 1:
        detail += (
            f", with {sharing} worker processes on this GPU (--per-gpu {sharing}): run fewer per GPU, "
            f"and ask `hpo doctor SPEC --per-gpu {sharing}` whether they fit"
        )
    return detail


def _reporter(
    trial: optuna.Trial,
    ctx: StudyContext,
    cfg: TrainConfig,
    runs: Runs,
    preview: SamplingConfig,
    watch: SamplingConfig | None,
    snapshots: Path | None,
    hooks: PointHooks,
) -> OnEval:
    """Reports each point to Optuna and stores it in the trial's curve; with ``watch`` (a budget
    ladder) each point is also scored there and searched for copies — once: a retry keeps them."""
    stored = TrialRecord.of(trial)
    curve, grids = stored.curve, stored.grids
    reason = pruned_reason(ctx.spec)

    def on_eval(point: EvalPoint, ema: DiffusionModel) -> None:
        hooks.before(trial, point)
        value = point.metrics[PRUNING_METRIC]
        trial.report(value if math.isfinite(value) else float("nan"), step=point.index)
        if not math.isfinite(value):  # the (EMA) weights blew up even if the last losses were finite
            mark_ended(trial, "nan_loss", stopped_at_kimg=point.kimg)
            raise optuna.TrialPruned(f"validation metric is {value} at evaluation {point.index}: the weights diverged")

        def measure(at: SamplingConfig) -> Watched:
            weights = weights_at(ema, snapshots, at, step=point.step)
            return ctx.get_progress().measure(weights, at, class_frequencies=ctx.data.class_frequencies())

        point = record_point(curve, point, functools.partial(measure, watch) if watch is not None else None)
        trial.set_user_attr(CURVE_ATTR, curve)
        grid = None
        if not point.replayed:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / f"eval{point.index}.png"
                grid = sample_strip(ema, preview, STRIP, path)
                grids[str(point.index)] = upload(ctx, trial, path)
            trial.set_user_attr(GRIDS_ATTR, grids)
        runs.on_eval(point, grid)
        hooks.after(trial, point)
        if trial.should_prune():
            mark_ended(trial, reason, stopped_at_kimg=point.kimg)
            if reason == PAUSED:
                raise TrialPaused(f"paused at the rung (evaluation {point.index}, validation metric {value:.4g})")
            raise optuna.TrialPruned(f"validation metric {value:.4g} lags at evaluation {point.index} ({reason})")

    return on_eval


def _record(trial: optuna.Trial, ctx: StudyContext, scored: Scored, combos: list[SamplingConfig], runs: Runs) -> float:
    result, best = scored.result, scored.best
    model = scored.model(best.sampling)
    record = scored.record(combos)
    for key, value in {**record.as_attrs(), METRIC_NAME_ATTR: ctx.spec.score.metric_name}.items():
        trial.set_user_attr(key, value)
    if not math.isfinite(best.score):
        raise _fail(trial, "fid_not_finite", f"{ctx.spec.score.metric_name} is {best.score}")
    _ensure_floor(trial, ctx)
    if not StudyRecord.of(trial.study).has(DATA_ATTR):  # what the study trains on: the report's header
        trial.study.set_user_attr(DATA_ATTR, ctx.data.summary().as_dict())
    if _needs_repeat(trial, best.score):
        _repeat(trial, ctx, model, best)
    images = _artifacts(trial, ctx, model, best.sampling)
    floor = StudyRecord.of(trial.study).floor
    runs.on_result(scored.tracker_metrics(floor.score if floor is not None else None), images, result.steps)
    return best.score


def _needs_repeat(trial: optuna.Trial, fid: float) -> bool:
    """Baselines, and every trial that beats the best so far, get their score's noise measured."""
    if TrialRecord.of(trial).baseline:
        return True
    complete = own_trials(trial.study, (TrialState.COMPLETE,))
    return all(t.value is None or fid < t.value for t in complete)


def _repeat(trial: optuna.Trial, ctx: StudyContext, model: DiffusionModel, best: ComboScore) -> None:
    """Score the best combination again with an independent sample set; the study keeps the pooled
    noise of all such pairs (``fid_noise``: sd and the pairs it rests on)."""
    again = score(
        ctx.get_scorer(), model, best.sampling, class_frequencies=ctx.data.class_frequencies(), seed=REPEAT_SEED
    )
    estimate = pair_sd(again.fid, best.score)
    trial.set_user_attr(FID_REPEAT_ATTR, again.fid)
    trial.set_user_attr(NOISE_ATTR, estimate)
    others = [t for t in own_trials(trial.study) if t.number != trial.number]
    noise = pooled([*noise_estimates(others), estimate])
    trial.study.set_user_attr(NOISE_ATTR, noise.as_dict())


def _artifacts(
    trial: optuna.Trial, ctx: StudyContext, model: DiffusionModel, sampling: SamplingConfig
) -> Mapping[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        grid = sample_grid(ctx, model, sampling, ctx.spec.score.grid_size, Path(tmp) / "samples.png", seed=1)
        trial.set_user_attr(SAMPLES_ATTR, upload(ctx, trial, Path(tmp) / "samples.png"))
        weights = Path(tmp) / "ema.pt"
        torch.save(model.net.state_dict(), weights)
        trial.set_user_attr(CHECKPOINT_ATTR, upload(ctx, trial, weights))
    with contextlib.suppress(Exception):  # a missing real grid only costs the report a picture
        upload_real_grid(ctx, trial.study, ctx.spec.score.grid_size)
    return {"samples/final": grid}
