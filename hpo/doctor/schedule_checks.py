"""Checks of the noise schedule, the sampler settings, the network's reach and the data budget:
the classic reasons why samples stay grey, blotchy or memorised. Each says the number it saw."""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import torch
from torch import nn

from hpo.diffusion.network import NetInfo
from hpo.diffusion.schedule import NoiseSchedule
from hpo.doctor.result import Check
from hpo.spec.config import TrainConfig
from hpo.spec.samplers import DEFAULT_SAMPLER, sampler_facts
from hpo.training.data import ImageData
from hpo.training.refusal import TERMINAL_FAIL, TERMINAL_WARN, schedule_refusal, terminal_alpha_bar
from hpo.training.trainer import make_schedule

WASTED_SHARE = 0.3  # share of training timesteps at |log-SNR| > 8
EPOCHS_BEFORE_MEMORISING = 500  # rule of thumb, see data_budget
PARAMS_PER_IMAGE = 1000


def terminal_snr(schedule: NoiseSchedule, label: str) -> Check:
    """Sampling starts from pure noise; training must end there too (Lin et al. 2024)."""
    abar = terminal_alpha_bar(schedule)
    log_snr = float(schedule.log_snr[-1])
    text = f"{label}: ᾱ at the last step is {abar:.3g} (log-SNR {log_snr:.2f})"
    fix = (
        "the model never sees pure noise, but sampling starts from it: samples stay grey or blotchy. "
        "Use the cosine schedule, zero_terminal_snr: true (with v-prediction), or more steps/larger betas"
    )
    if abar > TERMINAL_FAIL:
        return Check("schedule: terminal SNR", "fail", text, fix)
    if abar > TERMINAL_WARN:
        return Check("schedule: terminal SNR", "warn", text, fix)
    return Check("schedule: terminal SNR", "pass", f"{text}: training reaches (nearly) pure noise")


def refused_corners(refused: list[TrainConfig], total: int) -> Check:
    """Corners of the search space whose schedule cannot work: a warning, not a failure — the study
    runs, and the objective ends each such trial before training (reason ``invalid_schedule``)."""
    reasons = "; ".join(str(schedule_refusal(c)).split(":")[0] + f" (ᾱ_T {_abar(c):.3g})" for c in refused)
    return Check(
        "schedule: search-space corners",
        "warn",
        f"{len(refused)} of {total} corners of the searched schedule settings never reach pure noise: {reasons}",
        "trials that draw them end at once with reason invalid_schedule and cost nothing; narrow the search "
        "space to stop drawing them",
    )


def _abar(cfg: TrainConfig) -> float:
    return terminal_alpha_bar(make_schedule(cfg))


def wasted_levels(schedule: NoiseSchedule, label: str) -> Check:
    """Timesteps are drawn uniformly; those at |log-SNR| > 8 teach almost nothing."""
    lam = schedule.log_snr
    high, low = float(np.mean(lam > 8.0)), float(np.mean(lam < -8.0))
    text = f"{label}: {high:.0%} of training timesteps at log-SNR > +8 (nearly clean), {low:.0%} below −8 (pure noise)"
    if high + low > WASTED_SHARE:
        return Check(
            "schedule: noise levels",
            "warn",
            text,
            "a third of the steps teach almost nothing; try the cosine or sigmoid schedule or a smaller beta_end",
        )
    return Check("schedule: noise levels", "pass", text)


def sampler_steps(values: list[int], timesteps: int, samplers: tuple[str, ...] = (DEFAULT_SAMPLER,)) -> Check:
    """The step counts a study may score, against the run's T and the fewest its samplers are trusted at."""
    steps = sorted(set(values))
    stride = f"{timesteps / max(steps):.3g}–{timesteps / min(steps):.3g}"
    names = " or ".join(sampler_facts(s).words for s in samplers)
    text = f"{names} steps {', '.join(map(str, steps))} of T={timesteps} (stride {stride})"
    few = [sampler_facts(s) for s in samplers if min(steps) < sampler_facts(s).fewest_steps]
    if few:
        fix = f"score {few[0].fewest_steps}–{10 * few[0].fewest_steps} steps too"
        return Check("sampling: steps", "warn", f"{text}: {few[0].few_steps_why}", fix)
    if max(steps) == timesteps:
        return Check("sampling: steps", "warn", f"{text}: as many steps as T saves no time", "10–100 steps are enough")
    return Check("sampling: steps", "pass", text)


def receptive_field(net: nn.Module, info: NetInfo, device: torch.device) -> Check:
    """How far one output pixel sees, measured: the extent of the input gradient of the centre
    output pixel (on a copy with perturbed weights, so zero-initialised layers pass gradients)."""
    probe = copy.deepcopy(net).float().to(device).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in probe.parameters():
            p.add_((torch.randn(p.shape, generator=gen) * 0.02).to(device))
    size = info.image_size
    x = torch.randn(1, info.channels, size, size, generator=gen).to(device).requires_grad_(True)
    labels = torch.zeros(1, dtype=torch.long, device=device) if info.conditional else None
    out = probe(x, torch.full((1,), 500.0, device=device), labels)
    out[0, :, size // 2, size // 2].sum().backward()
    assert x.grad is not None
    reach = x.grad.abs().sum(dim=(0, 1)) > 1e-7 * float(x.grad.abs().max())
    rows, cols = reach.any(dim=1).nonzero(), reach.any(dim=0).nonzero()
    extent = int(max(rows.max() - rows.min(), cols.max() - cols.min())) + 1 if rows.numel() else 0
    text = f"one output pixel sees {extent}×{extent} of the {size}×{size} px input"
    if extent < 0.75 * size:
        return Check(
            "network: receptive field",
            "warn",
            f"{text}: it cannot place objects larger than that",
            "add a resolution level, or self-attention at a low resolution (attention_resolutions)",
        )
    return Check("network: receptive field", "pass", text)


def supported_kimg(num_images: int) -> float:
    """The budget a training set supports before memorisation is likely (the rule of thumb below)."""
    return EPOCHS_BEFORE_MEMORISING * num_images / 1000


def data_budget(data: ImageData, num_parameters: int, max_kimg: float, conditional: bool) -> Check:
    """Rule of thumb: a network with more than PARAMS_PER_IMAGE parameters per training image starts to
    memorise after a few hundred epochs (memorisation of small sets: Somepalli et al. 2023, Gu et al.
    2023); FID can then improve while samples copy the training set."""
    n = int(data.train_images.shape[0])
    per_image = num_parameters / max(n, 1)
    epochs = max_kimg * 1000 / max(n, 1)
    supported = supported_kimg(n)
    per_class = Counter(data.train_labels.tolist())
    fewest = min(per_class.values()) if per_class else 0
    text = (
        f"{n} training images, {num_parameters:,} parameters ({per_image:,.0f} per image); "
        f"the budget of {max_kimg:g} kimg is {epochs:,.1f} epochs; the data supports about {supported:g} kimg "
        f"({EPOCHS_BEFORE_MEMORISING} epochs)"
    )
    if conditional and data.num_classes > 1:
        text += f"; fewest images in a class: {fewest}"
    if per_image > PARAMS_PER_IMAGE and epochs > EPOCHS_BEFORE_MEMORISING:
        return Check(
            "data: budget",
            "warn",
            f"{text}: a data-starved run, likely to memorise",
            f"keep kimg near {supported:g}, add images, use hflip/dropout, or a smaller network",
        )
    if conditional and 0 < fewest < 100:
        return Check("data: budget", "warn", text, "classes with under 100 images get weak class embeddings")
    return Check("data: budget", "pass", text)
