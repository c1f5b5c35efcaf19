"""One training run: budget in images seen, evaluation at fixed fractions, EMA with warm-up,
NaN and divergence guards, and checkpoints that resume exactly. Knows nothing of Optuna: callers
learn about progress through callbacks (``on_sync`` at each host sync, ``on_eval`` at each of the
K points, which may raise to stop the run) and can stop it through ``should_stop``."""

from __future__ import annotations

import copy
import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpo.diffusion.losses import diffusion_loss
from hpo.diffusion.schedule import NoiseSchedule
from hpo.files import JsonObject
from hpo.records import HardwareSummary
from hpo.spec.config import TrainConfig
from hpo.spec.typed import to_plain
from hpo.training.batches import BatchSource, placement, placement_words
from hpo.training.checkpoint import atomic_save, load_checkpoint, restore_rng, rng_state
from hpo.training.data import ImageData, to_model_range
from hpo.training.model import DiffusionModel, build_network, count_parameters, lr_scales_for
from hpo.training.mup import param_groups
from hpo.training.posthoc_ema import PowerEmas
from hpo.training.runtime import autocast, eval_mode, peak_memory_bytes, resolve_device
from hpo.training.telemetry import Hardware, Nvml, Telemetry, rss_mb, summarise_hardware
from hpo.training.validation import ValidationProbe, evaluate_probe, generalisation_gap, make_probe, pixel_moments

log = logging.getLogger("hpo.train")

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


# Config fields added after checkpoints were written, with the value those runs had: a checkpoint
# written before a worker's upgrade still resumes after it.
ADDED_SINCE: JsonObject = {"eval_spacing": "even"}


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


OnEval = Callable[[EvalPoint, DiffusionModel], None]  # (the point, the EMA network in eval mode)
OnSync = Callable[[SyncPoint], None]


def make_schedule(cfg: TrainConfig) -> NoiseSchedule:
    return NoiseSchedule.create(
        cfg.schedule,
        cfg.timesteps,
        beta_start=cfg.beta_start,
        beta_end=cfg.beta_end,
        scaled=cfg.beta_scaling == "scaled",
        zero_terminal_snr=cfg.zero_terminal_snr,
        log_snr_shift=cfg.schedule_shift,
    )


def ema_beta(cfg: TrainConfig, images_seen: int) -> float:
    """EDM's EMA (Karras et al. 2022): half-life in images, ramped up to ``ema_rampup`` × images seen."""
    halflife = cfg.ema_halflife_kimg * 1000.0
    if cfg.ema_rampup > 0:
        halflife = min(halflife, images_seen * cfg.ema_rampup)
    return 0.5 ** (cfg.batch_size / max(halflife, 1e-8))


def lr_at(cfg: TrainConfig, step: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based): linear warm-up in images, then
    ``lr_schedule``: constant, or a cosine / linear decay that reaches ``lr_floor`` × lr at the last
    step of the budget, so that a shortened run is a complete run rather than the start of a long one."""
    warmup = cfg.warmup_kimg * 1000.0
    images = (step + 1) * cfg.batch_size
    ramp = min(1.0, images / warmup) if warmup > 0 else 1.0
    if cfg.lr_schedule == "constant":
        return cfg.lr * ramp
    last = max(cfg.total_steps - 1, 1)
    progress = min(1.0, step / last)
    shape = 0.5 * (1.0 + math.cos(math.pi * progress)) if cfg.lr_schedule == "cosine" else 1.0 - progress
    return cfg.lr * ramp * (cfg.lr_floor + (1.0 - cfg.lr_floor) * shape)


@torch.no_grad()
def update_ema(ema: nn.Module, model: nn.Module, beta: float) -> None:
    ema_params: list[torch.Tensor] = list(ema.parameters())
    params: list[torch.Tensor] = list(model.parameters())
    torch._foreach_lerp_(ema_params, params, 1.0 - beta)


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


DEVICE_FIELD = "device"  # TrainConfig.device, in a checkpoint's plain config


def same_run(written: JsonObject, cfg: TrainConfig) -> bool:
    """Whether a checkpoint's configuration is this run's: every field, the device only by its kind
    (a retry or a rung's continuation may land on another GPU of the pool: cuda:1 resumes cuda:0's)."""
    stored, mine = {**ADDED_SINCE, **written}, to_plain(cfg)
    differ = {k for k in stored.keys() | mine.keys() if stored.get(k) != mine.get(k)}
    kind = str(stored.get(DEVICE_FIELD)).split(":")[0]
    return differ <= {DEVICE_FIELD} and kind == cfg.device.split(":")[0]


class Trainer:
    """State of one run; :func:`train` is the entry point."""

    def __init__(self, cfg: TrainConfig, data: ImageData, device: torch.device, nvml: Nvml | None = None) -> None:
        self.cfg, self.device = cfg, device
        self.rss_start_mb = rss_mb()
        self.telemetry = Telemetry(device, nvml)
        self.readings: list[Hardware] = []
        torch.manual_seed(cfg.seed)
        net, self.info = build_network(cfg, data)
        self.placement = placement(data.nbytes, device)
        self.data = data.to(device) if self.placement == "device" else data  # else one mapping per host
        self.batches = BatchSource(
            self.data.train_images, self.data.train_labels, device, batch_size=cfg.batch_size, seed=cfg.seed
        )
        self.model = net.to(device)
        if device.type == "cuda":
            self.model = self.model.to(memory_format=torch.channels_last)
        self.ema = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.power = PowerEmas(self.model, cfg.ema_profiles) if cfg.ema_profiles else None
        self.net: Any = torch.compile(self.model) if cfg.compile else self.model
        self.opt = torch.optim.AdamW(
            param_groups(self.model, lr_scales_for(cfg, self.info, self.model)),
            lr=cfg.lr,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            weight_decay=cfg.weight_decay,
            fused=device.type == "cuda",
        )
        self.schedule = make_schedule(cfg)
        self.generator = torch.Generator(device).manual_seed(cfg.seed)
        images, levels = cfg.val_images, cfg.val_noise_levels
        moments = pixel_moments(self.data.train_images)  # one pass over the set for both probes
        self.probe: ValidationProbe = make_probe(
            self.data, num_images=images, num_levels=levels, device=device, moments=moments
        )
        self.train_probe = make_probe(
            self.data, num_images=images, num_levels=levels, split="train", device=device, moments=moments
        )
        self.step = 0
        self.ended_early = False  # ``end_early`` said so: a resumed run stays ended there
        self.losses: list[float] = []
        self.history: list[EvalPoint] = []
        self.pending: list[torch.Tensor] = []
        self.synced_at = time.perf_counter()

    @property
    def conditional(self) -> bool:
        return self.info.conditional

    @property
    def ema_model(self) -> DiffusionModel:
        return DiffusionModel(self.ema, self.info, self.schedule, self.cfg.prediction)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        cfg = self.cfg
        images, labels = self.batches.get(self.step)
        x = to_model_range(images)
        flip = torch.rand(x.shape[0], device=self.device, generator=self.generator) < (0.5 if cfg.hflip else 0.0)
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
        if not self.conditional:
            return x, None
        drop = torch.rand(labels.shape[0], device=self.device, generator=self.generator) < cfg.p_uncond
        return x, torch.where(drop, torch.full_like(labels, self.info.null_class), labels)

    def train_step(self) -> None:
        cfg = self.cfg
        for group in self.opt.param_groups:
            group["lr"] = lr_at(cfg, self.step) * group.get("lr_scale", 1.0)  # absent in pre-µP checkpoints
        started = time.perf_counter()
        x, labels = self.batch()
        self.telemetry.add_wait(time.perf_counter() - started)
        if self.device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        with autocast(self.device):
            loss = diffusion_loss(
                self.net,
                self.schedule,
                x,
                labels,
                prediction=cfg.prediction,
                weighting=cfg.loss_weighting,
                gamma=cfg.min_snr_gamma,
                generator=self.generator,
            )
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        self.opt.step()
        self.step += 1
        update_ema(self.ema, self.model, ema_beta(cfg, self.step * cfg.batch_size))
        if self.power is not None:
            self.power.update(self.model, self.step)
        finite_loss = torch.where(torch.isfinite(grad_norm), loss.detach().float(), grad_norm.float())
        self.pending.append(torch.stack([finite_loss, grad_norm.detach().float()]))

    def sync(self) -> SyncPoint | None:
        """Bring the pending losses to the host and check them; None when nothing was pending."""
        if not self.pending:
            return None
        values = torch.stack(self.pending).tolist()
        self.pending.clear()
        now = time.perf_counter()
        first = self.step - len(values) + 1
        steps = list(range(first, self.step + 1))
        point = SyncPoint(
            steps=steps,
            losses=[v[0] for v in values],
            grad_norms=[v[1] for v in values],
            lrs=[lr_at(self.cfg, s - 1) for s in steps],
            images_per_second=len(values) * self.cfg.batch_size / max(now - self.synced_at, 1e-9),
            hardware=self.telemetry.read(),
        )
        self.readings.append(point.hardware)  # type: ignore[arg-type]
        self.synced_at = now
        self.losses = (self.losses + point.losses)[-400:]
        check_losses(self.losses, self.cfg.diverge_factor, self.step)
        return point

    def run_steps(self, n: int) -> None:
        """``n`` optimizer steps with the trainer's own host syncs (the doctor's probes use this)."""
        for _ in range(n):
            self.train_step()
            if self.step % SYNC_EVERY == 0:
                self.sync()
        self.sync()

    def evaluate(self, index: int) -> EvalPoint:
        with eval_mode(self.ema):
            metrics = evaluate_probe(
                self.ema, self.schedule, self.probe, prediction=self.cfg.prediction, conditional=self.conditional
            )
            seen = evaluate_probe(
                self.ema, self.schedule, self.train_probe, prediction=self.cfg.prediction, conditional=self.conditional
            )
        metrics["train_rel"] = seen["val_rel"]
        metrics["gap"] = generalisation_gap(metrics["val_rel"], seen["val_rel"])
        recent = self.losses[-50:]
        metrics["train_loss"] = statistics.fmean(recent) if recent else float("nan")
        return EvalPoint(index, self.step, self.step * self.cfg.batch_size / 1000.0, metrics)

    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "ema": self.ema.state_dict(),
            "power_emas": self.power.state() if self.power is not None else [],
            "optimizer": self.opt.state_dict(),
            "step": self.step,
            "ended_early": self.ended_early,
            "losses": list(self.losses),
            "rng": rng_state(self.device, self.generator),
            "history": [to_plain(p) for p in self.history],
            "config": to_plain(self.cfg),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        if not same_run(state["config"], self.cfg):
            raise ValueError("checkpoint was written by a run with a different configuration; not resuming from it")
        self.model.load_state_dict(state["model"])
        self.ema.load_state_dict(state["ema"])
        if self.power is not None:
            self.power.load_state(state["power_emas"])
        self.opt.load_state_dict(state["optimizer"])
        self.step, self.losses = int(state["step"]), list(state["losses"])
        self.ended_early = bool(state.get("ended_early", False))
        restore_rng(state["rng"], self.device, self.generator)
        self.history = [EvalPoint(**{**p, "replayed": True}) for p in state["history"]]


def train(
    config: TrainConfig,
    data: ImageData,
    *,
    on_eval: OnEval | None = None,
    on_sync: OnSync | None = None,
    should_stop: Callable[[], bool] | None = None,
    may_save: Callable[[], bool] | None = None,
    end_early: Callable[[], bool] | None = None,
    checkpoint: Path | None = None,
    snapshot_dir: Path | None = None,
) -> TrainResult:
    """Train for ``config.kimg`` thousand images; call ``on_eval`` at each of the K fixed points.

    With ``checkpoint``, state is saved there at every evaluation point, and a run that finds a
    checkpoint resumes from it, first re-emitting the evaluation points it already passed.
    ``should_stop`` is polled at every step and before every save: True raises TrainingStopped.
    ``may_save``, a check too slow for every step (a database query), is asked before every save
    too: False raises TrainingStopped. With ``config.ema_profiles``, each power EMA is saved to
    ``snapshot_dir`` at ``config.snapshot_steps()`` (a resumed run finds the earlier ones there).
    ``end_early`` is asked after every evaluation point but the last, once it is saved and reported:
    True ends the run there, with that point's weights (a deadline; the result's ``steps`` says where).
    """
    if config.ema_profiles and snapshot_dir is None:
        raise ValueError("train.ema_profiles is set: pass snapshot_dir, where the post-hoc EMA snapshots go")
    device = resolve_device(config.device)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        trainer = Trainer(config, data, device)
        log.info("%s", placement_words(trainer.placement, data.nbytes))  # a run's, not each probe's (doctor, plan)
        if checkpoint is not None and checkpoint.exists():
            trainer.load_state(load_checkpoint(checkpoint))
            log.info("resumed from %s at step %d", checkpoint, trainer.step)
        stop = should_stop or (lambda: False)

        def save_allowed() -> bool:
            return not stop() and (may_save is None or may_save())

        end = end_early or (lambda: False)
        try:
            return _run(trainer, on_eval, on_sync, stop, save_allowed, end, checkpoint, snapshot_dir)
        finally:
            trainer.batches.close()


def _run(
    trainer: Trainer,
    on_eval: OnEval | None,
    on_sync: OnSync | None,
    should_stop: Callable[[], bool],
    may_save: Callable[[], bool],
    end_early: Callable[[], bool],
    checkpoint: Path | None,
    snapshot_dir: Path | None,
) -> TrainResult:
    cfg = trainer.cfg
    snapshot_at = set(cfg.snapshot_steps())
    for point in trainer.history:
        if on_eval is not None:
            on_eval(point, trainer.ema_model)
    start_step, started = trainer.step, time.perf_counter()
    eval_seconds, eval_points = 0.0, 0
    eval_at = {step: k for k, step in enumerate(cfg.eval_steps(), start=1)}
    log_every = max(SYNC_EVERY, cfg.total_steps // 20)
    if trainer.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(trainer.device)
    trainer.synced_at = time.perf_counter()
    while trainer.step < cfg.total_steps and not trainer.ended_early:
        if should_stop():
            raise TrainingStopped(trainer.step)
        trainer.train_step()
        if trainer.step % SYNC_EVERY == 0 or trainer.step in eval_at or trainer.step == cfg.total_steps:
            synced = trainer.sync()
            if synced is not None:
                if on_sync is not None:
                    on_sync(synced)
                if trainer.step // log_every > (synced.steps[0] - 1) // log_every:
                    log.info("step %d/%d  loss %s", trainer.step, cfg.total_steps, _loss_text(synced.losses))
        if trainer.step in snapshot_at and trainer.power is not None and snapshot_dir is not None:
            trainer.power.save_snapshots(snapshot_dir, trainer.step)
        if trainer.step in eval_at:
            eval_started = time.perf_counter()
            point = trainer.evaluate(eval_at[trainer.step])
            trainer.history.append(point)
            if checkpoint is not None:
                if not may_save():
                    raise TrainingStopped(trainer.step)
                atomic_save(trainer.state(), checkpoint)
            if on_eval is not None:
                on_eval(point, trainer.ema_model)
            eval_seconds, eval_points = eval_seconds + time.perf_counter() - eval_started, eval_points + 1
            if trainer.step < cfg.total_steps and end_early():
                log.info("ended early at evaluation point %d of %d (step %d)", point.index, cfg.num_evals, trainer.step)
                trainer.ended_early = True
                if checkpoint is not None:  # a stop before the sweep resumes to the same end, not one interval on
                    atomic_save(trainer.state(), checkpoint)
                break
    seconds = time.perf_counter() - started
    images = (trainer.step - start_step) * cfg.batch_size
    return TrainResult(
        model=trainer.ema_model,
        history=trainer.history,
        steps=trainer.step,
        images_seen=trainer.step * cfg.batch_size,
        seconds=seconds,
        images_per_second=images / seconds if seconds > 0 else 0.0,
        peak_memory_bytes=peak_memory_bytes(trainer.device),
        eval_seconds=eval_seconds,
        eval_points=eval_points,
        device=str(trainer.device),
        num_parameters=count_parameters(trainer.model),
        snapshot_dir=snapshot_dir if cfg.ema_profiles else None,
        hardware=summarise_hardware(trainer.readings, rss_start_mb=trainer.rss_start_mb),
    )


def _loss_text(losses: list[float]) -> str:
    """The mean of the synced losses; 'NaN' only when a loss really is not finite."""
    if not all(math.isfinite(v) for v in losses):
        return "NaN"
    return f"{statistics.fmean(losses):.4f}"
