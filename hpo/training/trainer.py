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
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpo.diffusion.losses import diffusion_loss
from hpo.diffusion.schedule import NoiseSchedule
from hpo.spec.config import TrainConfig
from hpo.spec.typed import to_plain
from hpo.training.batches import BatchSource, placement, placement_words
from hpo.training.checkpoint import State, atomic_save, load_checkpoint, restore_rng, rng_state
from hpo.training.data import ImageData, to_model_range
from hpo.training.events import SYNC_EVERY, Hooks, check_losses
from hpo.training.events import EvalPoint as EvalPoint
from hpo.training.events import OnEval as OnEval
from hpo.training.events import OnSync as OnSync
from hpo.training.events import SyncPoint as SyncPoint
from hpo.training.events import TrainingAborted as TrainingAborted
from hpo.training.events import TrainingStopped as TrainingStopped
from hpo.training.events import TrainResult as TrainResult
from hpo.training.lineage import ADDED_SINCE as ADDED_SINCE
from hpo.training.lineage import DEVICE_FIELD as DEVICE_FIELD
from hpo.training.lineage import branch_config, check_stable
from hpo.training.lineage import same_run as same_run
from hpo.training.lr import cooldown_start, cooldown_steps, end_step
from hpo.training.lr import lr_at as lr_at
from hpo.training.model import DiffusionModel, build_network, count_parameters, lr_scales_for
from hpo.training.mup import param_groups
from hpo.training.posthoc_ema import PowerEmas
from hpo.training.runtime import autocast, eval_mode, peak_memory_bytes, resolve_device
from hpo.training.telemetry import Hardware, Nvml, Telemetry, rss_mb, summarise_hardware
from hpo.training.validation import ValidationProbe, evaluate_probe, generalisation_gap, make_probe, pixel_moments

log = logging.getLogger("hpo.train")


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


@torch.no_grad()
def update_ema(ema: nn.Module, model: nn.Module, beta: float) -> None:
    ema_params: list[torch.Tensor] = list(ema.parameters())
    params: list[torch.Tensor] = list(model.parameters())
    torch._foreach_lerp_(ema_params, params, 1.0 - beta)


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
        self.cooldown_from: int | None = None  # wsd: the step its cooldown started early at (``cool_when``)
        self.continued_from: int | None = None  # the step of the shorter run's branch state it continued
        self.losses: list[float] = []
        self.history: list[EvalPoint] = []
        self.pending: list[torch.Tensor] = []
        self.synced_at = time.perf_counter()

    @property
    def conditional(self) -> bool:
        return self.info.conditional

    @property
    def end_step(self) -> int:
        """The step the run ends at: the budget's last, or the end of a cooldown that started early."""
        return end_step(self.cfg, self.cooldown_from)

    @property
    def cooldown_begin(self) -> int | None:
        """wsd: the first step of the cooldown (the state there is the last at full lr); else None."""
        if self.cfg.lr_schedule != "wsd":
            return None
        return cooldown_start(self.cfg) if self.cooldown_from is None else self.cooldown_from

    def eval_points(self) -> dict[int, int]:
        """Step → index of the evaluation points this run reaches; a run whose cooldown started early
        is evaluated at its end too, as the point after the last it passed."""
        planned = {step: k for k, step in enumerate(self.cfg.eval_steps(), start=1) if step <= self.end_step}
        return planned if self.end_step in planned else {**planned, self.end_step: len(planned) + 1}

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
            group["lr"] = lr_at(cfg, self.step, self.cooldown_from) * group.get(
                "lr_scale", 1.0
            )  # absent in pre-µP checkpoints
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
            lrs=[lr_at(self.cfg, s - 1, self.cooldown_from) for s in steps],
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

    def state(self) -> State:
        return {
            "model": self.model.state_dict(),
            "ema": self.ema.state_dict(),
            "power_emas": self.power.state() if self.power is not None else [],
            "optimizer": self.opt.state_dict(),
            "step": self.step,
            "ended_early": self.ended_early,
            "cooldown_from": self.cooldown_from,
            "continued_from": self.continued_from,
            "losses": list(self.losses),
            "rng": rng_state(self.device, self.generator),
            "history": [to_plain(p) for p in self.history],
            "config": to_plain(self.cfg),
        }

    def load_state(self, state: State) -> None:
        if not same_run(state["config"], self.cfg):
            raise ValueError("checkpoint was written by a run with a different configuration; not resuming from it")
        self.load_training(state)
        self.ended_early = bool(state.get("ended_early", False))
        self.cooldown_from, self.continued_from = state.get("cooldown_from"), state.get("continued_from")
        self.history = [EvalPoint(**{**p, "replayed": True}) for p in state["history"]]

    def continue_state(self, state: State) -> None:
        """Take up the branch state of a shorter wsd run of this configuration (only the budget fields
        may differ) as this longer run's prefix: everything but its evaluation history, for this run
        is evaluated at its own points. Raises ValueError for another configuration or a state that
        is past its stable phase."""
        self.continued_from = check_stable(state, branch_config(state, self.cfg), self.cfg)
        self.load_training(state)

    def load_training(self, state: State) -> None:
        """Weights, their averages, the optimizer, step, recent losses and RNG streams of ``state``."""
        self.model.load_state_dict(state["model"])
        self.ema.load_state_dict(state["ema"])
        if self.power is not None:
            self.power.load_state(state["power_emas"])
        self.opt.load_state_dict(state["optimizer"])
        self.step, self.losses = int(state["step"]), list(state["losses"])
        restore_rng(state["rng"], self.device, self.generator)


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
    branch: Path | None = None,
    continue_from: Path | None = None,
    cool_when: Callable[[int, int], bool] | None = None,
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

    The rest need ``lr_schedule: wsd``. ``branch``: the state at the step where the cooldown starts
    (the last at full lr) is saved there, for a longer run to continue. ``continue_from``: a run
    with no checkpoint yet starts from that branch state of a shorter run of this configuration
    (:meth:`Trainer.continue_state`). ``cool_when`` is asked at every sync of the stable phase with
    the step and the cooldown's length in steps: True starts the cooldown at once, and the run ends that many
    steps later (evaluated there too); the checkpoint is saved there, so a resumed run ends there too.
    """
    if config.ema_profiles and snapshot_dir is None:
        raise ValueError("train.ema_profiles is set: pass snapshot_dir, where the post-hoc EMA snapshots go")
    wsd_only = {"branch": branch, "continue_from": continue_from, "cool_when": cool_when}
    if config.lr_schedule != "wsd" and (given := [k for k, v in wsd_only.items() if v is not None]):
        raise ValueError(f"{', '.join(given)} need lr_schedule wsd, got {config.lr_schedule!r}")
    device = resolve_device(config.device)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        trainer = Trainer(config, data, device)
        log.info("%s", placement_words(trainer.placement, data.nbytes))  # a run's, not each probe's (doctor, plan)
        _start(trainer, checkpoint, continue_from)
        stop = should_stop or (lambda: False)

        def save_allowed() -> bool:
            return not stop() and (may_save is None or may_save())

        end = end_early or (lambda: False)
        hooks = Hooks(on_eval, on_sync, stop, save_allowed, end, cool_when, checkpoint, snapshot_dir, branch)
        try:
            return _run(trainer, hooks)
        finally:
            trainer.batches.close()


def _start(trainer: Trainer, checkpoint: Path | None, continue_from: Path | None) -> None:
    """Resume from the run's own checkpoint, else continue a shorter run's branch state, if given."""
    if checkpoint is not None and checkpoint.exists():
        trainer.load_state(load_checkpoint(checkpoint))
        log.info("resumed from %s at step %d", checkpoint, trainer.step)
    elif continue_from is not None:
        trainer.continue_state(load_checkpoint(continue_from))
        kimg = trainer.step * trainer.cfg.batch_size / 1000
        log.info("continued from %s at step %d (%g kimg)", continue_from, trainer.step, kimg)


def _run(trainer: Trainer, hooks: Hooks) -> TrainResult:
    cfg = trainer.cfg
    snapshot_at = set(cfg.snapshot_steps())
    for point in trainer.history:
        if hooks.on_eval is not None:
            hooks.on_eval(point, trainer.ema_model)
    start_step, started = trainer.step, time.perf_counter()
    eval_seconds, eval_points = 0.0, 0
    if trainer.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(trainer.device)
    trainer.synced_at = time.perf_counter()
    while trainer.step < trainer.end_step and not trainer.ended_early:
        if hooks.should_stop():
            raise TrainingStopped(trainer.step)
        trainer.train_step()
        eval_at = trainer.eval_points()
        cooled = _sync(trainer, hooks, at_eval=trainer.step in eval_at)
        _save_branch_and_snapshots(trainer, hooks, snapshot_at)
        eval_at = trainer.eval_points()  # a cooldown that started just now moved the end
        if trainer.step not in eval_at:
            if cooled:  # where the cooldown started is kept: a resumed run ends where this one does
                _save(trainer, hooks)
            continue
        eval_started = time.perf_counter()
        point = _evaluate(trainer, hooks, eval_at[trainer.step])
        eval_seconds, eval_points = eval_seconds + time.perf_counter() - eval_started, eval_points + 1
        if trainer.step < trainer.end_step and hooks.end_early():
            log.info("ended early at evaluation point %d of %d (step %d)", point.index, cfg.num_evals, trainer.step)
            trainer.ended_early = True
            if hooks.checkpoint is not None:  # a stop before the sweep resumes to the same end, not one interval on
                atomic_save(trainer.state(), hooks.checkpoint)
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
        snapshot_dir=hooks.snapshot_dir if cfg.ema_profiles else None,
        hardware=summarise_hardware(trainer.readings, rss_start_mb=trainer.rss_start_mb),
        continued_from_step=trainer.continued_from,
        cooldown_from_step=trainer.cooldown_begin,
    )


def _sync(trainer: Trainer, hooks: Hooks, *, at_eval: bool) -> bool:
    """Sync when one is due (every SYNC_EVERY steps, at evaluation points, at the cooldown start and
    the end); at each regular sync of the stable phase ask ``cool_when``. True: the cooldown starts now."""
    step, cfg = trainer.step, trainer.cfg
    regular = step % SYNC_EVERY == 0
    if not (regular or at_eval or step in (trainer.cooldown_begin, trainer.end_step)):
        return False
    synced = trainer.sync()
    if synced is not None:
        if hooks.on_sync is not None:
            hooks.on_sync(synced)
        log_every = max(SYNC_EVERY, cfg.total_steps // 20)
        if step // log_every > (synced.steps[0] - 1) // log_every:
            log.info("step %d/%d  loss %s", step, trainer.end_step, _loss_text(synced.losses))
    stable = trainer.cooldown_from is None and step < cooldown_start(cfg)
    if not (regular and stable and hooks.cool_when is not None and hooks.cool_when(step, cooldown_steps(cfg))):
        return False
    trainer.cooldown_from = step
    log.info(
        "cooldown starts early at step %d (planned %d): the run ends at step %d",
        step,
        cooldown_start(cfg),
        trainer.end_step,
    )
    return True


def _save_branch_and_snapshots(trainer: Trainer, hooks: Hooks, snapshot_at: set[int]) -> None:
    """The branch state at the cooldown's start (the last state at full lr: a longer run continues
    it); the power EMAs at their snapshot steps and at the run's end, wherever the cooldown put it."""
    if trainer.step == trainer.cooldown_begin and hooks.branch is not None:
        if not hooks.may_save():
            raise TrainingStopped(trainer.step)
        atomic_save(trainer.state(), hooks.branch)
        log.info("branch state saved to %s at step %d", hooks.branch, trainer.step)
    at_snapshot = trainer.step in snapshot_at or trainer.step == trainer.end_step
    if at_snapshot and trainer.power is not None and hooks.snapshot_dir is not None:
        trainer.power.save_snapshots(hooks.snapshot_dir, trainer.step)


def _evaluate(trainer: Trainer, hooks: Hooks, index: int) -> EvalPoint:
    """Evaluation point ``index`` at this step: measured, kept, saved, then reported."""
    point = trainer.evaluate(index)
    trainer.history.append(point)
    _save(trainer, hooks)
    if hooks.on_eval is not None:
        hooks.on_eval(point, trainer.ema_model)
    return point


def _save(trainer: Trainer, hooks: Hooks) -> None:
    if hooks.checkpoint is not None:
        if not hooks.may_save():
            raise TrainingStopped(trainer.step)
        atomic_save(trainer.state(), hooks.checkpoint)


def _loss_text(losses: list[float]) -> str:
    """The mean of the synced losses; 'NaN' only when a loss really is not finite."""
    if not all(math.isfinite(v) for v in losses):
        return "NaN"
    return f"{statistics.fmean(losses):.4f}"
