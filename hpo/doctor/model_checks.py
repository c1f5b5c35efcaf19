"""Model and training-step checks on a few real steps: overfitting one batch, gradients reaching
every parameter, the network using t and the class, mixed precision, memory and speed, and the top
of the learning-rate range."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

from hpo.diffusion.network import NetInfo
from hpo.doctor.diagnose import OverfitResult, overfit_single_batch
from hpo.doctor.result import Check
from hpo.spec.config import ScoreConfig, TrainConfig
from hpo.spec.sampling import SamplingSweep
from hpo.training.data import ImageData, to_model_range
from hpo.training.model import build_network, count_parameters, net_info
from hpo.training.trainer import Trainer, TrainingAborted

OVERFIT_FACTOR = 10.0


OVERFIT_LRS = (2e-3, 5e-4, 2e-4, 5e-5)  # Adam on one fixed batch: small networks take the first, large ones a lower one
LARGE_NETWORK = 10_000_000  # parameters from which the ladder starts at 2e-4 (each step of it costs minutes there)


def overfit_rates(num_parameters: int) -> tuple[float, ...]:
    """The rates to try, most likely first: a 0.65M-parameter UNet overfits at 2e-3 (1.3× at 2e-4),
    the 35.7M-parameter bikes UNet gets nowhere at 2e-3 and 156× at 2e-4."""
    if num_parameters < LARGE_NETWORK:
        return OVERFIT_LRS
    return (2e-4, 5e-4, 5e-5, 2e-3)


def overfit(cfg: TrainConfig, data: ImageData, steps: int) -> tuple[Check, OverfitResult]:
    """Overfit one fixed batch at each rate of :func:`overfit_rates` until one drives the loss down
    :data:`OVERFIT_FACTOR`×: a working network passes at some rate, a broken one at none."""
    tried: list[tuple[float, OverfitResult]] = []
    for lr in overfit_rates(count_parameters(build_network(cfg, data)[0])):
        r = overfit_single_batch(cfg, data, steps=steps, lr=lr)
        tried.append((lr, r))
        if r.factor >= OVERFIT_FACTOR:
            break
    lr, r = tried[-1]
    text = (
        f"loss on one fixed batch {r.initial_loss:.3g} → {r.final_loss:.3g} ({r.factor:.0f}× in {r.steps} steps "
        f"at Adam lr {lr:g})"
    )
    if len(tried) > 1:
        text += "; " + ", ".join(f"lr {x:g}: {t.factor:.1f}×" for x, t in tried[:-1])
    if r.factor >= OVERFIT_FACTOR:
        return Check("model: overfit one batch", "pass", text), r
    _, best = max(tried, key=lambda item: item[1].factor)
    return Check(
        "model: overfit one batch",
        "fail",
        f"{text}; a working model drives it down {OVERFIT_FACTOR:.0f}× at one of these rates",
        "the network or the training step is broken: check frozen layers, the loss target, the data",
    ), best


VISIBLE_GRADIENT = 1e-6  # 100x Adam's eps: a step of about lr, visible in fp32 beside weights near 1


def gradient_flow(cfg: TrainConfig, data: ImageData, device: torch.device, steps: int = 3) -> Check:
    """Every parameter gets a finite non-zero gradient within a few steps and then changes."""
    trainer = Trainer(cfg.replace(grad_clip=0.0, warmup_kimg=0.0), data, device)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    largest: dict[str, float] = {}
    bad: list[str] = []
    for _ in range(steps):
        trainer.train_step()
        for name, p in trainer.model.named_parameters():
            if p.grad is None:
                continue
            if not torch.isfinite(p.grad).all():
                bad.append(name)
            else:
                largest[name] = max(largest.get(name, 0.0), float(p.grad.abs().max()))
    names = [n for n, _ in trainer.model.named_parameters()]
    frozen = [n for n, p in trainer.model.named_parameters() if not p.requires_grad]
    no_grad = [n for n in names if largest.get(n, 0.0) == 0.0 and n not in frozen]
    stepped = {id(p) for group in trainer.opt.param_groups if group["lr"] > 0 for p in group["params"]}
    unstepped = [n for n, p in trainer.model.named_parameters() if p.requires_grad and id(p) not in stepped]
    # An Adam step moves a parameter by about lr once its gradient is well above eps (1e-8); below
    # that (weights behind zero-initialised layers in their first steps) no change shows in fp32.
    unchanged = unstepped + [
        n for n, p in trainer.model.named_parameters()
        if n not in unstepped and largest.get(n, 0.0) > VISIBLE_GRADIENT and torch.equal(p.detach(), before[n])
    ]  # fmt: skip
    if bad:
        return Check(
            "model: gradients", "fail", f"non-finite gradients in {_few(bad)}", "lower lr, check the data range"
        )
    if frozen or no_grad:
        parts = ([f"frozen (requires_grad=False): {_few(frozen)}"] if frozen else []) + (
            [f"no gradient, not connected to the loss: {_few(no_grad)}"] if no_grad else []
        )
        return Check("model: gradients", "fail", "; ".join(parts), "unfreeze the layers or connect them to the output")
    if unchanged:
        return Check(
            "model: gradients",
            "fail",
            f"parameters unchanged by {steps} optimizer steps: {_few(unchanged)}",
            "check the optimizer's parameter list and learning rate",
        )
    return Check(
        "model: gradients", "pass", f"all {len(names)} parameter tensors get finite, non-zero gradients and steps"
    )


def _few(names: Iterable[str], n: int = 4) -> str:
    names = list(names)
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


@torch.no_grad()
def conditioning(model: nn.Module, info: NetInfo, data: ImageData) -> list[Check]:
    """The output must depend on t, and on the class for conditional networks."""
    device = next(model.parameters()).device
    x0 = to_model_range(data.val_images[:16].to(device))
    x = 0.7 * x0 + 0.7 * torch.randn(x0.shape, generator=torch.Generator().manual_seed(0)).to(device)
    labels = data.val_labels[:16].to(device) if info.conditional else None
    t = torch.full((x.shape[0],), 100.0, device=device)
    base = model(x, t, labels)
    scale = base.abs().mean().clamp_min(1e-8)
    dt = float((model(x, t * 9, labels) - base).abs().mean() / scale)
    out = [
        Check(
            "model: uses the timestep",
            "pass" if dt > 1e-2 else "fail",
            f"output changes by {dt:.2%} between t=100 and t=900 (of 1000)",
            "the time embedding does not reach the network: check timestep_embedding and its MLP",
        )
    ]
    if labels is None:
        out.append(Check("model: uses the class", "skip", "unconditional model"))
        return out
    other = (labels + 1) % info.num_classes
    dc = float((model(x, t, other) - base).abs().mean() / scale)
    out.append(
        Check(
            "model: uses the class",
            "pass" if dc > 1e-3 else "fail",
            f"output changes by {dc:.2%} when the class label changes",
            "the class embedding does not reach the network: classifier-free guidance will do nothing",
        )
    )
    return out


def mixed_precision(cfg: TrainConfig, data: ImageData, device: torch.device, steps: int = 5) -> Check:
    if device.type != "cuda":
        return Check(
            "training: bf16 mixed precision", "skip", "no GPU here; the trainer uses bf16 autocast on CUDA only"
        )
    trainer = Trainer(cfg, data, device)
    try:
        trainer.run_steps(steps)
    except TrainingAborted as err:
        return Check("training: bf16 mixed precision", "fail", str(err), "keep the loss in fp32; lower lr")
    return Check("training: bf16 mixed precision", "pass", f"{steps} bf16-autocast steps stay finite")


def state_bytes(model: nn.Module) -> int:
    """Training state that does not grow with the batch: weights, gradients, Adam's m and v, the EMA."""
    return sum(p.numel() * p.element_size() for p in model.parameters()) * 5


@contextlib.contextmanager
def saved_bytes() -> Iterator[list[int]]:
    """Counts (in ``[0]``) the bytes autograd saves for the backward pass inside the block: the
    activations a training step holds at its peak."""
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield saved


def activation_bytes(cfg: TrainConfig, data: ImageData, device: torch.device) -> tuple[int, float]:
    """(bytes of training state + saved activations of one step, seconds per step)."""
    trainer = Trainer(cfg, data, device)
    with saved_bytes() as saved:
        trainer.train_step()
    state = state_bytes(trainer.model)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(2):
        trainer.train_step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return state + saved[0], (time.perf_counter() - start) / 2


# What each extra process on a GPU holds before its first tensor: the CUDA context and the cuDNN and
# cuBLAS workspaces (roughly 0.3-0.6 GiB on recent GPUs and drivers; this is the high end).
CUDA_CONTEXT_BYTES = int(0.6 * 2**30)


def memory_and_speed(
    cfgs: list[TrainConfig],
    data: ImageData,
    device: torch.device,
    *,
    limit_bytes: int,
    n_trials: int,
    workers: int,
    sampling: SamplingSweep,
    score: ScoreConfig,
    per_gpu: int = 1,
) -> list[Check]:
    """Each batch size's memory against the budget (split between ``per_gpu`` processes sharing a
    GPU, each less its CUDA context) and the study's predicted training time."""
    out, seconds = [], []
    if per_gpu > 1:
        limit_bytes = limit_bytes // per_gpu - CUDA_CONTEXT_BYTES
    for cfg in cfgs:
        need, step = activation_bytes(cfg, data, device)
        seconds.append(step * cfg.total_steps)
        text = (
            f"batch_size={cfg.batch_size} at {data.image_size} px: ~{need / 2**30:.2f} GiB, {step * 1000:.0f} ms/step, "
            f"{step * cfg.total_steps / 60:.1f} min of training per trial"
        )
        if need > limit_bytes:
            out.append(
                Check(
                    "memory",
                    "fail",
                    f"{text}; over the {limit_bytes / 2**30:.1f} GiB limit{shared(per_gpu)}",
                    "drop this batch size from the search space or use a smaller network"
                    + (f", or run fewer than {per_gpu} workers per GPU" if per_gpu > 1 else ""),
                )
            )
        else:
            out.append(Check("memory", "pass", text + (f"; fits{shared(per_gpu)}" if per_gpu > 1 else "")))
    cost = trial_cost(sampling, score, cfgs[0], data, device, train_seconds=sum(seconds) / len(seconds))
    out.append(Check("speed: predicted study time", "pass", study_time(cost, n_trials, workers)))
    return out


@dataclass(frozen=True)
class TrialCost:
    """What one complete trial costs: training, and the sampling sweep that scores it."""

    train_seconds: float
    sweep_seconds: float
    evaluations: int  # network evaluations per image the sweep spends, at most

    @property
    def seconds(self) -> float:
        return self.train_seconds + self.sweep_seconds


def study_time(cost: TrialCost, n_trials: int, workers: int) -> str:
    """The study's time from one complete trial's: what the doctor and ``hpo init`` predict."""
    return (
        f"~{cost.seconds * n_trials / workers / 3600:.1f} h for {n_trials} trials on {workers} worker(s) before "
        f"pruning: {cost.seconds / 60:.1f} min per complete trial, {cost.train_seconds / 60:.1f} of training and "
        f"{cost.sweep_seconds / 60:.1f} of sampling for the score ({cost.evaluations:,} network evaluations "
        "per image across the sweep, at most)"
    )


def trial_cost(
    sampling: SamplingSweep,
    score: ScoreConfig,
    cfg: TrainConfig,
    data: ImageData,
    device: torch.device,
    *,
    train_seconds: float,
) -> TrialCost:
    """A complete trial's cost: ``train_seconds``, and the sweep's network evaluations at the timed
    seconds per evaluation (feature extraction, a few percent of it on the classifier, not counted)."""
    evaluations = sampling.evaluations(score.num_samples, conditional=net_info(cfg, data).num_classes > 0)
    return TrialCost(train_seconds, evaluations * evaluation_seconds(cfg, data, device, score.batch_size), evaluations)


def evaluation_seconds(cfg: TrainConfig, data: ImageData, device: torch.device, batch_size: int) -> float:
    """Seconds per network evaluation of one image while sampling: two forward passes of the run's
    network (fresh weights: speed does not depend on them) at the sampling batch, in sampling's
    precision."""
    from hpo.diffusion.parameterization import model_time
    from hpo.training.runtime import autocast

    net, info = build_network(cfg, data)
    net = net.to(device).eval()
    x = torch.randn(batch_size, info.channels, info.image_size, info.image_size, device=device)
    t = model_time(torch.full((batch_size,), cfg.timesteps // 2, device=device), cfg.timesteps)
    labels = torch.zeros(batch_size, dtype=torch.long, device=device) if info.num_classes else None
    with torch.no_grad(), autocast(device, sampling=True):
        net(x, t, labels)  # warm-up
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(2):
            net(x, t, labels)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / 2 / batch_size


def stand_in_data(n: int, image_size: int, num_classes: int, channels: int = 3) -> ImageData:
    """Random images of a folder's shape: enough to time a training step without reading the folder."""
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, channels, image_size, image_size), dtype=torch.uint8, generator=gen)
    labels = torch.arange(n) % num_classes
    names = tuple(f"class{i}" for i in range(num_classes))
    return ImageData(images, labels, images[:8], labels[:8], names, key=f"stand-in-{n}-{image_size}-{num_classes}")


def trial_seconds(cfg: TrainConfig, data: ImageData, device: torch.device) -> float:
    """One trial's training time at ``cfg``'s batch size and budget, from two timed steps."""
    return activation_bytes(cfg, data, device)[1] * cfg.total_steps


def shared(per_gpu: int) -> str:
    if per_gpu == 1:
        return ""
    context = CUDA_CONTEXT_BYTES / 2**30
    return f" each of {per_gpu} processes on one GPU gets (--per-gpu {per_gpu}; {context:.1f} GiB each for CUDA)"


def lr_probe(cfg: TrainConfig, data: ImageData, device: torch.device, steps: int = 60) -> Check:
    """A short run at the top of the learning-rate range: divergence here wastes whole trials."""
    probe = cfg.replace(kimg=steps * cfg.batch_size / 1000, num_evals=1, device=str(device))
    trainer = Trainer(probe, data, device)
    try:
        trainer.run_steps(steps)
    except TrainingAborted as err:
        return Check(
            "learning rate: top of the range",
            "fail",
            f"lr={cfg.lr:g} {err.reason} at step {err.step}",
            "lower the upper bound of lr, or add warmup_kimg / grad_clip",
        )
    first, last = trainer.losses[:10], trainer.losses[-10:]
    a, b = sum(first) / len(first), sum(last) / len(last)
    if b > a:
        return Check(
            "learning rate: top of the range",
            "warn",
            f"lr={cfg.lr:g}: loss rose {a:.3g} → {b:.3g} in {steps} steps",
            "lower the upper bound of lr",
        )
    return Check("learning rate: top of the range", "pass", f"lr={cfg.lr:g}: loss {a:.3g} → {b:.3g} in {steps} steps")
