"""One training run: budget in images seen, evaluation at fixed fractions, EMA with warm-up,
NaN and divergence guards, and checkpoints that resume exactly. Knows nothing of Optuna: the
caller's ``on_eval`` callback may raise to stop the run (that is how pruning plugs in)."""

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

from hpo.checkpoint import atomic_save, load_checkpoint, restore_rng, rng_state
from hpo.config import TrainConfig
from hpo.data import ImageData, to_model_range
from hpo.diffusion.losses import diffusion_loss
from hpo.diffusion.schedule import NoiseSchedule
from hpo.diffusion.unet import UNet, UNetConfig, count_parameters
from hpo.runtime import autocast, eval_mode, peak_memory_bytes, resolve_device
from hpo.typed import to_plain
from hpo.validation import ValidationProbe, evaluate_probe, make_probe

log = logging.getLogger("hpo.train")

CHECK_EVERY = 8  # steps between host syncs for the NaN / divergence checks
DIVERGE_WINDOW, DIVERGE_MIN_HISTORY = 10, 50


class TrainingAborted(RuntimeError):
    """The run cannot continue: ``reason`` is ``nan_loss`` or ``diverged``."""

    def __init__(self, reason: str, step: int, detail: str) -> None:
        self.reason, self.step = reason, step
        super().__init__(f"{reason} at step {step}: {detail}")


@dataclass(frozen=True)
class EvalPoint:
    index: int  # 1..K
    step: int
    kimg: float
    metrics: dict[str, float]
    replayed: bool = False  # re-emitted from a checkpoint on resume


@dataclass
class TrainResult:
    model: UNet
    ema: UNet  # the weights to sample from
    schedule: NoiseSchedule
    history: list[EvalPoint]
    steps: int
    images_seen: int
    seconds: float
    images_per_second: float
    peak_memory_bytes: int
    device: str
    num_parameters: int


OnEval = Callable[[EvalPoint, UNet], None]  # (the point, the EMA network in eval mode)


def build_model(cfg: TrainConfig, data: ImageData) -> UNet:
    num_classes = data.num_classes if cfg.conditional and data.num_classes > 1 else 0
    return UNet(
        UNetConfig(
            in_channels=data.channels,
            base_channels=cfg.base_channels,
            channel_mult=cfg.channel_mult,
            num_res_blocks=cfg.num_res_blocks,
            attention_resolutions=cfg.attention_resolutions,
            dropout=cfg.dropout,
            num_classes=num_classes,
            image_size=data.image_size,
        )
    )


def make_schedule(cfg: TrainConfig) -> NoiseSchedule:
    return NoiseSchedule.create(cfg.schedule, cfg.timesteps, beta_start=cfg.beta_start, beta_end=cfg.beta_end)


def batch_indices(n: int, batch: int, step: int, seed: int) -> torch.Tensor:
    """Indices of the batch at ``step``: epochs are seeded permutations, so this is stateless."""
    out: list[torch.Tensor] = []
    pos, end = step * batch, (step + 1) * batch
    while pos < end:
        epoch, offset = divmod(pos, n)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        take = min(n - offset, end - pos)
        out.append(perm[offset : offset + take])
        pos += take
    return torch.cat(out)


def ema_beta(cfg: TrainConfig, images_seen: int) -> float:
    """EDM's EMA (Karras et al. 2022): half-life in images, ramped up to ``ema_rampup`` × images seen."""
    halflife = cfg.ema_halflife_kimg * 1000.0
    if cfg.ema_rampup > 0:
        halflife = min(halflife, images_seen * cfg.ema_rampup)
    return 0.5 ** (cfg.batch_size / max(halflife, 1e-8))


@torch.no_grad()
def update_ema(ema: nn.Module, model: nn.Module, beta: float) -> None:
    ema_params: list[torch.Tensor] = list(ema.parameters())
    params: list[torch.Tensor] = list(model.parameters())
    torch._foreach_lerp_(ema_params, params, 1.0 - beta)


def check_losses(losses: list[float], factor: float, step: int) -> None:
    """Raise TrainingAborted on a non-finite loss, or a recent mean far above the running median."""
    if not all(math.isfinite(v) for v in losses[-CHECK_EVERY:]):
        raise TrainingAborted("nan_loss", step, "loss or gradient norm is not finite")
    if len(losses) >= DIVERGE_MIN_HISTORY:
        recent = statistics.fmean(losses[-DIVERGE_WINDOW:])
        median = statistics.median(losses[-200 - DIVERGE_WINDOW : -DIVERGE_WINDOW])
        if recent > factor * median:
            raise TrainingAborted(
                "diverged", step, f"loss {recent:.4g} is over {factor:g}× its running median {median:.4g}"
            )


class Trainer:
    """State of one run; :func:`train` is the entry point."""

    def __init__(self, cfg: TrainConfig, data: ImageData, device: torch.device) -> None:
        self.cfg, self.device = cfg, device
        self.data = data.to(device)
        torch.manual_seed(cfg.seed)
        self.model = build_model(cfg, data).to(device)
        if device.type == "cuda":
            self.model = self.model.to(memory_format=torch.channels_last)
        self.ema = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.net: Any = torch.compile(self.model) if cfg.compile else self.model
        self.opt = torch.optim.AdamW(
            self.model.parameters(),
            lr=cfg.lr,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            weight_decay=cfg.weight_decay,
            fused=device.type == "cuda",
        )
        self.schedule = make_schedule(cfg)
        self.generator = torch.Generator(device).manual_seed(cfg.seed)
        self.probe: ValidationProbe = make_probe(self.data, num_images=cfg.val_images, num_levels=cfg.val_noise_levels)
        self.step = 0
        self.losses: list[float] = []
        self.history: list[EvalPoint] = []
        self.pending: list[torch.Tensor] = []

    @property
    def conditional(self) -> bool:
        return self.model.cfg.num_classes > 0

    def batch(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        cfg = self.cfg
        idx = batch_indices(self.data.train_images.shape[0], cfg.batch_size, self.step, cfg.seed).to(self.device)
        x = to_model_range(self.data.train_images[idx])
        flip = torch.rand(x.shape[0], device=self.device, generator=self.generator) < (0.5 if cfg.hflip else 0.0)
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
        if not self.conditional:
            return x, None
        labels = self.data.train_labels[idx]
        drop = torch.rand(labels.shape[0], device=self.device, generator=self.generator) < cfg.p_uncond
        return x, torch.where(drop, torch.full_like(labels, self.model.null_class), labels)

    def train_step(self) -> None:
        cfg = self.cfg
        images_seen = self.step * cfg.batch_size
        warmup = cfg.warmup_kimg * 1000.0
        for group in self.opt.param_groups:
            group["lr"] = cfg.lr * (min(1.0, (images_seen + cfg.batch_size) / warmup) if warmup > 0 else 1.0)
        x, labels = self.batch()
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
        self.pending.append(torch.where(torch.isfinite(grad_norm), loss.detach(), grad_norm))

    def flush_losses(self) -> None:
        if self.pending:
            self.losses.extend(torch.stack(self.pending).float().tolist())
            self.pending.clear()
            self.losses = self.losses[-400:]
            check_losses(self.losses, self.cfg.diverge_factor, self.step)

    def evaluate(self, index: int) -> EvalPoint:
        with eval_mode(self.ema):
            metrics = evaluate_probe(
                self.ema, self.schedule, self.probe, prediction=self.cfg.prediction, conditional=self.conditional
            )
        recent = self.losses[-50:]
        metrics["train_loss"] = statistics.fmean(recent) if recent else float("nan")
        return EvalPoint(index, self.step, self.step * self.cfg.batch_size / 1000.0, metrics)

    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "ema": self.ema.state_dict(),
            "optimizer": self.opt.state_dict(),
            "step": self.step,
            "losses": list(self.losses),
            "rng": rng_state(self.device, self.generator),
            "history": [to_plain(p) for p in self.history],
            "config": to_plain(self.cfg),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        if state["config"] != to_plain(self.cfg):
            raise ValueError("checkpoint was written by a run with a different configuration; not resuming from it")
        self.model.load_state_dict(state["model"])
        self.ema.load_state_dict(state["ema"])
        self.opt.load_state_dict(state["optimizer"])
        self.step, self.losses = int(state["step"]), list(state["losses"])
        restore_rng(state["rng"], self.device, self.generator)
        self.history = [EvalPoint(**{**p, "replayed": True}) for p in state["history"]]


def train(
    config: TrainConfig,
    data: ImageData,
    *,
    on_eval: OnEval | None = None,
    checkpoint: Path | None = None,
) -> TrainResult:
    """Train for ``config.kimg`` thousand images; call ``on_eval`` at each of the K fixed points.

    With ``checkpoint``, state is saved there at every evaluation point, and a run that finds a
    checkpoint resumes from it, first re-emitting the evaluation points it already passed.
    """
    device = resolve_device(config.device)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        trainer = Trainer(config, data, device)
        if checkpoint is not None and checkpoint.exists():
            trainer.load_state(load_checkpoint(checkpoint))
            log.info("resumed from %s at step %d", checkpoint, trainer.step)
        return _run(trainer, on_eval, checkpoint)


def _run(trainer: Trainer, on_eval: OnEval | None, checkpoint: Path | None) -> TrainResult:
    cfg = trainer.cfg
    for point in trainer.history:
        if on_eval is not None:
            on_eval(point, trainer.ema)
    start_step, started = trainer.step, time.perf_counter()
    eval_at = {step: k for k, step in enumerate(cfg.eval_steps(), start=1)}
    report_every = max(1, cfg.total_steps // 20)
    if trainer.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(trainer.device)
    while trainer.step < cfg.total_steps:
        trainer.train_step()
        if trainer.step % CHECK_EVERY == 0 or trainer.step in eval_at:
            trainer.flush_losses()
        if trainer.step % report_every == 0:
            log.info(
                "step %d/%d  loss %.4f",
                trainer.step,
                cfg.total_steps,
                trainer.losses[-1] if trainer.losses else float("nan"),
            )
        if trainer.step in eval_at:
            point = trainer.evaluate(eval_at[trainer.step])
            trainer.history.append(point)
            if checkpoint is not None:
                atomic_save(trainer.state(), checkpoint)
            if on_eval is not None:
                on_eval(point, trainer.ema)
    seconds = time.perf_counter() - started
    images = (trainer.step - start_step) * cfg.batch_size
    return TrainResult(
        model=trainer.model,
        ema=trainer.ema,
        schedule=trainer.schedule,
        history=trainer.history,
        steps=trainer.step,
        images_seen=trainer.step * cfg.batch_size,
        seconds=seconds,
        images_per_second=images / seconds if seconds > 0 else 0.0,
        peak_memory_bytes=peak_memory_bytes(trainer.device),
        device=str(trainer.device),
        num_parameters=count_parameters(trainer.model),
    )
